//! Contact details kept per booker.
//!
//! Until now a patient had one row of contact details, and any partner could overwrite it, and
//! so redirect the messages about the patient's other appointments (names, times, doctors) to
//! itself. Now `patient_contact` is keyed by (`patient_id`, `booker`): `booker` is `''` for the
//! patient's own details and a partner's scope (`partner:sub`) for the details that partner
//! keeps for the patient, which serve only the appointments that partner makes.
//!
//! Existing rows: a row a partner wrote last becomes that partner's; every other row (written
//! by the patient or an admin) stays the patient's own.

use sea_orm_migration::prelude::*;

/// Keys `patient_contact` by (patient, booker).
pub(crate) struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261204_000003_contacts_per_booker"
    }
}

/// Who a row belongs to, from who wrote it last.
const BOOKER_OF_ROW: &str = "CASE WHEN updated_by LIKE 'partner:%' THEN updated_by ELSE '' END";

/// The table as it is after this migration, with the column types of one database.
fn table(name: &str, bigint: &str, ts: &str) -> String {
    format!(
        "CREATE TABLE {name} ( \
           patient_id {bigint} NOT NULL, \
           booker varchar(160) NOT NULL DEFAULT '', \
           email varchar(254) NULL, \
           phone varchar(16) NULL, \
           locale varchar(35) NULL, \
           updated_at {ts} NOT NULL, \
           updated_by varchar(160) NOT NULL, \
           PRIMARY KEY (patient_id, booker), \
           CONSTRAINT ck_patient_contact_patient CHECK (patient_id > 0))"
    )
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let conn = manager.get_connection();
        if manager.get_database_backend() == sea_orm::DatabaseBackend::Sqlite {
            // SQLite cannot change a primary key: the table is rebuilt, in one batch.
            let columns = "patient_id, email, phone, locale, updated_at, updated_by";
            let batch = [
                "SAVEPOINT contacts_per_booker".to_owned(),
                table("patient_contact_new", "bigint", "timestamp_with_timezone_text"),
                format!(
                    "INSERT INTO patient_contact_new ({columns}, booker) \
                     SELECT {columns}, {BOOKER_OF_ROW} FROM patient_contact"
                ),
                "DROP TABLE patient_contact".to_owned(),
                "ALTER TABLE patient_contact_new RENAME TO patient_contact".to_owned(),
                "RELEASE contacts_per_booker".to_owned(),
            ];
            conn.execute_unprepared(&batch.join(";\n")).await?;
            return Ok(());
        }
        conn.execute_unprepared(&format!(
            "ALTER TABLE patient_contact ADD COLUMN booker varchar(160) NOT NULL DEFAULT ''; \
             UPDATE patient_contact SET booker = {BOOKER_OF_ROW}; \
             ALTER TABLE patient_contact DROP CONSTRAINT patient_contact_pkey, \
               ADD CONSTRAINT patient_contact_pkey PRIMARY KEY (patient_id, booker)"
        ))
        .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let conn = manager.get_connection();
        // One row per patient again: the patient's own details, or else the latest a partner wrote.
        let keep = "DELETE FROM patient_contact WHERE booker <> '' AND EXISTS (SELECT 1 FROM patient_contact o \
                      WHERE o.patient_id = patient_contact.patient_id AND (o.booker = '' \
                        OR o.updated_at > patient_contact.updated_at \
                        OR (o.updated_at = patient_contact.updated_at AND o.booker > patient_contact.booker)))";
        if manager.get_database_backend() == sea_orm::DatabaseBackend::Sqlite {
            let columns = "patient_id, email, phone, locale, updated_at, updated_by";
            let batch = [
                "SAVEPOINT contacts_per_booker".to_owned(),
                keep.to_owned(),
                "CREATE TABLE patient_contact_old ( \
                   patient_id bigint NOT NULL PRIMARY KEY, \
                   email varchar(254) NULL, \
                   phone varchar(16) NULL, \
                   locale varchar(35) NULL, \
                   updated_at timestamp_with_timezone_text NOT NULL, \
                   updated_by varchar(160) NOT NULL, \
                   CONSTRAINT ck_patient_contact_patient CHECK (patient_id > 0))"
                    .to_owned(),
                format!("INSERT INTO patient_contact_old ({columns}) SELECT {columns} FROM patient_contact"),
                "DROP TABLE patient_contact".to_owned(),
                "ALTER TABLE patient_contact_old RENAME TO patient_contact".to_owned(),
                "RELEASE contacts_per_booker".to_owned(),
            ];
            conn.execute_unprepared(&batch.join(";\n")).await?;
            return Ok(());
        }
        conn.execute_unprepared(&format!(
            "{keep}; \
             ALTER TABLE patient_contact DROP CONSTRAINT patient_contact_pkey, \
               ADD CONSTRAINT patient_contact_pkey PRIMARY KEY (patient_id), DROP COLUMN booker"
        ))
        .await?;
        Ok(())
    }
}
