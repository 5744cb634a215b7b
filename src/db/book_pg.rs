//! The booking as one PostgreSQL statement: the conditional seat update, the appointment
//! insert and the outbox insert as data-modifying CTEs, run outside an explicit transaction.
//!
//! A single statement is its own transaction, so this is exactly the booking of
//! [`crate::booking`] (one conditional update plus the inserts, all or nothing) in one round
//! trip instead of five (BEGIN, UPDATE, INSERT, INSERT, COMMIT). Every row lock is held for
//! that one statement only. SQLite has no data-modifying CTEs and keeps the transaction.

use sqlx::{postgres::PgRow, Row};

use super::{
    appointments::{self, InsertError, NewAppointment},
    entity::{appointment, time_slot},
    slots::{decode_error, slot_at},
    Db, StoreError,
};

const BOOK: &str = "\
WITH s AS (
  UPDATE time_slot SET booked_count = booked_count + 1, version = version + 1
  WHERE id = $1 AND booked_count < capacity AND start_at > $2
  RETURNING id, doctor_id, start_at, end_at, capacity, booked_count, version
), a AS (
  INSERT INTO appointment (slot_id, patient_id, status, booked_by, idempotency_key, request_hash, created_at)
  SELECT s.id, $3, 'BOOKED', $4, $5, $6, $2 FROM s
  RETURNING id, created_at
), o AS (
  INSERT INTO outbox (kind, appointment_id, slot_id, doctor_id, start_at, capacity, booked_count, version, created_at)
  SELECT 'BOOKED', a.id, s.id, s.doctor_id, s.start_at, s.capacity, s.booked_count, s.version, $2 FROM s, a
)
SELECT s.id, s.doctor_id, s.start_at, s.end_at, s.capacity, s.booked_count, s.version, a.id, a.created_at
FROM s, a";

/// Takes a seat and records the appointment and its outbox row, atomically. `Ok(None)` when
/// no seat was taken (not found, full or started); a unique violation is told apart like
/// [`appointments::insert`]'s, and then nothing was changed.
pub async fn book(
    db: &Db,
    new: NewAppointment<'_>,
) -> Result<Option<(time_slot::Model, appointment::Model)>, InsertError> {
    let query = sqlx::query(BOOK)
        .bind(new.slot_id)
        .bind(new.created_at)
        .bind(new.patient_id)
        .bind(new.booked_by)
        .bind(new.idempotency_key)
        .bind(new.request_hash);
    let rows = db.pg_fetch_all(query).await.map_err(appointments::classify)?;
    rows.first().map(|r| decode(r, &new)).transpose().map_err(InsertError::Store)
}

fn decode(r: &PgRow, new: &NewAppointment<'_>) -> Result<(time_slot::Model, appointment::Model), StoreError> {
    let slot = slot_at(r, 0)?;
    let appointment = appointment::Model {
        id: r.try_get(7).map_err(decode_error)?,
        slot_id: slot.id,
        patient_id: new.patient_id,
        status: appointment::BOOKED.to_owned(),
        booked_by: new.booked_by.to_owned(),
        idempotency_key: new.idempotency_key.to_owned(),
        request_hash: new.request_hash.to_owned(),
        created_at: r.try_get(8).map_err(decode_error)?,
        cancelled_at: None,
    };
    Ok((slot, appointment))
}
