//! The booking lifecycle: holds that expire, confirmations, reschedules, appointments longer
//! than one slot, closed slots, and no overlapping appointments for one patient.
//!
//! - `time_slot` gains `closed_at`/`closed_reason`: a closed slot never takes a seat again.
//! - `appointment` gains its own time range (`start_at`, `end_at`: the span of its slots, so
//!   the database can refuse overlaps), `slot_count`, `expires_at` (set while `HELD`, kept on
//!   `EXPIRED`), `cancelled_by`, the reschedule links and `first_booked_by` (who booked the
//!   appointment a reschedule chain started from, when someone else moved it). Its status is
//!   one of `HELD`, `BOOKED`, `CANCELLED`, `EXPIRED`; `HELD` and `BOOKED` take a seat.
//! - `appointment_slot` lists the slots after the first of an appointment longer than one
//!   slot (the first is `appointment.slot_id`, so a one-slot booking writes no row here).
//! - `outbox` rows may carry no slot change (a confirm) or no appointment (a closed slot).
//!
//! The overlap rule is an exclusion constraint on PostgreSQL (`btree_gist`) and a pair of
//! triggers on SQLite, both named [`EX_APPOINTMENT_PATIENT_OVERLAP`], so a violation reads the
//! same on both. SQLite cannot alter constraints, so its `appointment` and `outbox` tables are
//! rebuilt with their data.

use sea_orm_migration::prelude::*;

use crate::{EX_APPOINTMENT_PATIENT_OVERLAP, UQ_APPOINTMENT_ACTIVE_PATIENT, UQ_APPOINTMENT_CALLER_KEY};

/// Adds the lifecycle's columns, tables and constraints.
pub(crate) struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261201_000001_lifecycle"
    }
}

/// The statuses that take a seat, as SQL.
const ACTIVE: &str = "('HELD', 'BOOKED')";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let conn = manager.get_connection();
        if manager.get_database_backend() == sea_orm::DatabaseBackend::Sqlite {
            // One batch on one connection, all or nothing: statements sent one by one may each
            // take another pooled connection, whose cached schema still shows the table that
            // an earlier statement dropped (and then refuses the rename).
            let batch = sqlite_up().join(";\n");
            conn.execute_unprepared(&format!("SAVEPOINT lifecycle;\n{batch};\nRELEASE lifecycle")).await?;
            return Ok(());
        }
        for sql in postgres_up() {
            conn.execute_unprepared(&sql).await?;
        }
        Ok(())
    }

    async fn down(&self, _manager: &SchemaManager) -> Result<(), DbErr> {
        // Going back would drop holds, longer appointments and reschedule links: data loss a
        // migration should not do silently. Restore a backup instead.
        Err(DbErr::Migration("the lifecycle migration cannot be reverted; restore a backup".into()))
    }
}

fn postgres_up() -> Vec<String> {
    vec![
        "CREATE EXTENSION IF NOT EXISTS btree_gist".into(),
        "ALTER TABLE time_slot ADD COLUMN closed_at timestamptz, ADD COLUMN closed_reason text".into(),
        "ALTER TABLE appointment \
           ADD COLUMN start_at timestamptz, ADD COLUMN end_at timestamptz, \
           ADD COLUMN slot_count integer NOT NULL DEFAULT 1, \
           ADD COLUMN expires_at timestamptz, \
           ADD COLUMN cancelled_by varchar(16), \
           ADD COLUMN rescheduled_from bigint CONSTRAINT fk_appointment_rescheduled_from REFERENCES appointment (id), \
           ADD COLUMN rescheduled_to bigint CONSTRAINT fk_appointment_rescheduled_to REFERENCES appointment (id), \
           ADD COLUMN first_booked_by varchar(160)"
            .into(),
        "UPDATE appointment a SET start_at = s.start_at, end_at = s.end_at FROM time_slot s WHERE s.id = a.slot_id"
            .into(),
        "ALTER TABLE appointment ALTER COLUMN start_at SET NOT NULL, ALTER COLUMN end_at SET NOT NULL".into(),
        "ALTER TABLE appointment DROP CONSTRAINT appointment_status_check".into(),
        format!("ALTER TABLE appointment {}", appointment_checks().join(", ").replace("CONSTRAINT", "ADD CONSTRAINT")),
        format!("DROP INDEX {UQ_APPOINTMENT_ACTIVE_PATIENT}"),
        active_patient_index(),
        format!(
            "ALTER TABLE appointment ADD CONSTRAINT {EX_APPOINTMENT_PATIENT_OVERLAP} \
             EXCLUDE USING gist (patient_id WITH =, tstzrange(start_at, end_at) WITH &&) WHERE (status IN {ACTIVE})"
        ),
        hold_expiry_index(),
        first_booked_by_index(),
        "CREATE TABLE appointment_slot ( \
           appointment_id bigint NOT NULL CONSTRAINT fk_appointment_slot_appointment REFERENCES appointment (id), \
           slot_id bigint NOT NULL CONSTRAINT fk_appointment_slot_slot REFERENCES time_slot (id), \
           PRIMARY KEY (appointment_id, slot_id))"
            .into(),
        "CREATE INDEX ix_appointment_slot_slot ON appointment_slot (slot_id)".into(),
        "ALTER TABLE outbox \
           ALTER COLUMN appointment_id DROP NOT NULL, ALTER COLUMN slot_id DROP NOT NULL, \
           ALTER COLUMN doctor_id DROP NOT NULL, ALTER COLUMN start_at DROP NOT NULL, \
           ALTER COLUMN capacity DROP NOT NULL, ALTER COLUMN booked_count DROP NOT NULL, \
           ALTER COLUMN version DROP NOT NULL, ADD COLUMN slot_closed boolean"
            .into(),
    ]
}

fn sqlite_up() -> Vec<String> {
    let ts = "timestamp_with_timezone_text";
    let mut statements = vec![
        format!("ALTER TABLE time_slot ADD COLUMN closed_at {ts} NULL"),
        "ALTER TABLE time_slot ADD COLUMN closed_reason text NULL".into(),
        format!(
            "CREATE TABLE appointment_new ( \
               id integer NOT NULL PRIMARY KEY AUTOINCREMENT, \
               slot_id integer NOT NULL REFERENCES time_slot (id), \
               patient_id integer NOT NULL, \
               status varchar(16) NOT NULL, \
               booked_by varchar(160) NOT NULL, \
               idempotency_key varchar(64) NOT NULL, \
               request_hash varchar(64) NOT NULL, \
               created_at {ts} NOT NULL, \
               cancelled_at {ts} NULL, \
               start_at {ts} NOT NULL, \
               end_at {ts} NOT NULL, \
               slot_count integer NOT NULL DEFAULT 1, \
               expires_at {ts} NULL, \
               cancelled_by varchar(16) NULL, \
               rescheduled_from integer NULL REFERENCES appointment (id), \
               rescheduled_to integer NULL REFERENCES appointment (id), \
               first_booked_by varchar(160) NULL, \
               CHECK (patient_id > 0), \
               CHECK ((status = 'CANCELLED') = (cancelled_at IS NOT NULL)), \
               {})",
            appointment_checks().join(", ")
        ),
        "INSERT INTO appointment_new (id, slot_id, patient_id, status, booked_by, idempotency_key, request_hash, \
           created_at, cancelled_at, start_at, end_at) \
         SELECT a.id, a.slot_id, a.patient_id, a.status, a.booked_by, a.idempotency_key, a.request_hash, \
           a.created_at, a.cancelled_at, s.start_at, s.end_at \
         FROM appointment a JOIN time_slot s ON s.id = a.slot_id"
            .into(),
        "DROP TABLE appointment".into(),
        "ALTER TABLE appointment_new RENAME TO appointment".into(),
        format!("CREATE UNIQUE INDEX {UQ_APPOINTMENT_CALLER_KEY} ON appointment (booked_by, idempotency_key)"),
        active_patient_index(),
        "CREATE INDEX ix_appointment_slot ON appointment (slot_id)".into(),
        "CREATE INDEX ix_appointment_patient ON appointment (patient_id, created_at)".into(),
        hold_expiry_index(),
        first_booked_by_index(),
        "CREATE TABLE appointment_slot ( \
           appointment_id integer NOT NULL REFERENCES appointment (id), \
           slot_id integer NOT NULL REFERENCES time_slot (id), \
           PRIMARY KEY (appointment_id, slot_id))"
            .into(),
        "CREATE INDEX ix_appointment_slot_slot ON appointment_slot (slot_id)".into(),
        format!(
            "CREATE TABLE outbox_new ( \
               id integer NOT NULL PRIMARY KEY AUTOINCREMENT, \
               kind varchar(16) NOT NULL, \
               appointment_id integer NULL, \
               slot_id integer NULL, \
               doctor_id integer NULL, \
               start_at {ts} NULL, \
               capacity integer NULL, \
               booked_count integer NULL, \
               version integer NULL, \
               created_at {ts} NOT NULL, \
               slot_closed boolean NULL)"
        ),
        "INSERT INTO outbox_new (id, kind, appointment_id, slot_id, doctor_id, start_at, capacity, booked_count, \
           version, created_at) \
         SELECT id, kind, appointment_id, slot_id, doctor_id, start_at, capacity, booked_count, version, created_at \
         FROM outbox"
            .into(),
        "DROP TABLE outbox".into(),
        "ALTER TABLE outbox_new RENAME TO outbox".into(),
    ];
    // The overlap rule, checked by the database inside the writing transaction (SQLite runs
    // one writer at a time, so the check cannot race). `julianday` compares instants whatever
    // the text form of each timestamp.
    let overlaps = format!(
        "SELECT RAISE(ABORT, '{EX_APPOINTMENT_PATIENT_OVERLAP}') WHERE EXISTS ( \
           SELECT 1 FROM appointment a WHERE a.patient_id = NEW.patient_id AND a.id <> NEW.id \
             AND a.status IN {ACTIVE} \
             AND julianday(a.start_at) < julianday(NEW.end_at) AND julianday(a.end_at) > julianday(NEW.start_at))"
    );
    statements.push(format!(
        "CREATE TRIGGER {EX_APPOINTMENT_PATIENT_OVERLAP}_insert BEFORE INSERT ON appointment \
         WHEN NEW.status IN {ACTIVE} BEGIN {overlaps}; END"
    ));
    statements.push(format!(
        "CREATE TRIGGER {EX_APPOINTMENT_PATIENT_OVERLAP}_update \
         BEFORE UPDATE OF status, patient_id, start_at, end_at ON appointment \
         WHEN NEW.status IN {ACTIVE} BEGIN {overlaps}; END"
    ));
    statements
}

/// The appointment's new CHECK constraints, as `CONSTRAINT name CHECK (…)` clauses.
pub(crate) fn appointment_checks() -> Vec<String> {
    vec![
        "CONSTRAINT ck_appointment_status CHECK (status IN ('HELD', 'BOOKED', 'CANCELLED', 'EXPIRED'))".into(),
        // A hold says until when; a confirmed or cancelled one does not, an expired one keeps it.
        "CONSTRAINT ck_appointment_expiry CHECK ((status IN ('HELD', 'EXPIRED')) = (expires_at IS NOT NULL))".into(),
        "CONSTRAINT ck_appointment_cancelled_by CHECK (cancelled_by IS NULL \
           OR (status = 'CANCELLED' AND cancelled_by IN ('PATIENT', 'PARTNER', 'CLINIC')))"
            .into(),
        "CONSTRAINT ck_appointment_times CHECK (end_at > start_at)".into(),
        "CONSTRAINT ck_appointment_slot_count CHECK (slot_count >= 1)".into(),
    ]
}

/// One active appointment per (first slot, patient): a seat is held or booked once.
pub(crate) fn active_patient_index() -> String {
    format!(
        "CREATE UNIQUE INDEX {UQ_APPOINTMENT_ACTIVE_PATIENT} ON appointment (slot_id, patient_id) \
         WHERE status IN {ACTIVE}"
    )
}

/// The expiry job's queue: holds by the time they run out.
fn hold_expiry_index() -> String {
    "CREATE INDEX ix_appointment_hold_expiry ON appointment (expires_at) WHERE status = 'HELD'".into()
}

/// A partner's appointments that someone else rescheduled (rare, so the index is small).
fn first_booked_by_index() -> String {
    "CREATE INDEX ix_appointment_first_booked_by ON appointment (first_booked_by) WHERE first_booked_by IS NOT NULL"
        .into()
}
