//! Work queued by a change keeps the trace of the request that made it: the outbox row, and the
//! messages and webhook deliveries the relay records from it, carry the W3C `traceparent` of
//! the span whose transaction wrote them (`trace_context`, NULL when there was none, and in rows
//! written before this migration). The relay pass, the message send and the webhook attempt are
//! then spans of the booking's trace, and each webhook `POST` carries its `traceparent`.

use sea_orm_migration::prelude::*;

/// Adds `trace_context` to `outbox`, `patient_message` and `webhook_delivery`.
pub(crate) struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261207_000040_trace_context"
    }
}

/// The tables that get the column.
const TABLES: [&str; 3] = ["outbox", "patient_message", "webhook_delivery"];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in TABLES {
            manager
                .alter_table(
                    Table::alter()
                        .table(Alias::new(table))
                        .add_column(ColumnDef::new(Alias::new("trace_context")).text().null())
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in TABLES {
            manager
                .alter_table(
                    Table::alter().table(Alias::new(table)).drop_column(Alias::new("trace_context")).to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}
