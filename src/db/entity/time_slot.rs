//! `time_slot`: a bookable interval of one doctor with a capacity.

use sea_orm::entity::prelude::*;

/// One slot row; `booked_count` is kept equal to the active (`HELD` or `BOOKED`) appointments
/// that take a seat in it.
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
    /// Bumped by every change of `booked_count` (and by closing), so clients can drop stale
    /// events.
    pub version: i64,
    /// When the slot was closed; a closed slot never takes a seat again.
    pub closed_at: Option<DateTimeUtc>,
    /// Why it was closed, as the clinic said.
    pub closed_reason: Option<String>,
}

impl Model {
    /// Seats that can still be taken (none in a closed slot).
    pub fn available(&self) -> i32 {
        if self.closed_at.is_some() {
            0
        } else {
            self.capacity - self.booked_count
        }
    }
}

/// No relations are navigated through sea-orm; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

impl From<&Model> for crate::model::SlotChange {
    fn from(slot: &Model) -> Self {
        Self {
            slot_id: slot.id,
            doctor_id: slot.doctor_id,
            start_at: slot.start_at,
            capacity: slot.capacity,
            booked_count: slot.booked_count,
            version: slot.version,
            closed: slot.closed_at.is_some(),
        }
    }
}
