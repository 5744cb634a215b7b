//! A one-slot booking or hold as one PostgreSQL statement: the conditional seat update, the
//! appointment insert and the outbox insert as data-modifying CTEs, run outside an explicit
//! transaction.
//!
//! A single statement is its own transaction, so this is exactly the general form
//! ([`super::seats::take_in_transaction`]: one conditional update plus the inserts, all or
//! nothing) in one round trip instead of five (BEGIN, UPDATE, INSERT, INSERT, COMMIT). Every
//! row lock is held for that one statement only. Its first step takes the patient's write lock
//! ([`appointments::lock_patient`]), before the slot's row. [`super::seats::take`] chooses it;
//! SQLite has no data-modifying CTEs and keeps the transaction, and so do longer appointments
//! (several slots) and reschedules.

use chrono::{DateTime, Utc};
use sqlx::{postgres::PgRow, Row};

use super::{
    appointments::{self, InsertError, NewAppointment},
    entity::{appointment, time_slot},
    rows::{decode_error, slot_at, SLOT_WIDTH},
    Db, StoreError,
};

const BOOK: &str = concat!(
    "WITH l AS MATERIALIZED (SELECT pg_advisory_xact_lock(202440705, hashint8($3))), s AS (
  UPDATE time_slot SET booked_count = booked_count + 1, version = version + 1
  WHERE id = $1 AND booked_count < capacity AND start_at > $2 AND closed_at IS NULL AND EXISTS (SELECT FROM l)
  RETURNING *
), a AS (
  INSERT INTO appointment (slot_id, patient_id, status, booked_by, idempotency_key, request_hash, created_at,
                           start_at, end_at, slot_count, expires_at)
  SELECT s.id, $3, $7, $4, $5, $6, $2, s.start_at, s.end_at, 1, $8 FROM s
  RETURNING id
), o AS (
  INSERT INTO outbox (kind, appointment_id, slot_id, doctor_id, start_at, capacity, booked_count, version, created_at,
                      slot_closed, appointment_status, appointment_expires_at, trace_context)
  SELECT $7, a.id, s.id, s.doctor_id, s.start_at, s.capacity, s.booked_count, s.version, $2, false, $7, $8, $9 FROM s, a
)
SELECT ",
    slot_columns!("s"),
    ", a.id FROM s, a"
);

/// Takes a seat in `slot_id` and records the appointment (`new.status`: booked or held) and
/// its outbox row, atomically. `Ok(None)` when no seat was taken (not found, full, closed or
/// started); a constraint violation is told apart like [`appointments::insert`]'s, and then
/// nothing was changed.
pub async fn book(
    db: &Db,
    slot_id: i64,
    new: &NewAppointment<'_>,
) -> Result<Option<(time_slot::Model, appointment::Model)>, InsertError> {
    let query = sqlx::query(BOOK)
        .bind(slot_id)
        .bind(new.created_at)
        .bind(new.patient_id)
        .bind(new.booked_by)
        .bind(new.idempotency_key)
        .bind(new.request_hash)
        .bind(new.status.as_str())
        .bind(new.expires_at)
        .bind(super::outbox::trace_context());
    let rows = db.pg_fetch_all("UPDATE", query).await.map_err(appointments::classify)?;
    rows.first().map(|r| decode(r, new)).transpose().map_err(InsertError::Store)
}

fn decode(r: &PgRow, new: &NewAppointment<'_>) -> Result<(time_slot::Model, appointment::Model), StoreError> {
    let slot = slot_at(r, 0)?;
    let id = r.try_get(SLOT_WIDTH).map_err(decode_error)?;
    let appointment = new_row(id, &slot, new, new.created_at);
    Ok((slot, appointment))
}

/// The row [`BOOK`] inserted, as the database holds it.
fn new_row(id: i64, slot: &time_slot::Model, new: &NewAppointment<'_>, at: DateTime<Utc>) -> appointment::Model {
    appointment::Model {
        id,
        slot_id: slot.id,
        patient_id: new.patient_id,
        status: new.status.as_str().to_owned(),
        booked_by: new.booked_by.to_owned(),
        idempotency_key: new.idempotency_key.to_owned(),
        request_hash: new.request_hash.to_owned(),
        created_at: at,
        cancelled_at: None,
        start_at: slot.start_at,
        end_at: slot.end_at,
        slot_count: 1,
        expires_at: new.expires_at,
        cancelled_by: None,
        rescheduled_from: None,
        rescheduled_to: None,
        first_booked_by: None,
        arrived_at: None,
        completed_at: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_statement_takes_the_patients_lock_of_its_patient_parameter() {
        assert!(BOOK.contains(&appointments::patient_lock_sql(3)), "{BOOK}");
    }
}
