//! Generations of each doctor's slots: a counter per doctor that every committed change of its
//! slots bumps. A read of a doctor's slots takes a [`Stamp`] first; whatever is made of that read
//! (a rendered slot-list answer, kept in process) is current exactly while its stamps are.
//!
//! The counters hear of changes as a [`ChangeObserver`], like the instance's other caches:
//! - this instance's own commits, told by the booking service's commit sink right after each
//!   commit (after the shared slot-list rows are dropped, so a read that starts after the bump
//!   cannot find rows older than it) and before the answer goes out, so a client reads its own
//!   writes;
//! - every committed change that reaches the instance's live-availability bus, which carries other
//!   instances' commits too (Redis pub/sub), usually within milliseconds, and their published
//!   schedules;
//! - a possible loss of such changes (Redis came back after an outage): every stamp goes stale.

use std::{
    collections::HashMap,
    sync::{PoisonError, RwLock},
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};

use crate::model::{ChangeObserver, SlotChange};

/// Doctors whose generation is remembered before the map starts afresh (and every stamp with it).
const MAX_DOCTORS: usize = 1_000_000;

/// A doctor's generation when a read of its slots was about to start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    doctor_id: i64,
    generation: u64,
    epoch: u64,
    /// When what was read stops being right whatever happens (`None`: only a change ends it).
    until: Option<Instant>,
}

impl Stamp {
    /// Ends the stamp's life when `start` comes (the first slot of a list starting makes the
    /// list wrong).
    pub fn expire_at(&mut self, start: DateTime<Utc>) {
        let left = (start - Utc::now()).to_std().unwrap_or(Duration::ZERO);
        self.expire_within(left);
    }

    /// Ends the stamp's life `ttl` from now at the latest: a read of rows from the shared
    /// slot-list cache is right no longer than those rows may be stale.
    pub fn expire_within(&mut self, ttl: Duration) {
        let end = Instant::now() + ttl;
        self.until = Some(self.until.map_or(end, |u| u.min(end)));
    }

    /// When what was read stops being right whatever happens, if ever.
    pub fn until(&self) -> Option<Instant> {
        self.until
    }
}

#[derive(Default)]
struct Inner {
    /// Bumped to make every stamp stale at once.
    epoch: u64,
    generations: HashMap<i64, u64>,
}

/// The generations of an instance (read-mostly: a stamp per read, a bump per change).
#[derive(Default)]
pub struct Generations {
    inner: RwLock<Inner>,
}

impl Generations {
    /// No doctor changed yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The doctor's current generation, to take before reading its slots.
    pub fn stamp(&self, doctor_id: i64) -> Stamp {
        // Every operation leaves the map consistent; a panicking holder cannot break it.
        let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        Stamp {
            doctor_id,
            generation: inner.generations.get(&doctor_id).copied().unwrap_or(0),
            epoch: inner.epoch,
            until: None,
        }
    }

    /// Whether every one of `stamps` is still current at `now`.
    pub fn all_current(&self, stamps: &[Stamp], now: Instant) -> bool {
        let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        stamps.iter().all(|s| {
            s.epoch == inner.epoch
                && s.until.is_none_or(|until| now < until)
                && inner.generations.get(&s.doctor_id).copied().unwrap_or(0) == s.generation
        })
    }

    /// The doctor's slots changed: stamps taken before are stale.
    pub fn changed(&self, doctor_id: i64) {
        let mut inner = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        if inner.generations.len() >= MAX_DOCTORS && !inner.generations.contains_key(&doctor_id) {
            // Old stamps would match fresh zeros: the new epoch makes them all stale.
            inner.generations.clear();
            inner.epoch += 1;
        }
        *inner.generations.entry(doctor_id).or_insert(0) += 1;
    }

    /// Changes may have been missed: every stamp taken so far is stale.
    pub fn drop_all(&self) {
        self.inner.write().unwrap_or_else(PoisonError::into_inner).epoch += 1;
    }
}

impl ChangeObserver for Generations {
    fn changed(&self, change: &SlotChange) {
        Generations::changed(self, change.doctor_id);
    }

    fn published(&self, doctor_id: i64) {
        Generations::changed(self, doctor_id);
    }

    fn may_have_missed_changes(&self) {
        self.drop_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_is_current_until_its_doctor_changes() {
        let generations = Generations::new();
        let stamp = generations.stamp(7);
        let now = Instant::now();
        assert!(generations.all_current(&[stamp], now));
        generations.changed(8);
        assert!(generations.all_current(&[stamp], now), "another doctor's change keeps it");
        generations.changed(7);
        assert!(!generations.all_current(&[stamp], now));
        assert!(generations.all_current(&[generations.stamp(7)], now));
    }

    #[test]
    fn stamps_end_with_their_first_slot_or_a_resync() {
        let generations = Generations::new();
        let mut started = generations.stamp(7);
        started.expire_at(Utc::now());
        assert!(!generations.all_current(&[started], Instant::now()));
        let mut soon = generations.stamp(7);
        soon.expire_within(Duration::from_secs(60));
        assert!(generations.all_current(&[soon], Instant::now()));
        assert!(!generations.all_current(&[soon], Instant::now() + Duration::from_secs(61)));
        let stamp = generations.stamp(7);
        generations.drop_all();
        assert!(!generations.all_current(&[stamp], Instant::now()));
    }
}
