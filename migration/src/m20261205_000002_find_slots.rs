//! The slot search (`findSlots`, FHIR `$find`): what lets it read only bookable slots, in the
//! order it answers them, and find a specialty's doctors.
//!
//! - PostgreSQL: `time_slot.open`, a stored generated column `closed_at IS NULL AND
//!   booked_count < capacity`, and two partial indexes `WHERE open`: `ix_time_slot_open_doctor`
//!   on `(doctor_id, start_at, id)` (each doctor's next bookable slots: the per-doctor search,
//!   which never reads the full or closed slots it skips) and `ix_time_slot_open_start` on
//!   `(start_at, doctor_id, id)` (the search across every doctor, in its answer order).
//!
//!   Why a column and not the predicate itself: PostgreSQL makes an update HOT only when no
//!   column an index names (keys and partial predicates alike) changes value. A predicate on
//!   `booked_count` would make every booking's update non-HOT; `open` changes only when the last
//!   seat goes (or a full slot frees, or a slot closes), so every other seat taken stays HOT.
//!   The last seat's update is non-HOT, and adds no entry to these indexes (its new row is not
//!   open). See docs/find-slots.md.
//! - SQLite (no stored column can be added to an existing table): the same two indexes with the
//!   predicate written out; the search spells it the same way, as SQLite needs to use them.
//! - `ix_doctor_specialty` on `lower(specialty)`: a specialty's doctors, compared
//!   case-insensitively.

use sea_orm_migration::prelude::*;

/// Adds `time_slot.open` (PostgreSQL) and the search's partial indexes.
pub(crate) struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261205_000002_find_slots"
    }
}

/// PostgreSQL's statements, in order.
const POSTGRES_UP: [&str; 4] = [
    "ALTER TABLE time_slot ADD COLUMN open boolean NOT NULL \
     GENERATED ALWAYS AS (closed_at IS NULL AND booked_count < capacity) STORED",
    "CREATE INDEX IF NOT EXISTS ix_time_slot_open_doctor ON time_slot (doctor_id, start_at, id) WHERE open",
    "CREATE INDEX IF NOT EXISTS ix_time_slot_open_start ON time_slot (start_at, doctor_id, id) WHERE open",
    "CREATE INDEX IF NOT EXISTS ix_doctor_specialty ON doctor (lower(specialty))",
];

/// SQLite's statements, in order.
const SQLITE_UP: [&str; 3] = [
    "CREATE INDEX IF NOT EXISTS ix_time_slot_open_doctor ON time_slot (doctor_id, start_at, id) \
     WHERE closed_at IS NULL AND booked_count < capacity",
    "CREATE INDEX IF NOT EXISTS ix_time_slot_open_start ON time_slot (start_at, doctor_id, id) \
     WHERE closed_at IS NULL AND booked_count < capacity",
    "CREATE INDEX IF NOT EXISTS ix_doctor_specialty ON doctor (lower(specialty))",
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let conn = manager.get_connection();
        if manager.get_database_backend() == sea_orm::DatabaseBackend::Sqlite {
            conn.execute_unprepared(&format!("SAVEPOINT find_slots;\n{};\nRELEASE find_slots", SQLITE_UP.join(";\n")))
                .await?;
            return Ok(());
        }
        for sql in POSTGRES_UP {
            conn.execute_unprepared(sql).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let conn = manager.get_connection();
        for index in ["ix_doctor_specialty", "ix_time_slot_open_start", "ix_time_slot_open_doctor"] {
            conn.execute_unprepared(&format!("DROP INDEX IF EXISTS {index}")).await?;
        }
        if manager.get_database_backend() == sea_orm::DatabaseBackend::Postgres {
            conn.execute_unprepared("ALTER TABLE time_slot DROP COLUMN IF EXISTS open").await?;
        }
        Ok(())
    }
}
