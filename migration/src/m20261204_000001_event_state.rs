//! The appointment as each event left it, in the event's outbox row.
//!
//! The relay records an event's messages and webhook deliveries when it drains the row, which
//! under load is seconds after the commit; reading the appointment then described a later state
//! (a booking cancelled a millisecond after it was told as cancelled). The row now carries the
//! fields of the appointment that change after it is made, as the event's transaction left them:
//! `appointment_status`, `appointment_expires_at`, `appointment_cancelled_at`,
//! `appointment_cancelled_by` and `appointment_rescheduled_to`. All NULL for rows without an
//! appointment event, and for rows written before this migration (those keep the old reading).

use sea_orm_migration::prelude::*;

/// Adds the appointment's state to `outbox`.
pub(crate) struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261204_000001_event_state"
    }
}

/// The new columns with their types on (PostgreSQL, SQLite).
const COLUMNS: [(&str, &str, &str); 5] = [
    ("appointment_status", "varchar(16)", "varchar(16)"),
    ("appointment_expires_at", "timestamp with time zone", "timestamp_with_timezone_text"),
    ("appointment_cancelled_at", "timestamp with time zone", "timestamp_with_timezone_text"),
    ("appointment_cancelled_by", "varchar(16)", "varchar(16)"),
    ("appointment_rescheduled_to", "bigint", "bigint"),
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let conn = manager.get_connection();
        if manager.get_database_backend() == sea_orm::DatabaseBackend::Sqlite {
            // SQLite adds one column per statement; one batch keeps them all or none.
            let adds: Vec<String> =
                COLUMNS.iter().map(|(name, _, ty)| format!("ALTER TABLE outbox ADD COLUMN {name} {ty} NULL")).collect();
            conn.execute_unprepared(&format!("SAVEPOINT event_state;\n{};\nRELEASE event_state", adds.join(";\n")))
                .await?;
            return Ok(());
        }
        let adds: Vec<String> = COLUMNS.iter().map(|(name, ty, _)| format!("ADD COLUMN {name} {ty} NULL")).collect();
        conn.execute_unprepared(&format!("ALTER TABLE outbox {}", adds.join(", "))).await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let conn = manager.get_connection();
        for (name, _, _) in COLUMNS {
            conn.execute_unprepared(&format!("ALTER TABLE outbox DROP COLUMN {name}")).await?;
        }
        Ok(())
    }
}
