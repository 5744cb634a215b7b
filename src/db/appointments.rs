//! Queries of the `appointment` table.

use chrono::{DateTime, Utc};
use migration::{UQ_APPOINTMENT_ACTIVE_PATIENT, UQ_APPOINTMENT_CALLER_KEY};
use sea_orm::{
    sea_query::{Expr, Query},
    ActiveModelTrait,
    ActiveValue::Set,
    ColumnTrait, ConnectionTrait, DbErr, EntityTrait, FromQueryResult, QueryFilter, QueryOrder, QuerySelect,
};

use super::{
    entity::{appointment, time_slot},
    is_unique_violation, StoreError,
};

/// An appointment with the doctor of its slot: everything the visibility rule needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppointmentRecord {
    /// The row.
    pub appointment: appointment::Model,
    /// The doctor whose slot it is in.
    pub doctor_id: i64,
}

#[derive(FromQueryResult)]
struct Row {
    id: i64,
    slot_id: i64,
    patient_id: i64,
    status: String,
    booked_by: String,
    idempotency_key: String,
    request_hash: String,
    created_at: DateTime<Utc>,
    cancelled_at: Option<DateTime<Utc>>,
    doctor_id: i64,
}

impl From<Row> for AppointmentRecord {
    fn from(r: Row) -> Self {
        Self {
            appointment: appointment::Model {
                id: r.id,
                slot_id: r.slot_id,
                patient_id: r.patient_id,
                status: r.status,
                booked_by: r.booked_by,
                idempotency_key: r.idempotency_key,
                request_hash: r.request_hash,
                created_at: r.created_at,
                cancelled_at: r.cancelled_at,
            },
            doctor_id: r.doctor_id,
        }
    }
}

/// Which appointments a listing selects.
#[derive(Clone, Debug)]
pub enum Filter {
    /// Held by this patient.
    Patient(i64),
    /// In this doctor's slots.
    Doctor(i64),
    /// Created by this caller scope.
    BookedBy(String),
    /// These ids.
    Ids(Vec<i64>),
}

/// Appointments matching `filter`, newest first, at most `limit`.
pub async fn list(
    conn: &impl ConnectionTrait,
    filter: Filter,
    limit: u64,
) -> Result<Vec<AppointmentRecord>, StoreError> {
    use appointment::Column as A;
    let mut q = Query::select();
    q.columns([
        (appointment::Entity, A::Id),
        (appointment::Entity, A::SlotId),
        (appointment::Entity, A::PatientId),
        (appointment::Entity, A::Status),
        (appointment::Entity, A::BookedBy),
        (appointment::Entity, A::IdempotencyKey),
        (appointment::Entity, A::RequestHash),
        (appointment::Entity, A::CreatedAt),
        (appointment::Entity, A::CancelledAt),
    ])
    .column((time_slot::Entity, time_slot::Column::DoctorId))
    .from(appointment::Entity)
    .inner_join(
        time_slot::Entity,
        Expr::col((time_slot::Entity, time_slot::Column::Id)).equals((appointment::Entity, A::SlotId)),
    );
    match filter {
        Filter::Patient(p) => q.and_where(Expr::col((appointment::Entity, A::PatientId)).eq(p)),
        Filter::Doctor(d) => q.and_where(Expr::col((time_slot::Entity, time_slot::Column::DoctorId)).eq(d)),
        Filter::BookedBy(s) => q.and_where(Expr::col((appointment::Entity, A::BookedBy)).eq(s)),
        Filter::Ids(ids) => q.and_where(Expr::col((appointment::Entity, A::Id)).is_in(ids)),
    };
    q.order_by((appointment::Entity, A::CreatedAt), sea_orm::Order::Desc)
        .order_by((appointment::Entity, A::Id), sea_orm::Order::Desc)
        .limit(limit);
    let stmt = conn.get_database_backend().build(&q);
    Ok(Row::find_by_statement(stmt).all(conn).await?.into_iter().map(Into::into).collect())
}

/// One appointment with its slot's doctor.
pub async fn find_record(conn: &impl ConnectionTrait, id: i64) -> Result<Option<AppointmentRecord>, StoreError> {
    Ok(list(conn, Filter::Ids(vec![id]), 1).await?.pop())
}

/// The appointment a caller made with an idempotency key, if any.
pub async fn find_by_key(
    conn: &impl ConnectionTrait,
    booked_by: &str,
    key: &str,
) -> Result<Option<appointment::Model>, StoreError> {
    Ok(appointment::Entity::find()
        .filter(appointment::Column::BookedBy.eq(booked_by))
        .filter(appointment::Column::IdempotencyKey.eq(key))
        .one(conn)
        .await?)
}

/// Whether the patient holds a BOOKED appointment in the slot.
pub async fn holds_seat(conn: &impl ConnectionTrait, slot_id: i64, patient_id: i64) -> Result<bool, StoreError> {
    Ok(appointment::Entity::find()
        .select_only()
        .column(appointment::Column::Id)
        .filter(appointment::Column::SlotId.eq(slot_id))
        .filter(appointment::Column::PatientId.eq(patient_id))
        .filter(appointment::Column::Status.eq(appointment::BOOKED))
        .into_tuple::<i64>()
        .one(conn)
        .await?
        .is_some())
}

/// A BOOKED appointment to insert.
#[derive(Clone, Debug)]
pub struct NewAppointment<'a> {
    /// The slot.
    pub slot_id: i64,
    /// The patient.
    pub patient_id: i64,
    /// The booking caller's scope.
    pub booked_by: &'a str,
    /// The caller's idempotency key.
    pub idempotency_key: &'a str,
    /// Fingerprint of the request.
    pub request_hash: &'a str,
    /// Booking time.
    pub created_at: DateTime<Utc>,
}

/// Why an insert was refused by a unique constraint.
#[derive(Debug, thiserror::Error)]
pub enum InsertError {
    /// The caller's key was used by a concurrent request that committed first.
    #[error("idempotency key taken")]
    KeyTaken,
    /// The patient already holds a BOOKED appointment in the slot.
    #[error("patient already holds the slot")]
    AlreadyBooked,
    /// Anything else.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Inserts a BOOKED appointment, telling unique violations apart by constraint.
pub async fn insert(conn: &impl ConnectionTrait, new: NewAppointment<'_>) -> Result<appointment::Model, InsertError> {
    let row = appointment::ActiveModel {
        slot_id: Set(new.slot_id),
        patient_id: Set(new.patient_id),
        status: Set(appointment::BOOKED.to_owned()),
        booked_by: Set(new.booked_by.to_owned()),
        idempotency_key: Set(new.idempotency_key.to_owned()),
        request_hash: Set(new.request_hash.to_owned()),
        created_at: Set(new.created_at),
        cancelled_at: Set(None),
        ..Default::default()
    };
    row.insert(conn).await.map_err(classify)
}

fn classify(err: DbErr) -> InsertError {
    if is_unique_violation(&err, UQ_APPOINTMENT_CALLER_KEY, "appointment.idempotency_key") {
        InsertError::KeyTaken
    } else if is_unique_violation(&err, UQ_APPOINTMENT_ACTIVE_PATIENT, "appointment.patient_id") {
        InsertError::AlreadyBooked
    } else {
        InsertError::Store(err.into())
    }
}

/// The cancel's conditional transition BOOKED → CANCELLED. `None` when the appointment was
/// not BOOKED (already cancelled, or by a concurrent cancel that won).
pub async fn mark_cancelled(
    conn: &impl ConnectionTrait,
    id: i64,
    now: DateTime<Utc>,
) -> Result<Option<appointment::Model>, StoreError> {
    let mut rows = appointment::Entity::update_many()
        .col_expr(appointment::Column::Status, Expr::value(appointment::CANCELLED))
        .col_expr(appointment::Column::CancelledAt, Expr::value(now))
        .filter(appointment::Column::Id.eq(id))
        .filter(appointment::Column::Status.eq(appointment::BOOKED))
        .exec_with_returning(conn)
        .await?;
    Ok(rows.pop())
}

/// Appointments by id (for the DataLoader), unordered.
pub async fn find_many(conn: &impl ConnectionTrait, ids: &[i64]) -> Result<Vec<appointment::Model>, StoreError> {
    Ok(appointment::Entity::find()
        .filter(appointment::Column::Id.is_in(ids.iter().copied()))
        .order_by_asc(appointment::Column::Id)
        .all(conn)
        .await?)
}
