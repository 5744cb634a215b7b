//! Rendered answers of slot-list queries, in process: the JSON text of an `availableSlots`
//! answer, kept for the slot-list TTL and served again for the same request body without
//! validating, executing or serialising anything.
//!
//! A slot list of 40 slots is a few microseconds of data but about a hundred of GraphQL work
//! (validation, 120 field resolutions, serialisation), which made it the most expensive read
//! of an opening morning. This cache sits in front of all of that, and in front of
//! [`super::SlotCache`], which still holds the rows every instance shares.
//!
//! **When an answer stops being served.** Each answer depends on one or more doctors' slots.
//! A stamp taken *before* the rows were read records each doctor's generation here; a change of
//! a doctor's slots bumps it, and an answer whose stamps are not current is never served (nor
//! stored, when the change came while it was being made). Generations are bumped by:
//! - this instance's own commits (booking, cancel, publish), before their answers go out, so
//!   a client reads its own writes;
//! - every committed change that reaches this instance's live-availability bus, which carries
//!   other instances' commits too (Redis pub/sub), usually within milliseconds, and their
//!   published schedules (an outbox row of their own, which no subscription hears);
//! - a possible loss of such changes (Redis came back after an outage): everything is dropped.
//!
//! So an answer is exact while the bus is, and its life (`ANSWER_CACHE_TTL_MS`, 30 s) only
//! bounds what nothing reports: a change written to the database by hand, say. It also ends
//! when its earliest slot starts (a started slot is no longer available), and an answer made of
//! rows from the shared slot-list cache ends with those rows' TTL (`SLOT_CACHE_TTL_MS`): a
//! commit's delete of them in Redis can be lost. The booking decision never reads either.

use std::{
    collections::HashMap,
    sync::{Mutex, MutexGuard, PoisonError},
    time::{Duration, Instant},
};

use axum::body::Bytes;
use chrono::{DateTime, Utc};

use crate::model::{ChangeObserver, SlotChange};

/// Total bytes of answers kept; past it, expired ones are swept and, if that is not enough,
/// arbitrary ones until a quarter is free (a flood of distinct requests costs memory up to
/// here, no more). An opening morning's 28,000 doctor-days of 40 slots take about 80 MB.
const MAX_BYTES: usize = 128 * 1024 * 1024;
/// Largest answer kept.
const MAX_ANSWER_BYTES: usize = 256 * 1024;
/// Doctors whose generation is remembered before the map is reset (with every answer).
const MAX_DOCTORS: usize = 1_000_000;

/// A doctor's generation when the rows of an answer were about to be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    doctor_id: i64,
    generation: u64,
    epoch: u64,
    until: Instant,
}

impl Stamp {
    /// Shortens the stamp's life to end when `start` comes (the first slot of a list starting
    /// makes the list wrong).
    pub fn expire_at(&mut self, start: DateTime<Utc>) {
        let left = (start - Utc::now()).to_std().unwrap_or(Duration::ZERO);
        self.until = self.until.min(Instant::now() + left);
    }

    /// Shortens the stamp's life to `ttl` from now: an answer made of rows from the shared
    /// slot-list cache lives no longer than those rows may be stale.
    pub fn expire_within(&mut self, ttl: Duration) {
        self.until = self.until.min(Instant::now() + ttl);
    }
}

/// One kept answer.
struct Entry {
    body: Bytes,
    operation: String,
    stamps: Vec<Stamp>,
}

#[derive(Default)]
struct Inner {
    /// Bumped to drop every answer at once.
    epoch: u64,
    generations: HashMap<i64, u64>,
    answers: HashMap<Bytes, Entry>,
    bytes: usize,
}

/// Whether an answer made under `s` may still be served.
fn is_current(generations: &HashMap<i64, u64>, epoch: u64, s: &Stamp, now: Instant) -> bool {
    s.epoch == epoch && now < s.until && generations.get(&s.doctor_id).copied().unwrap_or(0) == s.generation
}

impl Inner {
    fn current(&self, s: &Stamp, now: Instant) -> bool {
        is_current(&self.generations, self.epoch, s, now)
    }

    fn clear(&mut self) {
        self.epoch += 1;
        self.answers.clear();
        self.bytes = 0;
    }
}

/// The answer cache of an instance.
pub struct AnswerCache {
    /// How long an answer lives at most; zero: off.
    ttl: Duration,
    inner: Mutex<Inner>,
}

impl AnswerCache {
    /// A cache keeping answers for `ttl` (zero: nothing is kept).
    pub fn new(ttl: Duration) -> Self {
        Self { ttl, inner: Mutex::default() }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every operation leaves the maps consistent; a panicking holder cannot break them.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The doctor's current generation, to take before reading the rows an answer is made of.
    pub fn stamp(&self, doctor_id: i64) -> Stamp {
        let inner = self.lock();
        Stamp {
            doctor_id,
            generation: inner.generations.get(&doctor_id).copied().unwrap_or(0),
            epoch: inner.epoch,
            until: Instant::now() + self.ttl,
        }
    }

    /// The doctor's slots changed: answers made of them are no longer served.
    pub fn changed(&self, doctor_id: i64) {
        let mut inner = self.lock();
        if inner.generations.len() >= MAX_DOCTORS && !inner.generations.contains_key(&doctor_id) {
            // Old stamps would match fresh zeros: drop their answers with the map.
            inner.generations.clear();
            inner.clear();
        }
        *inner.generations.entry(doctor_id).or_insert(0) += 1;
    }

    /// Changes may have been missed: nothing kept is served again.
    pub fn drop_all(&self) {
        self.lock().clear();
    }

    /// The answer kept for this request body, with its operation name, if still current.
    pub fn get(&self, request: &[u8]) -> Option<(Bytes, String)> {
        if self.ttl.is_zero() {
            return None;
        }
        let inner = self.lock();
        let entry = inner.answers.get(request)?;
        let now = Instant::now();
        entry.stamps.iter().all(|s| inner.current(s, now)).then(|| (entry.body.clone(), entry.operation.clone()))
    }

    /// Keeps `body` as the answer to `request`, made of the rows `stamps` were taken for; not
    /// kept when any of them changed meanwhile (the rows may predate the change).
    pub fn put(&self, request: Bytes, stamps: Vec<Stamp>, body: Bytes, operation: &str) {
        if self.ttl.is_zero() || stamps.is_empty() || body.len() > MAX_ANSWER_BYTES {
            return;
        }
        let mut inner = self.lock();
        let now = Instant::now();
        if !stamps.iter().all(|s| inner.current(s, now)) {
            return;
        }
        let size = request.len() + body.len();
        if inner.bytes + size > MAX_BYTES {
            let Inner { answers, generations, epoch, .. } = &mut *inner;
            answers.retain(|_, e| e.stamps.iter().all(|s| is_current(generations, *epoch, s, now)));
            let mut bytes: usize = answers.iter().map(|(k, e)| k.len() + e.body.len()).sum();
            // The map's order is arbitrary: this drops a random sample, not the hottest answers.
            answers.retain(|k, e| {
                let keep = bytes + size <= MAX_BYTES / 4 * 3;
                if !keep {
                    bytes -= k.len() + e.body.len();
                }
                keep
            });
            inner.bytes = bytes;
        }
        inner.bytes += size;
        let entry = Entry { body, operation: operation.to_owned(), stamps };
        let key_len = request.len();
        if let Some(old) = inner.answers.insert(request, entry) {
            inner.bytes -= key_len + old.body.len();
        }
    }
}

impl ChangeObserver for AnswerCache {
    fn changed(&self, change: &SlotChange) {
        AnswerCache::changed(self, change.doctor_id);
    }

    fn may_have_missed_changes(&self) {
        self.drop_all();
    }

    fn published(&self, doctor_id: i64) {
        AnswerCache::changed(self, doctor_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache() -> AnswerCache {
        AnswerCache::new(Duration::from_secs(60))
    }

    fn put(cache: &AnswerCache, request: &'static str, stamps: Vec<Stamp>) {
        cache.put(Bytes::from_static(request.as_bytes()), stamps, Bytes::from_static(b"{}"), "op");
    }

    #[test]
    fn an_answer_is_served_until_its_doctor_changes() {
        let cache = cache();
        let stamp = cache.stamp(7);
        put(&cache, "q", vec![stamp]);
        assert_eq!(cache.get(b"q").map(|(b, op)| (b.len(), op)), Some((2, "op".to_owned())));
        assert!(cache.get(b"other").is_none());
        cache.changed(8);
        assert!(cache.get(b"q").is_some(), "another doctor's change keeps it");
        cache.changed(7);
        assert!(cache.get(b"q").is_none());
    }

    #[test]
    fn rows_read_before_a_change_are_not_kept() {
        let cache = cache();
        let stamp = cache.stamp(7);
        cache.changed(7);
        put(&cache, "q", vec![stamp]);
        assert!(cache.get(b"q").is_none());
        put(&cache, "q", vec![]);
        assert!(cache.get(b"q").is_none(), "an answer with no stamp depends on unknown data");
    }

    #[test]
    fn answers_end_with_their_first_slot_the_ttl_or_a_resync() {
        let cache = cache();
        let mut started = cache.stamp(7);
        started.expire_at(Utc::now());
        put(&cache, "started", vec![started]);
        assert!(cache.get(b"started").is_none());

        put(&cache, "q", vec![cache.stamp(7)]);
        cache.drop_all();
        assert!(cache.get(b"q").is_none());
        put(&cache, "q", vec![cache.stamp(7)]);
        assert!(cache.get(b"q").is_some());

        let off = AnswerCache::new(Duration::ZERO);
        put(&off, "q", vec![off.stamp(7)]);
        assert!(off.get(b"q").is_none());
    }
}
