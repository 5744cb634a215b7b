//! The slot search by specialty reads one index (PostgreSQL): each slot carries its doctor's
//! specialty, lower-cased (`time_slot.specialty`, NULL for a doctor without one), and
//! `ix_time_slot_open_specialty` on `(specialty, start_at, doctor_id, id) WHERE open` holds a
//! specialty's bookable slots in the search's answer order. Before it, a specialty's search
//! scanned each of its doctors' slots and merged them: one index descent per doctor, about 8×
//! the database's work at 64 clients (BENCHMARKS.md, eighteenth pass).
//!
//! The copy is kept by the database, not by the code that makes slots: a `BEFORE INSERT`
//! trigger sets it from the doctor's row (so every path that inserts slots, the load test's
//! seed included, gets it right), and an `AFTER UPDATE OF specialty` trigger on `doctor` moves
//! the doctor's slots with it (no API changes a specialty today; SQL may). SQLite keeps the
//! per-doctor search and needs nothing here.

use sea_orm_migration::prelude::*;

/// Adds `time_slot.specialty`, its triggers and its index (PostgreSQL).
pub(crate) struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261206_000001_slot_specialty"
    }
}

/// PostgreSQL's statements, in order.
const POSTGRES_UP: [&str; 6] = [
    "ALTER TABLE time_slot ADD COLUMN IF NOT EXISTS specialty text",
    "UPDATE time_slot s SET specialty = lower(d.specialty) FROM doctor d \
     WHERE d.id = s.doctor_id AND d.specialty IS NOT NULL",
    "CREATE OR REPLACE FUNCTION time_slot_specialty() RETURNS trigger LANGUAGE plpgsql AS $$ \
     BEGIN NEW.specialty := (SELECT lower(d.specialty) FROM doctor d WHERE d.id = NEW.doctor_id); RETURN NEW; END $$",
    "CREATE TRIGGER time_slot_specialty BEFORE INSERT OR UPDATE OF doctor_id, specialty ON time_slot \
     FOR EACH ROW EXECUTE FUNCTION time_slot_specialty()",
    "CREATE OR REPLACE FUNCTION doctor_specialty_slots() RETURNS trigger LANGUAGE plpgsql AS $$ \
     BEGIN UPDATE time_slot SET specialty = lower(NEW.specialty) WHERE doctor_id = NEW.id; RETURN NULL; END $$; \
     CREATE TRIGGER doctor_specialty_slots AFTER UPDATE OF specialty ON doctor FOR EACH ROW \
     WHEN (lower(OLD.specialty) IS DISTINCT FROM lower(NEW.specialty)) EXECUTE FUNCTION doctor_specialty_slots()",
    "CREATE INDEX IF NOT EXISTS ix_time_slot_open_specialty ON time_slot (specialty, start_at, doctor_id, id) WHERE open",
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != sea_orm::DatabaseBackend::Postgres {
            return Ok(());
        }
        let conn = manager.get_connection();
        for sql in POSTGRES_UP {
            conn.execute_unprepared(sql).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != sea_orm::DatabaseBackend::Postgres {
            return Ok(());
        }
        let conn = manager.get_connection();
        for sql in [
            "DROP INDEX IF EXISTS ix_time_slot_open_specialty",
            "DROP TRIGGER IF EXISTS doctor_specialty_slots ON doctor",
            "DROP FUNCTION IF EXISTS doctor_specialty_slots()",
            "DROP TRIGGER IF EXISTS time_slot_specialty ON time_slot",
            "DROP FUNCTION IF EXISTS time_slot_specialty()",
            "ALTER TABLE time_slot DROP COLUMN IF EXISTS specialty",
        ] {
            conn.execute_unprepared(sql).await?;
        }
        Ok(())
    }
}
