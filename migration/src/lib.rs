//! Database migrations of clinic-booking.
//!
//! One migration set serves PostgreSQL and SQLite. The initial tables are declared with
//! sea-query's schema builder; what it cannot express (partial indexes, the exclusion
//! constraint, SQLite's table rebuilds and triggers) is plain SQL, per database where the two
//! differ.
//!
//! The constraints here are the last line of defence of the booking invariants; the service
//! never relies on them alone, but it never relies on itself alone either:
//! - `time_slot`: `CHECK (capacity > 0)`, `CHECK (booked_count BETWEEN 0 AND capacity)`,
//!   `UNIQUE (doctor_id, start_at)`;
//! - `appointment`: one appointment per (caller, idempotency key), no two active appointments
//!   of one patient overlapping in time (exclusion constraint; triggers on SQLite), which also
//!   means one active appointment per (slot, patient), and CHECKs tying each status to its
//!   timestamps.

pub use sea_orm_migration::prelude::*;

mod m20261130_000001_initial;
mod m20261201_000001_lifecycle;
mod m20261201_000002_messages;
mod m20261201_000003_webhooks;
mod m20261201_000004_waitlist;
mod m20261202_000001_overlap_only;
mod m20261202_000002_compact_checks;
mod m20261204_000001_event_state;
mod m20261204_000002_retention;
mod m20261204_000003_contacts_per_booker;
mod m20261205_000001_working_hours;
mod m20261205_000002_find_slots;
mod m20261206_000001_slot_specialty;
mod m20261207_000010_front_desk;
mod m20261207_000020_patient_identity;
mod m20261207_000040_trace_context;

pub use m20261207_000010_front_desk::{APPOINTMENT_STATUSES, OVERLAPPING_STATUSES};

/// The ordered list of every migration of the service.
pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261130_000001_initial::Migration),
            Box::new(m20261201_000001_lifecycle::Migration),
            Box::new(m20261201_000002_messages::Migration),
            Box::new(m20261201_000003_webhooks::Migration),
            Box::new(m20261201_000004_waitlist::Migration),
            Box::new(m20261202_000001_overlap_only::Migration),
            Box::new(m20261202_000002_compact_checks::Migration),
            Box::new(m20261204_000001_event_state::Migration),
            Box::new(m20261204_000002_retention::Migration),
            Box::new(m20261204_000003_contacts_per_booker::Migration),
            Box::new(m20261205_000001_working_hours::Migration),
            Box::new(m20261205_000002_find_slots::Migration),
            Box::new(m20261206_000001_slot_specialty::Migration),
            Box::new(m20261207_000010_front_desk::Migration),
            Box::new(m20261207_000020_patient_identity::Migration),
            Box::new(m20261207_000040_trace_context::Migration),
        ]
    }
}

/// Name of the unique constraint on (caller, idempotency key); booking tells a raced retry
/// apart from other unique violations by it.
pub const UQ_APPOINTMENT_CALLER_KEY: &str = "uq_appointment_caller_key";
/// Name of the partial unique index "one active (HELD or BOOKED) appointment per (first slot,
/// patient)", until the overlap rule, which says the same, replaced it
/// (`m20261202_000001_overlap_only`).
pub const UQ_APPOINTMENT_ACTIVE_PATIENT: &str = "uq_appointment_active_patient";
/// Name of the rule "no two active appointments of one patient overlap in time": an exclusion
/// constraint on PostgreSQL, triggers on SQLite (`…_insert`, `…_update`) raising this name.
pub const EX_APPOINTMENT_PATIENT_OVERLAP: &str = "ex_appointment_patient_overlap";
/// Name of the unique index on (caller, idempotency key) of waitlist entries.
pub const UQ_WAITLIST_CALLER_KEY: &str = "uq_waitlist_caller_key";
/// Name of the partial unique index "one open (WAITING or OFFERED) entry per patient, doctor
/// and day".
pub const UQ_WAITLIST_OPEN_ENTRY: &str = "uq_waitlist_open_entry";
/// Name of the unique index "one message per (outbox row, channel, purpose)": the relay's
/// recording of messages stays idempotent when a pass is retried.
pub const UQ_MESSAGE_OUTBOX_CHANNEL: &str = "uq_patient_message_outbox_channel";
/// Name of the partial unique index "one reminder per (appointment, channel)".
pub const UQ_MESSAGE_REMINDER: &str = "uq_patient_message_reminder";
