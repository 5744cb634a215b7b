//! Database migrations of clinic-booking.
//!
//! One migration set runs unchanged on PostgreSQL and on SQLite: tables are declared with
//! sea-query's schema builder, and the few statements the builder cannot express (the partial
//! unique index) are plain SQL that both databases accept.
//!
//! The constraints here are the last line of defence of the booking invariants; the service
//! never relies on them alone, but it never relies on itself alone either:
//! - `time_slot`: `CHECK (capacity > 0)`, `CHECK (booked_count BETWEEN 0 AND capacity)`,
//!   `UNIQUE (doctor_id, start_at)`;
//! - `appointment`: one BOOKED appointment per (slot, patient) (partial unique index) and one
//!   appointment per (caller, idempotency key).

pub use sea_orm_migration::prelude::*;

mod m20261130_000001_initial;

/// The ordered list of every migration of the service.
pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![Box::new(m20261130_000001_initial::Migration)]
    }
}

/// Name of the unique constraint on (caller, idempotency key); booking tells a raced retry
/// apart from other unique violations by it.
pub const UQ_APPOINTMENT_CALLER_KEY: &str = "uq_appointment_caller_key";
/// Name of the partial unique index "one BOOKED appointment per (slot, patient)".
pub const UQ_APPOINTMENT_ACTIVE_PATIENT: &str = "uq_appointment_active_patient";
