//! `appointment`: a seat in a slot held by a patient.

use sea_orm::entity::prelude::*;

/// Status value of an active appointment.
pub const BOOKED: &str = "BOOKED";
/// Status value of a cancelled appointment.
pub const CANCELLED: &str = "CANCELLED";

/// One appointment row.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "appointment")]
pub struct Model {
    /// Primary key.
    #[sea_orm(primary_key)]
    pub id: i64,
    /// The slot.
    pub slot_id: i64,
    /// The patient holding the seat.
    pub patient_id: i64,
    /// `BOOKED` or `CANCELLED`.
    pub status: String,
    /// Scope (`role:sub`) of the caller who booked it.
    pub booked_by: String,
    /// The caller's idempotency key.
    pub idempotency_key: String,
    /// Fingerprint of the booking request, to tell a retry from a reused key.
    pub request_hash: String,
    /// When it was booked.
    pub created_at: DateTimeUtc,
    /// When it was cancelled.
    pub cancelled_at: Option<DateTimeUtc>,
}

/// No relations are navigated through sea-orm; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
