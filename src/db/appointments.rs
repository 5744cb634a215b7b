//! Queries of the `appointment` table.

use chrono::{DateTime, Utc};
use migration::{UQ_APPOINTMENT_ACTIVE_PATIENT, UQ_APPOINTMENT_CALLER_KEY};
use sea_orm::{
    sea_query::{Expr, ExprTrait, Query},
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

/// Tells the unique violations of an appointment insert apart by constraint.
pub(crate) fn classify(err: DbErr) -> InsertError {
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

/// What a booking attempt on a slot known to be full still needs, in one indexed read with no
/// transaction and no slot lock: the caller's appointment with this key (on any slot), and
/// whether the patient holds a BOOKED seat in the slot.
pub async fn key_or_seat(
    conn: &impl ConnectionTrait,
    booked_by: &str,
    key: &str,
    slot_id: i64,
    patient_id: i64,
) -> Result<(Option<appointment::Model>, bool), StoreError> {
    use sea_orm::Condition;
    let rows = appointment::Entity::find()
        .filter(
            Condition::any()
                .add(
                    Condition::all()
                        .add(appointment::Column::BookedBy.eq(booked_by))
                        .add(appointment::Column::IdempotencyKey.eq(key)),
                )
                .add(
                    Condition::all()
                        .add(appointment::Column::SlotId.eq(slot_id))
                        .add(appointment::Column::PatientId.eq(patient_id))
                        .add(appointment::Column::Status.eq(appointment::BOOKED)),
                ),
        )
        .limit(2)
        .all(conn)
        .await?;
    let holds_seat =
        rows.iter().any(|r| r.slot_id == slot_id && r.patient_id == patient_id && r.status == appointment::BOOKED);
    let by_key = rows.into_iter().find(|r| r.booked_by == booked_by && r.idempotency_key == key);
    Ok((by_key, holds_seat))
}

/// One lookup of [`key_or_seat`] in a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyOrSeat {
    /// The caller's scope.
    pub booked_by: String,
    /// The caller's idempotency key.
    pub key: String,
    /// The slot.
    pub slot_id: i64,
    /// The patient.
    pub patient_id: i64,
}

/// What [`key_or_seats_pg`] found for one attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyOrSeatFound {
    /// The caller's appointment with the key (on any slot).
    pub by_key: Option<appointment::Model>,
    /// Whether the patient holds a BOOKED appointment in the slot.
    pub holds_seat: bool,
    /// The slot as it is now (not locked), if it exists.
    pub slot: Option<time_slot::Model>,
}

/// [`key_or_seat`] plus the slot row for many attempts, in one PostgreSQL statement with one
/// row per attempt (in order): each probe is an index lookup.
pub async fn key_or_seats_pg(db: &super::Db, lookups: &[KeyOrSeat]) -> Result<Vec<KeyOrSeatFound>, StoreError> {
    use super::slots::{decode_error, slot_at};
    use sqlx::Row;
    const SQL: &str = "\
        SELECT l.i, s.id, s.doctor_id, s.start_at, s.end_at, s.capacity, s.booked_count, s.version, \
               k.id, k.slot_id, k.patient_id, k.status, k.request_hash, k.created_at, k.cancelled_at, \
               EXISTS (SELECT 1 FROM appointment h WHERE h.slot_id = l.slot_id AND h.patient_id = l.patient_id \
                       AND h.status = 'BOOKED') AS held \
        FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[]) WITH ORDINALITY \
             AS l(booked_by, key, slot_id, patient_id, i) \
        LEFT JOIN time_slot s ON s.id = l.slot_id \
        LEFT JOIN LATERAL (SELECT * FROM appointment a WHERE a.booked_by = l.booked_by \
                           AND a.idempotency_key = l.key) k ON true \
        ORDER BY l.i";
    let query = sqlx::query(SQL)
        .bind(lookups.iter().map(|l| l.booked_by.as_str()).collect::<Vec<_>>())
        .bind(lookups.iter().map(|l| l.key.as_str()).collect::<Vec<_>>())
        .bind(lookups.iter().map(|l| l.slot_id).collect::<Vec<_>>())
        .bind(lookups.iter().map(|l| l.patient_id).collect::<Vec<_>>());
    let rows = db.pg_fetch_all(query).await?;
    if rows.len() != lookups.len() {
        return Err(StoreError::Inconsistent("batched lookup answered out of order".into()));
    }
    let mut found = Vec::with_capacity(rows.len());
    for (n, (row, l)) in rows.iter().zip(lookups).enumerate() {
        let i: i64 = row.try_get(0).map_err(decode_error)?;
        if i != n as i64 + 1 {
            return Err(StoreError::Inconsistent("batched lookup answered out of order".into()));
        }
        let slot = match row.try_get::<Option<i64>, _>(1).map_err(decode_error)? {
            Some(_) => Some(slot_at(row, 1)?),
            None => None,
        };
        let by_key = match row.try_get::<Option<i64>, _>(8).map_err(decode_error)? {
            Some(id) => Some(appointment::Model {
                id,
                slot_id: row.try_get(9).map_err(decode_error)?,
                patient_id: row.try_get(10).map_err(decode_error)?,
                status: row.try_get(11).map_err(decode_error)?,
                booked_by: l.booked_by.clone(),
                idempotency_key: l.key.clone(),
                request_hash: row.try_get(12).map_err(decode_error)?,
                created_at: row.try_get(13).map_err(decode_error)?,
                cancelled_at: row.try_get(14).map_err(decode_error)?,
            }),
            None => None,
        };
        found.push(KeyOrSeatFound { by_key, holds_seat: row.try_get(15).map_err(decode_error)?, slot });
    }
    Ok(found)
}
