//! `waitlist_entry`: a patient waiting for a seat with a doctor on a day.

use sea_orm::entity::prelude::*;

use crate::model::WaitlistStatus;

/// One waitlist entry row.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "waitlist_entry")]
pub struct Model {
    /// Primary key; also the order entries are served in.
    #[sea_orm(primary_key)]
    pub id: i64,
    /// The doctor.
    pub doctor_id: i64,
    /// The day in the doctor's zone, `YYYY-MM-DD`.
    pub date: String,
    /// First instant of that day (UTC).
    pub day_from: DateTimeUtc,
    /// First instant after it.
    pub day_to: DateTimeUtc,
    /// The patient waiting.
    pub patient_id: i64,
    /// `WAITING`, `OFFERED`, `FULFILLED`, `LAPSED` or `LEFT`.
    pub status: String,
    /// Scope of the caller who made the entry (owns its idempotency key; a partner sees it).
    pub booked_by: String,
    /// The caller's idempotency key.
    pub idempotency_key: String,
    /// Fingerprint of the request.
    pub request_hash: String,
    /// When the patient joined.
    pub created_at: DateTimeUtc,
    /// When the status last changed.
    pub updated_at: DateTimeUtc,
    /// The hold made for the entry when a seat was offered.
    pub offer_appointment_id: Option<i64>,
}

impl Model {
    /// The status as a value (an unknown word reads as `LEFT`: it waits for nothing).
    pub fn status(&self) -> WaitlistStatus {
        WaitlistStatus::parse(&self.status).unwrap_or(WaitlistStatus::Left)
    }
}

/// No relations are navigated through sea-orm; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
