//! Retention: the indexes by which the service finds the finished patient messages and webhook
//! deliveries whose `RETENTION_DAYS` are over.
//!
//! Both are partial (`status <> 'PENDING'`): the queues' own due indexes cover only what is
//! pending, and without these the retention job would read every row it keeps at every pass.
//! Their keys are when a row finished:
//! - `patient_message.next_attempt_at`: a finished message keeps the lease end of its last
//!   attempt there (every attempt is claimed under a lease, and its outcome leaves the column);
//! - a delivery's last attempt (`last_attempt_at`), or its creation for one that failed without
//!   an attempt (its endpoint was disabled first).
//!
//! The retention job's statements spell the predicate and the key as written here, literally:
//! SQLite uses a partial index, or one on an expression, only for a query that repeats them.

use sea_orm_migration::prelude::*;

/// Adds the finished-rows indexes of the retention job (`IF NOT EXISTS`: a run that stopped
/// between the two, on SQLite, which has no transaction around a migration, runs again).
pub(crate) struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261204_000002_retention"
    }
}

/// The finished messages, by when their last attempt ended.
const MESSAGES: &str = "CREATE INDEX IF NOT EXISTS ix_patient_message_finished ON patient_message (next_attempt_at) \
                        WHERE status <> 'PENDING'";
/// The finished deliveries, by when their last attempt started (or they were created).
const DELIVERIES: &str = "CREATE INDEX IF NOT EXISTS ix_webhook_delivery_finished ON webhook_delivery \
                          ((COALESCE(last_attempt_at, created_at))) WHERE status <> 'PENDING'";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let conn = manager.get_connection();
        conn.execute_unprepared(MESSAGES).await?;
        conn.execute_unprepared(DELIVERIES).await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let conn = manager.get_connection();
        conn.execute_unprepared("DROP INDEX IF EXISTS ix_webhook_delivery_finished").await?;
        conn.execute_unprepared("DROP INDEX IF EXISTS ix_patient_message_finished").await?;
        Ok(())
    }
}
