//! Live availability: what a committed slot change looks like, and where it goes.
//!
//! The booking layer tells a [`CommitSink`] about each change right after its transaction
//! commits; the durable record is the outbox row written inside that transaction.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::db::entity::time_slot;

/// A slot's state right after a committed change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotChange {
    /// The slot.
    pub slot_id: i64,
    /// Its doctor.
    pub doctor_id: i64,
    /// Its start.
    pub start_at: DateTime<Utc>,
    /// Its capacity.
    pub capacity: i32,
    /// Seats taken after the change.
    pub booked_count: i32,
    /// Version after the change; increases with every change.
    pub version: i64,
}

impl SlotChange {
    /// The change that left `slot` as it is.
    pub fn from_slot(slot: &time_slot::Model) -> Self {
        Self {
            slot_id: slot.id,
            doctor_id: slot.doctor_id,
            start_at: slot.start_at,
            capacity: slot.capacity,
            booked_count: slot.booked_count,
            version: slot.version,
        }
    }
}

/// Told about every committed slot change of this process, right after the commit.
pub trait CommitSink: Send + Sync + 'static {
    /// Called once per committed change; must not block.
    fn committed(&self, change: SlotChange);
}

/// Wakes the outbox relay: the change itself travels through the outbox row.
impl CommitSink for tokio::sync::Notify {
    fn committed(&self, _change: SlotChange) {
        self.notify_one();
    }
}
