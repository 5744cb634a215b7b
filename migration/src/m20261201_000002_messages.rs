//! Telling people: patients' contact details and the durable queue of messages to them.
//!
//! - `patient_contact`: one row per patient who gave details (email, phone, locale); a column
//!   left NULL means "not on file".
//! - `patient_message`: one row per message (an email or an SMS about one appointment event,
//!   or a reminder), recorded by the outbox relay in the transaction that deletes the event's
//!   outbox row, and sent by a worker of any instance. The row keeps what rendering needs
//!   (`facts`, JSON), not the rendered text: rendering is deterministic from it.
//!
//! The queue's columns: `status` (`PENDING`, `SENT`, `FAILED`, `SKIPPED`), `attempts` (every
//! attempt, the first included, counted when the attempt is claimed), `next_attempt_at` (when
//! a worker may take it next; while an attempt runs it is the end of its lease),
//! `locked_until` (the lease of the running attempt, and its fencing token: an attempt records
//! its outcome only while the row still carries its lease), `last_error`, `sent_at`.
//! [`UQ_MESSAGE_OUTBOX_CHANNEL`] keeps the recording idempotent per (outbox row, channel,
//! purpose), and [`UQ_MESSAGE_REMINDER`] allows one reminder per appointment and channel.

use sea_orm_migration::prelude::*;

use crate::{UQ_MESSAGE_OUTBOX_CHANNEL, UQ_MESSAGE_REMINDER};

/// Adds `patient_contact` and `patient_message`.
pub(crate) struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261201_000002_messages"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let conn = manager.get_connection();
        let sqlite = manager.get_database_backend() == sea_orm::DatabaseBackend::Sqlite;
        let statements = if sqlite {
            statements("integer PRIMARY KEY AUTOINCREMENT", "integer", TS_SQLITE)
        } else {
            statements("bigserial PRIMARY KEY", "bigint", "timestamptz")
        };
        if sqlite {
            // One batch, all or nothing (see the lifecycle migration for why one batch).
            let batch = statements.join(";\n");
            conn.execute_unprepared(&format!("SAVEPOINT messages;\n{batch};\nRELEASE messages")).await?;
            return Ok(());
        }
        for sql in statements {
            conn.execute_unprepared(&sql).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let conn = manager.get_connection();
        conn.execute_unprepared("DROP TABLE patient_message").await?;
        conn.execute_unprepared("DROP TABLE patient_contact").await?;
        Ok(())
    }
}

/// The column type sea-orm reads and writes `DateTimeUtc` as on SQLite.
const TS_SQLITE: &str = "timestamp_with_timezone_text";

fn statements(serial_pk: &str, bigint: &str, ts: &str) -> Vec<String> {
    vec![
        format!(
            "CREATE TABLE patient_contact ( \
               patient_id {bigint} NOT NULL PRIMARY KEY, \
               email varchar(254) NULL, \
               phone varchar(16) NULL, \
               locale varchar(35) NULL, \
               updated_at {ts} NOT NULL, \
               updated_by varchar(160) NOT NULL, \
               CONSTRAINT ck_patient_contact_patient CHECK (patient_id > 0))"
        ),
        format!(
            "CREATE TABLE patient_message ( \
               id {serial_pk}, \
               outbox_id {bigint} NOT NULL, \
               purpose varchar(16) NOT NULL, \
               event varchar(16) NOT NULL, \
               appointment_id {bigint} NOT NULL, \
               patient_id {bigint} NOT NULL, \
               channel varchar(8) NOT NULL, \
               recipient varchar(254) NOT NULL, \
               locale varchar(35) NULL, \
               facts text NOT NULL, \
               status varchar(16) NOT NULL DEFAULT 'PENDING', \
               attempts integer NOT NULL DEFAULT 0, \
               next_attempt_at {ts} NOT NULL, \
               locked_until {ts} NULL, \
               last_error text NULL, \
               committed_at {ts} NOT NULL, \
               created_at {ts} NOT NULL, \
               sent_at {ts} NULL, \
               CONSTRAINT ck_patient_message_channel CHECK (channel IN ('EMAIL', 'SMS')), \
               CONSTRAINT ck_patient_message_purpose CHECK (purpose IN ('EVENT', 'REMINDER')), \
               CONSTRAINT ck_patient_message_status CHECK (status IN ('PENDING', 'SENT', 'FAILED', 'SKIPPED')), \
               CONSTRAINT ck_patient_message_sent CHECK ((status = 'SENT') = (sent_at IS NOT NULL)), \
               CONSTRAINT ck_patient_message_attempts CHECK (attempts >= 0))"
        ),
        format!("CREATE UNIQUE INDEX {UQ_MESSAGE_OUTBOX_CHANNEL} ON patient_message (outbox_id, channel, purpose)"),
        format!(
            "CREATE UNIQUE INDEX {UQ_MESSAGE_REMINDER} ON patient_message (appointment_id, channel) \
             WHERE purpose = 'REMINDER'"
        ),
        // The workers' queue: what is pending, by when it is due.
        "CREATE INDEX ix_patient_message_due ON patient_message (next_attempt_at) WHERE status = 'PENDING'".into(),
        "CREATE INDEX ix_patient_message_appointment ON patient_message (appointment_id)".into(),
    ]
}
