//! The initial schema: doctors, their time slots, appointments and the transactional outbox.

use sea_orm_migration::prelude::*;

use crate::{UQ_APPOINTMENT_ACTIVE_PATIENT, UQ_APPOINTMENT_CALLER_KEY};

/// Creates `doctor`, `time_slot`, `appointment` and `outbox`.
pub(crate) struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261130_000001_initial"
    }
}

#[derive(DeriveIden)]
enum Doctor {
    Table,
    Id,
    Name,
    Specialty,
    Timezone,
    CreatedAt,
}

#[derive(DeriveIden)]
enum TimeSlot {
    Table,
    Id,
    DoctorId,
    StartAt,
    EndAt,
    Capacity,
    BookedCount,
    Version,
}

#[derive(DeriveIden)]
enum Appointment {
    Table,
    Id,
    SlotId,
    PatientId,
    Status,
    BookedBy,
    IdempotencyKey,
    RequestHash,
    CreatedAt,
    CancelledAt,
}

#[derive(DeriveIden)]
enum Outbox {
    Table,
    Id,
    Kind,
    AppointmentId,
    SlotId,
    DoctorId,
    StartAt,
    Capacity,
    BookedCount,
    Version,
    CreatedAt,
}

/// A `BIGINT` primary key that is also SQLite's rowid (SQLite only auto-increments an
/// `INTEGER PRIMARY KEY`, and its integers are 64-bit anyway).
fn id_column(manager: &SchemaManager, name: impl IntoIden) -> ColumnDef {
    let mut col = ColumnDef::new(name);
    if manager.get_database_backend() == sea_orm::DatabaseBackend::Sqlite {
        col.integer();
    } else {
        col.big_integer();
    }
    col.not_null().auto_increment().primary_key();
    col
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Doctor::Table)
                    .col(id_column(manager, Doctor::Id))
                    .col(ColumnDef::new(Doctor::Name).text().not_null())
                    .col(ColumnDef::new(Doctor::Specialty).text().null())
                    .col(ColumnDef::new(Doctor::Timezone).text().not_null())
                    .col(ColumnDef::new(Doctor::CreatedAt).timestamp_with_time_zone().not_null())
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(TimeSlot::Table)
                    .col(id_column(manager, TimeSlot::Id))
                    .col(ColumnDef::new(TimeSlot::DoctorId).big_integer().not_null())
                    .col(ColumnDef::new(TimeSlot::StartAt).timestamp_with_time_zone().not_null())
                    .col(ColumnDef::new(TimeSlot::EndAt).timestamp_with_time_zone().not_null())
                    .col(ColumnDef::new(TimeSlot::Capacity).integer().not_null())
                    .col(ColumnDef::new(TimeSlot::BookedCount).integer().not_null().default(0))
                    .col(ColumnDef::new(TimeSlot::Version).big_integer().not_null().default(0))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_time_slot_doctor")
                            .from(TimeSlot::Table, TimeSlot::DoctorId)
                            .to(Doctor::Table, Doctor::Id),
                    )
                    .check(Expr::col(TimeSlot::Capacity).gt(0))
                    .check(
                        Expr::col(TimeSlot::BookedCount)
                            .gte(0)
                            .and(Expr::col(TimeSlot::BookedCount).lte(Expr::col(TimeSlot::Capacity))),
                    )
                    .check(Expr::col(TimeSlot::EndAt).gt(Expr::col(TimeSlot::StartAt)))
                    .to_owned(),
            )
            .await?;
        // Doubles as the index for "a doctor's day": (doctor_id, start_at) range scans.
        manager
            .create_index(
                Index::create()
                    .name("uq_time_slot_doctor_start")
                    .table(TimeSlot::Table)
                    .col(TimeSlot::DoctorId)
                    .col(TimeSlot::StartAt)
                    .unique()
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(Appointment::Table)
                    .col(id_column(manager, Appointment::Id))
                    .col(ColumnDef::new(Appointment::SlotId).big_integer().not_null())
                    .col(ColumnDef::new(Appointment::PatientId).big_integer().not_null())
                    .col(ColumnDef::new(Appointment::Status).string_len(16).not_null())
                    .col(ColumnDef::new(Appointment::BookedBy).string_len(160).not_null())
                    .col(ColumnDef::new(Appointment::IdempotencyKey).string_len(64).not_null())
                    .col(ColumnDef::new(Appointment::RequestHash).string_len(64).not_null())
                    .col(ColumnDef::new(Appointment::CreatedAt).timestamp_with_time_zone().not_null())
                    .col(ColumnDef::new(Appointment::CancelledAt).timestamp_with_time_zone().null())
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_appointment_slot")
                            .from(Appointment::Table, Appointment::SlotId)
                            .to(TimeSlot::Table, TimeSlot::Id),
                    )
                    .check(Expr::col(Appointment::PatientId).gt(0))
                    .check(Expr::col(Appointment::Status).is_in(["BOOKED", "CANCELLED"]))
                    // A cancelled appointment always says when; a booked one never does.
                    .check(
                        Expr::col(Appointment::Status)
                            .eq("CANCELLED")
                            .eq(Expr::col(Appointment::CancelledAt).is_not_null()),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name(UQ_APPOINTMENT_CALLER_KEY)
                    .table(Appointment::Table)
                    .col(Appointment::BookedBy)
                    .col(Appointment::IdempotencyKey)
                    .unique()
                    .to_owned(),
            )
            .await?;
        // The builder has no partial indexes; this statement reads the same on both databases.
        manager
            .get_connection()
            .execute_unprepared(&format!(
                "CREATE UNIQUE INDEX {UQ_APPOINTMENT_ACTIVE_PATIENT} \
                 ON appointment (slot_id, patient_id) WHERE status = 'BOOKED'"
            ))
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_appointment_slot")
                    .table(Appointment::Table)
                    .col(Appointment::SlotId)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_appointment_patient")
                    .table(Appointment::Table)
                    .col(Appointment::PatientId)
                    .col(Appointment::CreatedAt)
                    .to_owned(),
            )
            .await?;

        // Written in the transaction of every booking and cancel, read and deleted by the relay:
        // side effects leave only for changes that committed.
        manager
            .create_table(
                Table::create()
                    .table(Outbox::Table)
                    .col(id_column(manager, Outbox::Id))
                    .col(ColumnDef::new(Outbox::Kind).string_len(16).not_null())
                    .col(ColumnDef::new(Outbox::AppointmentId).big_integer().not_null())
                    .col(ColumnDef::new(Outbox::SlotId).big_integer().not_null())
                    .col(ColumnDef::new(Outbox::DoctorId).big_integer().not_null())
                    .col(ColumnDef::new(Outbox::StartAt).timestamp_with_time_zone().not_null())
                    .col(ColumnDef::new(Outbox::Capacity).integer().not_null())
                    .col(ColumnDef::new(Outbox::BookedCount).integer().not_null())
                    .col(ColumnDef::new(Outbox::Version).big_integer().not_null())
                    .col(ColumnDef::new(Outbox::CreatedAt).timestamp_with_time_zone().not_null())
                    .to_owned(),
            )
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            Outbox::Table.into_iden(),
            Appointment::Table.into_iden(),
            TimeSlot::Table.into_iden(),
            Doctor::Table.into_iden(),
        ] {
            manager.drop_table(Table::drop().table(table).if_exists().to_owned()).await?;
        }
        Ok(())
    }
}
