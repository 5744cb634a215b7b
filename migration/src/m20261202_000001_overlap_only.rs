//! One rule for "a patient takes a seat once": the overlap rule.
//!
//! An active appointment in a slot overlaps every other active appointment of the same
//! patient in that slot, so the overlap rule
//! ([`EX_APPOINTMENT_PATIENT_OVERLAP`](crate::EX_APPOINTMENT_PATIENT_OVERLAP): the exclusion
//! constraint on PostgreSQL, the triggers on SQLite) already refuses a second seat in it. The partial unique
//! index [`UQ_APPOINTMENT_ACTIVE_PATIENT`] said the same a second time, and every booking paid
//! for it: one more index entry written and probed in the statement that takes the seat
//! (9–20 % of that statement's throughput in pgbench, docs/benchmarks-history.md, "Eleventh pass"). Which
//! refusal a violation means (`ALREADY_BOOKED` or `OVERLAPPING_APPOINTMENT`) was already read
//! from the patient's appointments after the fact, whichever rule the database named.

use sea_orm_migration::prelude::*;

use crate::{m20261201_000001_lifecycle, UQ_APPOINTMENT_ACTIVE_PATIENT};

/// Drops the unique index the overlap rule covers.
pub(crate) struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261202_000001_overlap_only"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // Both databases spell it the same.
        manager.get_connection().execute_unprepared(&format!("DROP INDEX {UQ_APPOINTMENT_ACTIVE_PATIENT}")).await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.get_connection().execute_unprepared(&m20261201_000001_lifecycle::active_patient_index()).await?;
        Ok(())
    }
}
