//! The appointment's status CHECKs, written as one array constant each on PostgreSQL.
//!
//! PostgreSQL reads a table's CHECK constraints from their stored expression text and sets
//! them up again in every statement that inserts or updates a row, so their length is paid at
//! every booking. `status IN ('HELD', …)` on a `varchar` column is stored as an array of
//! separately cast constants (1.4–2.0 kB of text each); `status::text = ANY ('{HELD,…}')`
//! says the same with one constant (0.7–1.4 kB): the appointment's CHECK text goes from
//! 6.7 kB to 4.9 kB. pgbench on the booking statement, 32 clients, seven alternating pairs of
//! 10 s runs: 2,819 tps as they were, 3,025 tps written so (docs/benchmarks-history.md, "Twelfth pass").
//!
//! The rules and the constraints' names are unchanged. SQLite keeps the `IN` lists (it has no
//! arrays, and parses its schema once per connection).

use sea_orm_migration::prelude::*;

use crate::m20261201_000001_lifecycle;

/// Rewrites three CHECK constraints of `appointment` on PostgreSQL.
pub(crate) struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261202_000002_compact_checks"
    }
}

/// The three constraints as they are after this migration.
const COMPACT: [(&str, &str); 3] = [
    ("ck_appointment_status", "status::text = ANY ('{HELD,BOOKED,CANCELLED,EXPIRED}'::text[])"),
    ("ck_appointment_expiry", "(status::text = ANY ('{HELD,EXPIRED}'::text[])) = (expires_at IS NOT NULL)"),
    (
        "ck_appointment_cancelled_by",
        "cancelled_by IS NULL OR (status::text = 'CANCELLED' AND cancelled_by::text = ANY ('{PATIENT,PARTNER,CLINIC}'::text[]))",
    ),
];

/// One `ALTER TABLE` that drops the three constraints and adds `clauses` (`CONSTRAINT name
/// CHECK (…)`): one scan of the table validates them all.
fn replace(clauses: &[String]) -> String {
    let drops = COMPACT.iter().map(|(name, _)| format!("DROP CONSTRAINT {name}"));
    let adds = clauses.iter().map(|c| format!("ADD {c}"));
    format!("ALTER TABLE appointment {}", drops.chain(adds).collect::<Vec<_>>().join(", "))
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() == sea_orm::DatabaseBackend::Postgres {
            let compact: Vec<String> =
                COMPACT.iter().map(|(name, rule)| format!("CONSTRAINT {name} CHECK ({rule})")).collect();
            manager.get_connection().execute_unprepared(&replace(&compact)).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() == sea_orm::DatabaseBackend::Postgres {
            // Back to the lifecycle migration's own clauses for the same three names.
            let as_lists: Vec<String> = m20261201_000001_lifecycle::appointment_checks()
                .into_iter()
                .filter(|c| COMPACT.iter().any(|(name, _)| c.starts_with(&format!("CONSTRAINT {name} "))))
                .collect();
            manager.get_connection().execute_unprepared(&replace(&as_lists)).await?;
        }
        Ok(())
    }
}
