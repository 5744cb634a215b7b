//! Partner webhooks: the endpoints partners and admins register, one delivery per (event,
//! endpoint), and the log of every attempt to send one.
//!
//! - `webhook_endpoint`: whose it is (`owner`, the caller scope `role:sub`, and its role),
//!   the URL, the event filter (`events`, comma-separated event types; NULL = all), the
//!   signing secret and, for 24 hours after a rotation, the previous one. The secrets are
//!   stored as they are: signing needs them (HMAC), so they cannot be hashed.
//! - `webhook_delivery`: one event for one endpoint, with the exact body every attempt sends
//!   and the event id (`webhook-id`) it carries. Unique per (outbox row, endpoint), so the
//!   relay may record a pass again without doubling anything. `next_attempt_at` is set
//!   exactly while it is `PENDING`; a worker that sends it pushes it forward by its lease and
//!   marks it with `lease_token`.
//! - `webhook_attempt`: one row per attempt (status code or error, time, duration).
//!
//! Deleting an endpoint deletes its deliveries and their attempts.

use sea_orm_migration::prelude::*;

/// Creates the webhook tables.
pub(crate) struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261201_000003_webhooks"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let conn = manager.get_connection();
        let sqlite = manager.get_database_backend() == sea_orm::DatabaseBackend::Sqlite;
        let statements = if sqlite { tables(&SQLITE) } else { tables(&POSTGRES) };
        if sqlite {
            // One batch on one connection, all or nothing (see the lifecycle migration).
            let batch = statements.join(";\n");
            conn.execute_unprepared(&format!("SAVEPOINT webhooks;\n{batch};\nRELEASE webhooks")).await?;
            return Ok(());
        }
        for sql in statements {
            conn.execute_unprepared(&sql).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let conn = manager.get_connection();
        for table in ["webhook_attempt", "webhook_delivery", "webhook_endpoint"] {
            conn.execute_unprepared(&format!("DROP TABLE IF EXISTS {table}")).await?;
        }
        Ok(())
    }
}

/// The words that differ between the two databases.
struct Dialect {
    /// An auto-incrementing primary key.
    id: &'static str,
    /// A reference to another table's id.
    bigint: &'static str,
    /// A point in time.
    ts: &'static str,
}

const POSTGRES: Dialect = Dialect { id: "bigserial PRIMARY KEY", bigint: "bigint", ts: "timestamptz" };
const SQLITE: Dialect =
    Dialect { id: "integer NOT NULL PRIMARY KEY AUTOINCREMENT", bigint: "integer", ts: "timestamp_with_timezone_text" };

fn tables(d: &Dialect) -> Vec<String> {
    let Dialect { id, bigint, ts } = d;
    vec![
        format!(
            "CREATE TABLE webhook_endpoint ( \
               id {id}, \
               owner varchar(160) NOT NULL, \
               owner_role varchar(16) NOT NULL, \
               url text NOT NULL, \
               events text NULL, \
               secret text NOT NULL, \
               previous_secret text NULL, \
               previous_secret_until {ts} NULL, \
               enabled boolean NOT NULL, \
               disabled_at {ts} NULL, \
               created_at {ts} NOT NULL, \
               CONSTRAINT ck_webhook_endpoint_role CHECK (owner_role IN ('partner', 'admin')), \
               CONSTRAINT ck_webhook_endpoint_previous CHECK ((previous_secret IS NULL) = (previous_secret_until IS NULL)), \
               CONSTRAINT ck_webhook_endpoint_disabled CHECK (enabled = (disabled_at IS NULL)))"
        ),
        "CREATE INDEX ix_webhook_endpoint_owner ON webhook_endpoint (owner)".into(),
        format!(
            "CREATE TABLE webhook_delivery ( \
               id {id}, \
               endpoint_id {bigint} NOT NULL \
                 CONSTRAINT fk_webhook_delivery_endpoint REFERENCES webhook_endpoint (id) ON DELETE CASCADE, \
               outbox_id {bigint} NOT NULL, \
               appointment_id {bigint} NOT NULL \
                 CONSTRAINT fk_webhook_delivery_appointment REFERENCES appointment (id), \
               event_id varchar(64) NOT NULL, \
               event_type varchar(40) NOT NULL, \
               payload text NOT NULL, \
               status varchar(16) NOT NULL, \
               attempts integer NOT NULL, \
               max_attempts integer NOT NULL, \
               next_attempt_at {ts} NULL, \
               lease_token {bigint} NULL, \
               last_status_code integer NULL, \
               last_attempt_at {ts} NULL, \
               last_error text NULL, \
               created_at {ts} NOT NULL, \
               CONSTRAINT ck_webhook_delivery_status CHECK (status IN ('PENDING', 'SUCCEEDED', 'FAILED')), \
               CONSTRAINT ck_webhook_delivery_pending CHECK ((status = 'PENDING') = (next_attempt_at IS NOT NULL)), \
               CONSTRAINT ck_webhook_delivery_attempts CHECK (attempts >= 0 AND max_attempts >= 1), \
               CONSTRAINT uq_webhook_delivery_event UNIQUE (outbox_id, endpoint_id))"
        ),
        // The workers' queue: pending deliveries by the time they are due.
        "CREATE INDEX ix_webhook_delivery_due ON webhook_delivery (next_attempt_at) WHERE status = 'PENDING'".into(),
        // An endpoint's deliveries, newest first.
        "CREATE INDEX ix_webhook_delivery_endpoint ON webhook_delivery (endpoint_id, id)".into(),
        format!(
            "CREATE TABLE webhook_attempt ( \
               id {id}, \
               delivery_id {bigint} NOT NULL \
                 CONSTRAINT fk_webhook_attempt_delivery REFERENCES webhook_delivery (id) ON DELETE CASCADE, \
               attempt integer NOT NULL, \
               started_at {ts} NOT NULL, \
               duration_ms integer NOT NULL, \
               status_code integer NULL, \
               error text NULL)"
        ),
        "CREATE INDEX ix_webhook_attempt_delivery ON webhook_attempt (delivery_id)".into(),
    ]
}
