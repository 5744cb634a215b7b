//! The booking as one PostgreSQL statement: the conditional seat update, the appointment
//! insert and the outbox insert as data-modifying CTEs, run outside an explicit transaction.
//!
//! A single statement is its own transaction, so this is exactly the booking of
//! [`crate::booking`] (one conditional update plus the inserts, all or nothing) in one round
//! trip instead of five (BEGIN, UPDATE, INSERT, INSERT, COMMIT). Every row lock is held for
//! that one statement only. SQLite has no data-modifying CTEs and keeps the transaction.

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DbBackend, QueryResult, Statement};

use super::{
    appointments::{self, InsertError, NewAppointment},
    entity::{appointment, time_slot},
    StoreError,
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
SELECT s.id AS slot_id, s.doctor_id, s.start_at, s.end_at, s.capacity, s.booked_count, s.version,
       a.id AS appointment_id, a.created_at
FROM s, a";

/// Takes a seat and records the appointment and its outbox row, atomically. `Ok(None)` when
/// no seat was taken (not found, full or started); a unique violation is told apart like
/// [`appointments::insert`]'s, and then nothing was changed.
pub async fn book(
    conn: &impl ConnectionTrait,
    new: NewAppointment<'_>,
) -> Result<Option<(time_slot::Model, appointment::Model)>, InsertError> {
    let stmt = Statement::from_sql_and_values(
        DbBackend::Postgres,
        BOOK,
        [
            new.slot_id.into(),
            new.created_at.into(),
            new.patient_id.into(),
            new.booked_by.into(),
            new.idempotency_key.into(),
            new.request_hash.into(),
        ],
    );
    let row = conn.query_one(stmt).await.map_err(appointments::classify)?;
    row.map(|r| decode(&r, &new)).transpose().map_err(InsertError::Store)
}

fn decode(r: &QueryResult, new: &NewAppointment<'_>) -> Result<(time_slot::Model, appointment::Model), StoreError> {
    let slot = time_slot::Model {
        id: r.try_get("", "slot_id")?,
        doctor_id: r.try_get("", "doctor_id")?,
        start_at: r.try_get::<DateTime<Utc>>("", "start_at")?,
        end_at: r.try_get::<DateTime<Utc>>("", "end_at")?,
        capacity: r.try_get("", "capacity")?,
        booked_count: r.try_get("", "booked_count")?,
        version: r.try_get("", "version")?,
    };
    let appointment = appointment::Model {
        id: r.try_get("", "appointment_id")?,
        slot_id: slot.id,
        patient_id: new.patient_id,
        status: appointment::BOOKED.to_owned(),
        booked_by: new.booked_by.to_owned(),
        idempotency_key: new.idempotency_key.to_owned(),
        request_hash: new.request_hash.to_owned(),
        created_at: r.try_get::<DateTime<Utc>>("", "created_at")?,
        cancelled_at: None,
    };
    Ok((slot, appointment))
}
