//! Generations of what reads depend on: a counter per doctor that every committed change of its
//! slots bumps, and the coarser counters searches across doctors depend on (a specialty's, new
//! doctors', everyone's). A read takes a [`Stamp`] of each first; whatever is made of that read
//! (a rendered answer, kept in process) is current exactly while its stamps are.
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
//!
//! A change names only its doctor. Which specialty that doctor has comes from the roster
//! ([`Generations::learn`]: every doctor with its specialty as the database folds it), read
//! when a specialty's stamp is first asked for. A change of a doctor the roster does not hold
//! (one created since) bumps the new doctors' counter, which every specialty stamp also watches;
//! the next specialty stamp then waits for the roster to be read again.
//!
//! A specialty's and everyone's counters are kept per UTC day of the changed slot's start, beside
//! one for changes that name no time (a published schedule): a search's page depends only on the
//! days up to its last row, so a booking on a later day leaves it current. On a busy day most
//! bookings fall on other days than a popular search's first.

use std::{
    collections::HashMap,
    ops::RangeInclusive,
    sync::{PoisonError, RwLock},
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};

use crate::model::{ChangeObserver, SlotChange};

/// Counters remembered before the map starts afresh (and every stamp with it).
const MAX_COUNTERS: usize = 1_000_000;

/// What a counter counts the changes of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Watched {
    /// One doctor's slots.
    Doctor(i64),
    /// The slots of the doctors of one specialty (by its number in the roster) starting on a UTC
    /// day ([`day_of`]); `None`: changes that name no time.
    Specialty(u32, Option<i64>),
    /// The slots of doctors the roster does not hold.
    NewDoctors,
    /// Anyone's slots starting on a UTC day; `None`: changes that name no time.
    Everyone(Option<i64>),
}

/// The UTC day `t` falls on, as days since 1970-01-01: the unit of the per-day counters.
pub fn day_of(t: DateTime<Utc>) -> i64 {
    t.timestamp().div_euclid(86_400)
}

/// A counter's value when a read that depends on it was about to start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    watched: Watched,
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

    /// The UTC day whose changes alone this stamp watches ([`day_of`]), if it watches one.
    pub fn day(&self) -> Option<i64> {
        match self.watched {
            Watched::Specialty(_, day) | Watched::Everyone(day) => day,
            Watched::Doctor(_) | Watched::NewDoctors => None,
        }
    }
}

/// Where the new doctors' counter stood before a roster was read ([`Generations::learn`]).
#[derive(Clone, Copy, Debug)]
pub struct RosterMark {
    epoch: u64,
    new_doctors: u64,
}

/// Every doctor's specialty, as of a read of the doctors.
#[derive(Default)]
struct Roster {
    /// Each doctor's specialty number (`None`: it has none).
    specialty_of: HashMap<i64, Option<u32>>,
    /// The new doctors' counter when the roster was read: past it, doctors it lacks changed.
    new_doctors_at: Option<(u64, u64)>,
}

#[derive(Default)]
struct Inner {
    /// Bumped to make every stamp stale at once.
    epoch: u64,
    generations: HashMap<Watched, u64>,
    roster: Roster,
    /// Specialties by name as the database folds them, numbered once for the instance's life
    /// (only names a doctor has: bounded by the doctor table).
    specialties: HashMap<String, u32>,
}

impl Inner {
    fn generation(&self, watched: Watched) -> u64 {
        self.generations.get(&watched).copied().unwrap_or(0)
    }

    fn stamp(&self, watched: Watched) -> Stamp {
        Stamp { watched, generation: self.generation(watched), epoch: self.epoch, until: None }
    }

    /// The stamps of a counter kept per day: the one for changes naming no time, then `days`'.
    fn by_day(&self, watched: impl Fn(Option<i64>) -> Watched, days: RangeInclusive<i64>) -> Vec<Stamp> {
        std::iter::once(None).chain(days.map(Some)).map(|day| self.stamp(watched(day))).collect()
    }

    fn bump(&mut self, watched: Watched) {
        if self.generations.len() >= MAX_COUNTERS && !self.generations.contains_key(&watched) {
            // Old stamps would match fresh zeros: the new epoch makes them all stale, and the
            // roster, whose mark they were, is read again.
            self.generations.clear();
            self.roster = Roster::default();
            self.epoch += 1;
        }
        *self.generations.entry(watched).or_insert(0) += 1;
    }
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

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        // Every operation leaves the map consistent; a panicking holder cannot break it.
        self.inner.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The doctor's current generation, to take before reading its slots.
    pub fn stamp(&self, doctor_id: i64) -> Stamp {
        self.read().stamp(Watched::Doctor(doctor_id))
    }

    /// The stamps to take before reading anyone's slots starting on the UTC `days`.
    pub fn everyone(&self, days: RangeInclusive<i64>) -> Vec<Stamp> {
        self.read().by_day(Watched::Everyone, days)
    }

    /// The stamps to take before reading the slots starting on the UTC `days` of the doctors of
    /// `specialty` (folded as the database folds it), or `None` when the roster must be read
    /// first ([`Self::learn`]).
    pub fn specialty(&self, specialty: &str, days: RangeInclusive<i64>) -> Option<Vec<Stamp>> {
        let inner = self.read();
        let current = (inner.epoch, inner.generation(Watched::NewDoctors));
        if inner.roster.new_doctors_at != Some(current) {
            return None;
        }
        let mut stamps = vec![inner.stamp(Watched::NewDoctors)];
        // A name no doctor had when the roster was read: only a new doctor can bring it.
        if let Some(&number) = inner.specialties.get(specialty) {
            stamps.extend(inner.by_day(|day| Watched::Specialty(number, day), days));
        }
        Some(stamps)
    }

    /// Where the new doctors' counter stands: take it before reading the roster.
    pub fn roster_mark(&self) -> RosterMark {
        let inner = self.read();
        RosterMark { epoch: inner.epoch, new_doctors: inner.generation(Watched::NewDoctors) }
    }

    /// The roster read after `mark`: each doctor with its specialty as the database folds it.
    pub fn learn(&self, mark: RosterMark, doctors: impl IntoIterator<Item = (i64, Option<String>)>) {
        let mut inner = self.write();
        if inner.epoch != mark.epoch {
            return;
        }
        let mut specialty_of = HashMap::new();
        for (doctor_id, specialty) in doctors {
            let number = specialty.map(|name| {
                let next = u32::try_from(inner.specialties.len()).unwrap_or(u32::MAX);
                *inner.specialties.entry(name).or_insert(next)
            });
            specialty_of.insert(doctor_id, number);
        }
        inner.roster = Roster { specialty_of, new_doctors_at: Some((mark.epoch, mark.new_doctors)) };
    }

    /// Whether every one of `stamps` is still current at `now`.
    pub fn all_current(&self, stamps: &[Stamp], now: Instant) -> bool {
        let inner = self.read();
        stamps.iter().all(|s| {
            s.epoch == inner.epoch
                && s.until.is_none_or(|until| now < until)
                && inner.generation(s.watched) == s.generation
        })
    }

    /// Some of the doctor's slots changed (no time named: a published schedule): stamps taken
    /// before of it, its specialty (or the new doctors, when the roster does not hold it) and
    /// everyone are stale, whatever their day.
    pub fn changed(&self, doctor_id: i64) {
        self.changed_on(doctor_id, None);
    }

    /// A slot of the doctor starting at `start` changed: as [`Self::changed`], except that the
    /// specialty's and everyone's stamps of other days stay current.
    pub fn slot_changed(&self, doctor_id: i64, start: DateTime<Utc>) {
        self.changed_on(doctor_id, Some(day_of(start)));
    }

    fn changed_on(&self, doctor_id: i64, day: Option<i64>) {
        let mut inner = self.write();
        let group = match inner.roster.specialty_of.get(&doctor_id) {
            Some(Some(number)) => Some(Watched::Specialty(*number, day)),
            Some(None) => None,
            None => Some(Watched::NewDoctors),
        };
        inner.bump(Watched::Doctor(doctor_id));
        inner.bump(Watched::Everyone(day));
        if let Some(group) = group {
            inner.bump(group);
        }
    }

    /// Changes may have been missed: every stamp taken so far is stale.
    pub fn drop_all(&self) {
        self.write().epoch += 1;
    }
}

impl ChangeObserver for Generations {
    fn changed(&self, change: &SlotChange) {
        self.slot_changed(change.doctor_id, change.start_at);
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
    fn a_specialty_stamp_is_current_until_one_of_its_doctors_or_a_new_doctor_changes() {
        let generations = Generations::new();
        let days = || 0..=0;
        assert!(generations.specialty("cardiology", days()).is_none(), "no roster read yet");
        let mark = generations.roster_mark();
        generations.learn(mark, [(1, Some("cardiology".to_owned())), (2, Some("dermatology".to_owned())), (3, None)]);
        let cardiology = generations.specialty("cardiology", days()).unwrap_or_default();
        let unknown = generations.specialty("oncology", days()).unwrap_or_default();
        let everyone = generations.everyone(days());
        let now = Instant::now();
        assert_eq!((cardiology.len(), unknown.len()), (3, 1));
        generations.changed(2);
        generations.changed(3);
        assert!(generations.all_current(&cardiology, now), "other specialties' doctors keep it");
        assert!(generations.all_current(&unknown, now));
        assert!(!generations.all_current(&everyone, now), "everyone's changes with any doctor");
        generations.changed(1);
        assert!(!generations.all_current(&cardiology, now));
        assert!(generations.all_current(&unknown, now));

        let cardiology = generations.specialty("cardiology", days()).unwrap_or_default();
        generations.changed(4);
        assert!(!generations.all_current(&cardiology, now), "a doctor the roster lacks may be anyone's");
        assert!(!generations.all_current(&unknown, now));
        assert!(generations.specialty("cardiology", days()).is_none(), "the roster is read again first");
    }

    #[test]
    fn a_roster_read_across_a_change_it_may_lack_is_read_again() {
        let generations = Generations::new();
        let mark = generations.roster_mark();
        generations.changed(9);
        generations.learn(mark, [(1, Some("cardiology".to_owned()))]);
        assert!(generations.specialty("cardiology", 0..=0).is_none());
        let mark = generations.roster_mark();
        generations.drop_all();
        generations.learn(mark, [(1, Some("cardiology".to_owned())), (9, None)]);
        assert!(generations.specialty("cardiology", 0..=0).is_none(), "learnt in an older epoch");
        generations.learn(generations.roster_mark(), [(1, Some("cardiology".to_owned())), (9, None)]);
        assert!(generations.specialty("cardiology", 0..=0).is_some());
    }

    #[test]
    fn a_slot_change_leaves_other_days_stamps_current() {
        let generations = Generations::new();
        generations.learn(generations.roster_mark(), [(1, Some("cardiology".to_owned()))]);
        let day = |d: u32| chrono::NaiveDate::from_ymd_opt(2030, 1, d).and_then(|d| d.and_hms_opt(12, 0, 0));
        let at = |d: u32| day(d).map(|t| t.and_utc()).unwrap_or_default();
        let (first, second) = (day_of(at(7)), day_of(at(8)));
        assert_eq!(second, first + 1);
        let both = generations.specialty("cardiology", first..=second).unwrap_or_default();
        let mut only_first = both.clone();
        only_first.retain(|s| s.day().is_none_or(|d| d <= first));
        let everyone = generations.everyone(first..=first);
        let doctor = generations.stamp(1);
        let now = Instant::now();
        generations.slot_changed(1, at(8));
        assert!(generations.all_current(&only_first, now) && generations.all_current(&everyone, now));
        assert!(!generations.all_current(&both, now));
        assert!(!generations.all_current(&[doctor], now), "a doctor's stamp covers every day");
        generations.changed(1);
        assert!(!generations.all_current(&only_first, now), "a change naming no time covers every day");
        assert!(!generations.all_current(&everyone, now));
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
