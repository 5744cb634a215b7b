//! Queries of the `waitlist_entry` table: joins told apart by constraint, the waiters of freed
//! seats oldest first, and the conditional status transitions of an entry.

use chrono::{DateTime, Utc};
use migration::{UQ_WAITLIST_CALLER_KEY, UQ_WAITLIST_OPEN_ENTRY};
use sea_orm::{
    sea_query::Expr, ActiveValue::Set, ColumnTrait, Condition, ConnectionTrait, DbErr, EntityTrait, QueryFilter,
    QueryOrder, QuerySelect,
};

use super::{
    entity::{time_slot, waitlist_entry as entry},
    is_unique_violation, StoreError,
};
use crate::model::{DayRange, WaitlistStatus};

/// An entry to insert (`WAITING`).
#[derive(Clone, Debug)]
pub struct NewEntry<'a> {
    /// The doctor's day waited for.
    pub day: DayRange,
    /// That day, `YYYY-MM-DD`.
    pub date: &'a str,
    /// The patient.
    pub patient_id: i64,
    /// The scope of the caller who makes it.
    pub booked_by: &'a str,
    /// The caller's idempotency key.
    pub idempotency_key: &'a str,
    /// Fingerprint of the request.
    pub request_hash: &'a str,
    /// When.
    pub created_at: DateTime<Utc>,
}

/// Why a join was refused by a constraint.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// The caller's key was used by a concurrent request that committed first.
    #[error("idempotency key taken")]
    KeyTaken,
    /// The patient already has an open entry for this doctor and day.
    #[error("already on the waitlist")]
    AlreadyWaiting,
    /// Anything else.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<DbErr> for JoinError {
    fn from(err: DbErr) -> Self {
        if is_unique_violation(&err, UQ_WAITLIST_CALLER_KEY, "waitlist_entry.idempotency_key") {
            Self::KeyTaken
        } else if is_unique_violation(&err, UQ_WAITLIST_OPEN_ENTRY, "waitlist_entry.patient_id") {
            Self::AlreadyWaiting
        } else {
            Self::Store(err.into())
        }
    }
}

/// Inserts a `WAITING` entry.
pub async fn insert(conn: &impl ConnectionTrait, new: &NewEntry<'_>) -> Result<entry::Model, JoinError> {
    let row = entry::ActiveModel {
        doctor_id: Set(new.day.doctor_id),
        date: Set(new.date.to_owned()),
        day_from: Set(new.day.from),
        day_to: Set(new.day.to),
        patient_id: Set(new.patient_id),
        status: Set(WaitlistStatus::Waiting.as_str().to_owned()),
        booked_by: Set(new.booked_by.to_owned()),
        idempotency_key: Set(new.idempotency_key.to_owned()),
        request_hash: Set(new.request_hash.to_owned()),
        created_at: Set(new.created_at),
        updated_at: Set(new.created_at),
        offer_appointment_id: Set(None),
        ..Default::default()
    };
    Ok(entry::Entity::insert(row).exec_with_returning(conn).await?)
}

/// One entry by id.
pub async fn find(conn: &impl ConnectionTrait, id: i64) -> Result<Option<entry::Model>, StoreError> {
    Ok(entry::Entity::find_by_id(id).one(conn).await?)
}

/// The entry a caller made with an idempotency key, if any.
pub async fn find_by_key(
    conn: &impl ConnectionTrait,
    booked_by: &str,
    key: &str,
) -> Result<Option<entry::Model>, StoreError> {
    Ok(entry::Entity::find()
        .filter(entry::Column::BookedBy.eq(booked_by))
        .filter(entry::Column::IdempotencyKey.eq(key))
        .one(conn)
        .await?)
}

/// Which entries a listing selects.
#[derive(Clone, Debug)]
pub enum Filter {
    /// The patient's.
    Patient(i64),
    /// Made by this caller scope.
    BookedBy(String),
    /// Every entry.
    All,
}

/// Entries matching `filter`, newest first, at most `limit`.
pub async fn list(conn: &impl ConnectionTrait, filter: Filter, limit: u64) -> Result<Vec<entry::Model>, StoreError> {
    let q = entry::Entity::find().order_by_desc(entry::Column::CreatedAt).order_by_desc(entry::Column::Id);
    let q = match filter {
        Filter::Patient(p) => q.filter(entry::Column::PatientId.eq(p)),
        Filter::BookedBy(s) => q.filter(entry::Column::BookedBy.eq(s)),
        Filter::All => q,
    };
    Ok(q.limit(limit).all(conn).await?)
}

/// The `WAITING` entries for the days of `slots` (each slot's doctor, and the doctor's day it
/// starts on), oldest first: one index range per doctor.
pub async fn waiting_for(
    conn: &impl ConnectionTrait,
    slots: &[time_slot::Model],
) -> Result<Vec<entry::Model>, StoreError> {
    let (Some(first), Some(last)) = (slots.iter().map(|s| s.start_at).min(), slots.iter().map(|s| s.start_at).max())
    else {
        return Ok(Vec::new());
    };
    let mut doctors: Vec<i64> = slots.iter().map(|s| s.doctor_id).collect();
    doctors.sort_unstable();
    doctors.dedup();
    let candidates = entry::Entity::find()
        .filter(entry::Column::Status.eq(WaitlistStatus::Waiting.as_str()))
        .filter(entry::Column::DoctorId.is_in(doctors))
        .filter(entry::Column::DayFrom.lte(last))
        .filter(entry::Column::DayTo.gt(first))
        .order_by_asc(entry::Column::Id)
        .all(conn)
        .await?;
    Ok(candidates)
}

/// The conditional transition `WAITING` → `OFFERED` with the hold made for it.
pub async fn mark_offered(
    conn: &impl ConnectionTrait,
    id: i64,
    offer: i64,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let done = entry::Entity::update_many()
        .col_expr(entry::Column::Status, Expr::value(WaitlistStatus::Offered.as_str()))
        .col_expr(entry::Column::OfferAppointmentId, Expr::value(offer))
        .col_expr(entry::Column::UpdatedAt, Expr::value(now))
        .filter(entry::Column::Id.eq(id))
        .filter(entry::Column::Status.eq(WaitlistStatus::Waiting.as_str()))
        .exec(conn)
        .await?;
    Ok(done.rows_affected == 1)
}

/// The conditional transition `WAITING` → `LEFT`. `None` when the entry was not waiting.
pub async fn mark_left(
    conn: &impl ConnectionTrait,
    id: i64,
    now: DateTime<Utc>,
) -> Result<Option<entry::Model>, StoreError> {
    let mut rows = entry::Entity::update_many()
        .col_expr(entry::Column::Status, Expr::value(WaitlistStatus::Left.as_str()))
        .col_expr(entry::Column::UpdatedAt, Expr::value(now))
        .filter(entry::Column::Id.eq(id))
        .filter(entry::Column::Status.eq(WaitlistStatus::Waiting.as_str()))
        .exec_with_returning(conn)
        .await?;
    Ok(rows.pop())
}

/// Settles the `OFFERED` entries whose offer is one of `appointments`: `FULFILLED` when it was
/// confirmed, `LAPSED` when it expired or was cancelled. Returns the entries this changed.
pub async fn settle_offers(
    conn: &impl ConnectionTrait,
    appointments: &[i64],
    to: WaitlistStatus,
    now: DateTime<Utc>,
) -> Result<Vec<entry::Model>, StoreError> {
    if appointments.is_empty() {
        return Ok(Vec::new());
    }
    Ok(entry::Entity::update_many()
        .col_expr(entry::Column::Status, Expr::value(to.as_str()))
        .col_expr(entry::Column::UpdatedAt, Expr::value(now))
        .filter(entry::Column::OfferAppointmentId.is_in(appointments.iter().copied()))
        .filter(entry::Column::Status.eq(WaitlistStatus::Offered.as_str()))
        .exec_with_returning(conn)
        .await?)
}

/// Points the offer of an entry at the appointment its hold was rescheduled to.
pub async fn move_offer(conn: &impl ConnectionTrait, from: i64, to: i64) -> Result<(), StoreError> {
    entry::Entity::update_many()
        .col_expr(entry::Column::OfferAppointmentId, Expr::value(to))
        .filter(
            Condition::all()
                .add(entry::Column::OfferAppointmentId.eq(from))
                .add(entry::Column::Status.eq(WaitlistStatus::Offered.as_str())),
        )
        .exec(conn)
        .await?;
    Ok(())
}
