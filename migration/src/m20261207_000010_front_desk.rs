//! The day at the front desk: an appointment may become `ARRIVED` (checked in, `arrived_at`),
//! `FULFILLED` (seen, `completed_at`) or `NOSHOW`.
//!
//! - `ck_appointment_status` accepts the three new words, and `ck_appointment_desk` ties them
//!   to their timestamps (`arrived_at` set exactly from `ARRIVED` on, `completed_at` exactly
//!   on `FULFILLED`).
//! - None of them gives its seat back, and each still occupies the patient's time: the overlap
//!   rule ([`EX_APPOINTMENT_PATIENT_OVERLAP`]) counts them, so a patient cannot book over a
//!   visit the desk has checked in, seen or marked missed.
//! - `ix_appointment_noshow` on `(patient_id, start_at) WHERE status = 'NOSHOW'`: a patient's
//!   recent no-shows, counted on the booking path, are a few entries of a small index.
//!
//! The lists below are this migration's, frozen; the service's lifecycle table
//! (`model::status::LIFECYCLE`) is checked against them by a test. SQLite cannot alter a
//! CHECK, so its `appointment` table is rebuilt with its data, indexes and triggers (with
//! foreign keys off, in one batch on one connection, as the lifecycle migration explains).

use sea_orm_migration::prelude::*;

use crate::{m20261201_000001_lifecycle, EX_APPOINTMENT_PATIENT_OVERLAP, UQ_APPOINTMENT_CALLER_KEY};

/// Adds the desk's statuses, timestamps and the no-show index.
pub(crate) struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261207_000010_front_desk"
    }
}

/// Every status an appointment may have after this migration.
pub const APPOINTMENT_STATUSES: [&str; 7] =
    ["HELD", "BOOKED", "CANCELLED", "EXPIRED", "ARRIVED", "FULFILLED", "NOSHOW"];
/// The statuses the overlap rule counts after this migration (those that hold a seat).
pub const OVERLAPPING_STATUSES: [&str; 5] = ["HELD", "BOOKED", "ARRIVED", "FULFILLED", "NOSHOW"];
/// The statuses the overlap rule counted before it.
const OVERLAPPING_BEFORE: [&str; 2] = ["HELD", "BOOKED"];

/// `('A', 'B')`.
fn sql_list(words: &[&str]) -> String {
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    format!("({})", quoted.join(", "))
}

/// `'{A,B}'::text[]` (PostgreSQL's compact form, see `m20261202_000002_compact_checks`).
fn pg_array(words: &[&str]) -> String {
    format!("'{{{}}}'::text[]", words.join(","))
}

/// The no-show index (both databases spell it the same; the count's statement repeats the
/// predicate literally, so SQLite uses it too).
const NOSHOW_INDEX: &str =
    "CREATE INDEX IF NOT EXISTS ix_appointment_noshow ON appointment (patient_id, start_at) WHERE status = 'NOSHOW'";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let conn = manager.get_connection();
        if manager.get_database_backend() == sea_orm::DatabaseBackend::Sqlite {
            conn.execute_unprepared(&sqlite_rebuild(&APPOINTMENT_STATUSES, &OVERLAPPING_STATUSES, true)).await?;
            return Ok(());
        }
        conn.execute_unprepared(&postgres_alter(&APPOINTMENT_STATUSES, &OVERLAPPING_STATUSES, true)).await?;
        conn.execute_unprepared(NOSHOW_INDEX).await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let conn = manager.get_connection();
        // Going back would have to forget who came: refused while such rows exist (the CHECK
        // below fails on them), as the lifecycle migration refuses its own.
        let before = &APPOINTMENT_STATUSES[..4];
        if manager.get_database_backend() == sea_orm::DatabaseBackend::Sqlite {
            conn.execute_unprepared(&sqlite_rebuild(before, &OVERLAPPING_BEFORE, false)).await?;
            return Ok(());
        }
        conn.execute_unprepared("DROP INDEX IF EXISTS ix_appointment_noshow").await?;
        conn.execute_unprepared(&postgres_alter(before, &OVERLAPPING_BEFORE, false)).await?;
        Ok(())
    }
}

/// One `ALTER TABLE` (one scan validates it all): the status CHECK, the desk's columns and
/// CHECK, and the exclusion constraint with `overlapping` as its predicate.
fn postgres_alter(statuses: &[&str], overlapping: &[&str], desk: bool) -> String {
    let mut clauses = vec![
        "DROP CONSTRAINT ck_appointment_status".to_owned(),
        format!("ADD CONSTRAINT ck_appointment_status CHECK (status::text = ANY ({}))", pg_array(statuses)),
        format!("DROP CONSTRAINT {EX_APPOINTMENT_PATIENT_OVERLAP}"),
        format!(
            "ADD CONSTRAINT {EX_APPOINTMENT_PATIENT_OVERLAP} EXCLUDE USING gist \
             (patient_id WITH =, tstzrange(start_at, end_at) WITH &&) WHERE (status IN {})",
            sql_list(overlapping)
        ),
    ];
    if desk {
        clauses.insert(0, "ADD COLUMN arrived_at timestamptz, ADD COLUMN completed_at timestamptz".into());
        clauses.push(format!(
            "ADD CONSTRAINT ck_appointment_desk CHECK ((status::text = ANY ({})) = (arrived_at IS NOT NULL) \
             AND (status::text = 'FULFILLED') = (completed_at IS NOT NULL))",
            pg_array(&["ARRIVED", "FULFILLED"])
        ));
    } else {
        clauses
            .insert(0, "DROP CONSTRAINT ck_appointment_desk, DROP COLUMN arrived_at, DROP COLUMN completed_at".into());
    }
    format!("ALTER TABLE appointment {}", clauses.join(", "))
}

/// SQLite: the `appointment` table rebuilt with `statuses` in its CHECK, the desk's columns
/// (when `desk`), its indexes, and the overlap triggers counting `overlapping`.
fn sqlite_rebuild(statuses: &[&str], overlapping: &[&str], desk: bool) -> String {
    let ts = "timestamp_with_timezone_text";
    let mut checks: Vec<String> = m20261201_000001_lifecycle::appointment_checks()
        .into_iter()
        .filter(|c| !c.starts_with("CONSTRAINT ck_appointment_status "))
        .collect();
    checks.insert(0, format!("CONSTRAINT ck_appointment_status CHECK (status IN {})", sql_list(statuses)));
    let desk_columns = if desk {
        checks.push(
            "CONSTRAINT ck_appointment_desk CHECK ((status IN ('ARRIVED', 'FULFILLED')) = (arrived_at IS NOT NULL) \
             AND (status = 'FULFILLED') = (completed_at IS NOT NULL))"
                .into(),
        );
        format!("arrived_at {ts} NULL, completed_at {ts} NULL, ")
    } else {
        String::new()
    };
    // The columns both shapes have.
    let copied = "id, slot_id, patient_id, status, booked_by, idempotency_key, request_hash, created_at, \
                   cancelled_at, start_at, end_at, slot_count, expires_at, cancelled_by, rescheduled_from, \
                   rescheduled_to, first_booked_by";
    let active = sql_list(overlapping);
    let overlaps = format!(
        "SELECT RAISE(ABORT, '{EX_APPOINTMENT_PATIENT_OVERLAP}') WHERE EXISTS ( \
           SELECT 1 FROM appointment a WHERE a.patient_id = NEW.patient_id AND a.id <> NEW.id \
             AND a.status IN {active} \
             AND julianday(a.start_at) < julianday(NEW.end_at) AND julianday(a.end_at) > julianday(NEW.start_at))"
    );
    let mut statements = vec![
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
               {desk_columns}\
               CHECK (patient_id > 0), \
               CHECK ((status = 'CANCELLED') = (cancelled_at IS NOT NULL)), \
               {})",
            checks.join(", ")
        ),
        format!("INSERT INTO appointment_new ({copied}) SELECT {copied} FROM appointment"),
        "DROP TABLE appointment".into(),
        "ALTER TABLE appointment_new RENAME TO appointment".into(),
        format!("CREATE UNIQUE INDEX {UQ_APPOINTMENT_CALLER_KEY} ON appointment (booked_by, idempotency_key)"),
        "CREATE INDEX ix_appointment_slot ON appointment (slot_id)".into(),
        "CREATE INDEX ix_appointment_patient ON appointment (patient_id, created_at)".into(),
        "CREATE INDEX ix_appointment_hold_expiry ON appointment (expires_at) WHERE status = 'HELD'".into(),
        "CREATE INDEX ix_appointment_first_booked_by ON appointment (first_booked_by) \
         WHERE first_booked_by IS NOT NULL"
            .into(),
        format!(
            "CREATE TRIGGER {EX_APPOINTMENT_PATIENT_OVERLAP}_insert BEFORE INSERT ON appointment \
             WHEN NEW.status IN {active} BEGIN {overlaps}; END"
        ),
        format!(
            "CREATE TRIGGER {EX_APPOINTMENT_PATIENT_OVERLAP}_update \
             BEFORE UPDATE OF status, patient_id, start_at, end_at ON appointment \
             WHEN NEW.status IN {active} BEGIN {overlaps}; END"
        ),
    ];
    if desk {
        statements.push(NOSHOW_INDEX.into());
    }
    // Foreign keys cannot be switched inside a transaction, and dropping the referenced table
    // with them on would delete-check every row that points at it (slots of longer
    // appointments, waitlist offers, reschedule links): off around the rebuild, which keeps
    // every id, so every reference still finds its row.
    format!(
        "PRAGMA foreign_keys = OFF;\nSAVEPOINT front_desk;\n{};\nRELEASE front_desk;\nPRAGMA foreign_keys = ON",
        statements.join(";\n")
    )
}
