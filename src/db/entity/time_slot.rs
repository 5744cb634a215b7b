//! `time_slot`: a bookable interval of one doctor with a capacity.

use sea_orm::entity::prelude::*;

/// One slot row; `booked_count` is kept equal to the slot's BOOKED appointments.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "time_slot")]
pub struct Model {
    /// Primary key.
    #[sea_orm(primary_key)]
    pub id: i64,
    /// The doctor.
    pub doctor_id: i64,
    /// Start (UTC).
    pub start_at: DateTimeUtc,
    /// End (UTC).
    pub end_at: DateTimeUtc,
    /// Seats (≥ 1).
    pub capacity: i32,
    /// Seats taken (0 ≤ booked_count ≤ capacity).
    pub booked_count: i32,
    /// Bumped by every change of `booked_count`, so clients can drop stale events.
    pub version: i64,
}

/// No relations are navigated through sea-orm; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
