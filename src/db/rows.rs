//! Rows of the hot PostgreSQL statements, decoded by position.
//!
//! Decoding by position cost a fraction of sea-orm's decoding by column name (which tries
//! several timestamp types per value). The column lists below and the decoders beside them
//! are the one place where the order is written down: a statement selects
//! `slot_columns!("s")` and decodes with [`slot_at`] from that position.

use sqlx::{postgres::PgRow, Row};

use super::{
    entity::{appointment, time_slot},
    StoreError,
};

/// The `time_slot` columns in [`slot_at`]'s order, qualified by a table alias.
macro_rules! slot_columns {
    ($a:literal) => {
        concat!(
            $a,
            ".id, ",
            $a,
            ".doctor_id, ",
            $a,
            ".start_at, ",
            $a,
            ".end_at, ",
            $a,
            ".capacity, ",
            $a,
            ".booked_count, ",
            $a,
            ".version, ",
            $a,
            ".closed_at, ",
            $a,
            ".closed_reason"
        )
    };
}

/// The `appointment` columns in [`appointment_at`]'s order, qualified by a table alias.
macro_rules! appointment_columns {
    ($a:literal) => {
        concat!(
            $a,
            ".id, ",
            $a,
            ".slot_id, ",
            $a,
            ".patient_id, ",
            $a,
            ".status, ",
            $a,
            ".booked_by, ",
            $a,
            ".idempotency_key, ",
            $a,
            ".request_hash, ",
            $a,
            ".created_at, ",
            $a,
            ".cancelled_at, ",
            $a,
            ".start_at, ",
            $a,
            ".end_at, ",
            $a,
            ".slot_count, ",
            $a,
            ".expires_at, ",
            $a,
            ".cancelled_by, ",
            $a,
            ".rescheduled_from, ",
            $a,
            ".rescheduled_to, ",
            $a,
            ".first_booked_by, ",
            $a,
            ".arrived_at, ",
            $a,
            ".completed_at"
        )
    };
}

/// How many columns `slot_columns!` names.
pub(crate) const SLOT_WIDTH: usize = 9;
/// How many columns `appointment_columns!` names.
pub(crate) const APPOINTMENT_WIDTH: usize = 19;

/// The `time_slot` columns of `row` from position `at` on, as `slot_columns!` lists them.
pub(crate) fn slot_at(row: &PgRow, at: usize) -> Result<time_slot::Model, StoreError> {
    Ok(time_slot::Model {
        id: get(row, at)?,
        doctor_id: get(row, at + 1)?,
        start_at: get(row, at + 2)?,
        end_at: get(row, at + 3)?,
        capacity: get(row, at + 4)?,
        booked_count: get(row, at + 5)?,
        version: get(row, at + 6)?,
        closed_at: get(row, at + 7)?,
        closed_reason: get(row, at + 8)?,
    })
}

/// The `appointment` columns of `row` from position `at` on, as `appointment_columns!` lists
/// them.
pub(crate) fn appointment_at(row: &PgRow, at: usize) -> Result<appointment::Model, StoreError> {
    Ok(appointment::Model {
        id: get(row, at)?,
        slot_id: get(row, at + 1)?,
        patient_id: get(row, at + 2)?,
        status: get(row, at + 3)?,
        booked_by: get(row, at + 4)?,
        idempotency_key: get(row, at + 5)?,
        request_hash: get(row, at + 6)?,
        created_at: get(row, at + 7)?,
        cancelled_at: get(row, at + 8)?,
        start_at: get(row, at + 9)?,
        end_at: get(row, at + 10)?,
        slot_count: get(row, at + 11)?,
        expires_at: get(row, at + 12)?,
        cancelled_by: get(row, at + 13)?,
        rescheduled_from: get(row, at + 14)?,
        rescheduled_to: get(row, at + 15)?,
        first_booked_by: get(row, at + 16)?,
        arrived_at: get(row, at + 17)?,
        completed_at: get(row, at + 18)?,
    })
}

fn get<'r, T>(row: &'r PgRow, at: usize) -> Result<T, StoreError>
where
    T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    row.try_get(at).map_err(decode_error)
}

/// A column that does not decode as expected: the schema and the code disagree.
pub(crate) fn decode_error(e: sqlx::Error) -> StoreError {
    StoreError::Inconsistent(format!("unexpected column: {e}"))
}
