//! The vocabulary the layers share, below all of them: a slot's change, a doctor's day, the
//! states and events of an appointment, and the two hooks through which committed changes
//! travel. It depends on no other module of the crate, so `booking`, `events`, `guard` and
//! `db` can all use it without depending on each other.

pub mod status;
pub mod time;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

pub use status::{
    AppointmentEvent, AppointmentState, AppointmentStatus, CancelledBy, WaitlistStatus, SCHEDULE_PUBLISHED, SLOT_ONLY,
};
pub use time::{day_bounds, doctor_day, parse_timezone, resolve_local, DayRange};

/// A slot's state right after a committed change.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
    /// Closed slots take no seat again (absent in changes of instances that predate closing).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub closed: bool,
}

impl SlotChange {
    /// Seats that can still be taken.
    pub fn available(&self) -> i32 {
        if self.closed {
            0
        } else {
            self.capacity - self.booked_count
        }
    }
}

/// Told about every committed slot change of this process, right after the commit.
pub trait CommitSink: Send + Sync + 'static {
    /// Called once per committed change; must not block.
    fn committed(&self, change: SlotChange);
    /// Called after a commit that published new slots of the doctor; must not block.
    fn published(&self, _doctor_id: i64) {}
}

/// A bare bell (the booking service without live availability); instances use the relay's sink.
impl CommitSink for tokio::sync::Notify {
    fn committed(&self, _change: SlotChange) {
        self.notify_one();
    }

    fn published(&self, _doctor_id: i64) {
        self.notify_one();
    }
}

/// Told about every committed change that reaches this instance's bus (its own and, through
/// Redis, every other instance's), e.g. to drop what was made of the slots before.
pub trait ChangeObserver: Send + Sync + 'static {
    /// A committed change of the doctor's slots arrived; must not block.
    fn changed(&self, change: &SlotChange);
    /// New slots of the doctor were published (no slot changed); must not block.
    fn published(&self, _doctor_id: i64) {}
    /// Changes may have been missed (Redis came back after an outage).
    fn may_have_missed_changes(&self);
}

/// Several observers as one: each change goes to every one of them, in order.
pub struct Observers(pub Vec<std::sync::Arc<dyn ChangeObserver>>);

impl ChangeObserver for Observers {
    fn changed(&self, change: &SlotChange) {
        for o in &self.0 {
            o.changed(change);
        }
    }

    fn published(&self, doctor_id: i64) {
        for o in &self.0 {
            o.published(doctor_id);
        }
    }

    fn may_have_missed_changes(&self) {
        for o in &self.0 {
            o.may_have_missed_changes();
        }
    }
}
