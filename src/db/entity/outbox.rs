//! `outbox`: side effects of committed bookings and cancels, waiting for the relay.

use sea_orm::entity::prelude::*;

/// One pending event: the slot's state right after the change, and what changed it.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "outbox")]
pub struct Model {
    /// Primary key; also the publishing order.
    #[sea_orm(primary_key)]
    pub id: i64,
    /// `BOOKED` or `CANCELLED`.
    pub kind: String,
    /// The appointment that changed.
    pub appointment_id: i64,
    /// The slot that changed.
    pub slot_id: i64,
    /// The slot's doctor.
    pub doctor_id: i64,
    /// The slot's start.
    pub start_at: DateTimeUtc,
    /// The slot's capacity.
    pub capacity: i32,
    /// The slot's booked count after the change.
    pub booked_count: i32,
    /// The slot's version after the change.
    pub version: i64,
    /// When the change committed (about).
    pub created_at: DateTimeUtc,
}

/// No relations.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
