//! The slot-list cache: a doctor's bookable slots of one day, for a few seconds, deleted when a
//! booking, cancel or publish of that doctor and day commits. Stale lists are acceptable (the
//! booking decision never reads them); the TTL bounds how stale, also when a delete is lost.
//!
//! With Redis every instance shares one copy (`PREFIX:slots:DOCTOR:DATE`, a compact binary
//! encoding of the rows); without it the rows live in this process. Also here: the doctor →
//! time zone map, kept in process because a doctor's zone never changes.

use std::{sync::Arc, time::Duration};

use moka::sync::Cache;

use chrono::{DateTime, NaiveDate, Utc};
use chrono_tz::Tz;

use super::redis_link::{GuardError, RedisLink};
use crate::db::entity::time_slot;

/// Format tag of the encoded list, so a change of layout reads as a miss, not as garbage.
const FORMAT: u8 = 1;
/// Bytes per encoded slot: id, doctor, start, end (i64), capacity, booked (i32), version (i64).
const SLOT_BYTES: usize = 8 * 4 + 4 * 2 + 8;

/// A doctor's day, the cache key.
type DayKey = (i64, NaiveDate);

/// The slot-list cache of an instance.
pub struct SlotCache {
    ttl: Duration,
    backend: Backend,
}

enum Backend {
    Off,
    Local(Cache<DayKey, Arc<Vec<time_slot::Model>>>),
    Redis(RedisLink),
}

impl SlotCache {
    /// No caching at all.
    pub fn off() -> Self {
        Self { ttl: Duration::ZERO, backend: Backend::Off }
    }

    /// An in-process cache (single-process mode); off when `ttl` is zero.
    pub fn local(ttl: Duration) -> Self {
        if ttl.is_zero() {
            return Self::off();
        }
        Self { ttl, backend: Backend::Local(super::local_map(Some(ttl))) }
    }

    pub(crate) fn redis(link: RedisLink, ttl: Duration) -> Self {
        if ttl.is_zero() {
            return Self::off();
        }
        Self { ttl, backend: Backend::Redis(link) }
    }

    /// How long a list read here may have missed a change that this instance was told about:
    /// the TTL for the copy shared in Redis (a commit's delete there can be lost), none for
    /// the in-process copy.
    pub fn staleness(&self) -> Option<Duration> {
        matches!(self.backend, Backend::Redis(_)).then_some(self.ttl)
    }

    /// The cached list of the doctor's day, if any (a Redis failure reads as a miss).
    pub async fn get(&self, doctor_id: i64, date: NaiveDate) -> Option<Vec<time_slot::Model>> {
        let found = match &self.backend {
            Backend::Off => return None,
            Backend::Local(lists) => lists.get(&(doctor_id, date)).map(|rows| rows.to_vec()),
            Backend::Redis(link) => {
                let key = link.key(format_args!("slots:{doctor_id}:{date}"));
                let raw: Option<Vec<u8>> = link
                    .run("cache_get", |mut c| async move { redis::cmd("GET").arg(key).query_async(&mut c).await })
                    .await
                    .ok()
                    .flatten();
                match raw.map(|bytes| decode(&bytes)) {
                    None => None,
                    Some(Ok(rows)) => Some(rows),
                    Some(Err(e)) => {
                        link.failed("cache_decode", &e);
                        None
                    }
                }
            }
        };
        let result = if found.is_some() { "hit" } else { "miss" };
        metrics::counter!("slot_cache_requests_total", "result" => result).increment(1);
        found
    }

    /// Stores the list of the doctor's day for the TTL.
    pub async fn put(&self, doctor_id: i64, date: NaiveDate, rows: &[time_slot::Model]) {
        match &self.backend {
            Backend::Off => {}
            Backend::Local(lists) => lists.insert((doctor_id, date), Arc::new(rows.to_vec())),
            Backend::Redis(link) => {
                let key = link.key(format_args!("slots:{doctor_id}:{date}"));
                let value = encode(rows);
                let ttl_ms = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX);
                let _ = link
                    .run("cache_put", |mut c| async move {
                        redis::cmd("SET").arg(key).arg(value).arg("PX").arg(ttl_ms).query_async::<()>(&mut c).await
                    })
                    .await;
            }
        }
    }

    /// Deletes the list of the doctor's day (after a commit that changed it).
    pub async fn invalidate(&self, doctor_id: i64, date: NaiveDate) {
        match &self.backend {
            Backend::Off => {}
            Backend::Local(lists) => lists.invalidate(&(doctor_id, date)),
            Backend::Redis(link) => {
                let key = link.key(format_args!("slots:{doctor_id}:{date}"));
                let _ = link
                    .run("cache_invalidate", |mut c| async move {
                        redis::cmd("DEL").arg(key).query_async::<()>(&mut c).await
                    })
                    .await;
            }
        }
    }
}

/// Doctors' time zones, in process (a doctor's zone never changes; unknown doctors are not kept,
/// since one may be created later).
pub struct TimezoneCache {
    zones: Cache<i64, Tz>,
}

impl Default for TimezoneCache {
    fn default() -> Self {
        Self { zones: super::local_map(None) }
    }
}

impl TimezoneCache {
    /// The doctor's zone, if known here.
    pub fn get(&self, doctor_id: i64) -> Option<Tz> {
        self.zones.get(&doctor_id)
    }

    /// Remembers the doctor's zone.
    pub fn put(&self, doctor_id: i64, tz: Tz) {
        self.zones.insert(doctor_id, tz);
    }
}

fn micros_of(t: DateTime<Utc>) -> i64 {
    t.timestamp_micros()
}

fn from_micros(us: i64) -> Result<DateTime<Utc>, GuardError> {
    DateTime::from_timestamp_micros(us).ok_or(GuardError::Corrupt)
}

/// Fixed-width little-endian rows after a format byte: about 2 KB for a day of 40 slots, and
/// decoding is a few copies (no parser on the read path).
fn encode(rows: &[time_slot::Model]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + rows.len() * SLOT_BYTES);
    out.push(FORMAT);
    for r in rows {
        out.extend_from_slice(&r.id.to_le_bytes());
        out.extend_from_slice(&r.doctor_id.to_le_bytes());
        out.extend_from_slice(&micros_of(r.start_at).to_le_bytes());
        out.extend_from_slice(&micros_of(r.end_at).to_le_bytes());
        out.extend_from_slice(&r.capacity.to_le_bytes());
        out.extend_from_slice(&r.booked_count.to_le_bytes());
        out.extend_from_slice(&r.version.to_le_bytes());
    }
    out
}

fn decode(bytes: &[u8]) -> Result<Vec<time_slot::Model>, GuardError> {
    let Some((&FORMAT, body)) = bytes.split_first() else {
        return Err(GuardError::Corrupt);
    };
    if body.len() % SLOT_BYTES != 0 {
        return Err(GuardError::Corrupt);
    }
    let i64_at = |chunk: &[u8], at: usize| -> Result<i64, GuardError> {
        chunk.get(at..at + 8).and_then(|b| b.try_into().ok()).map(i64::from_le_bytes).ok_or(GuardError::Corrupt)
    };
    let i32_at = |chunk: &[u8], at: usize| -> Result<i32, GuardError> {
        chunk.get(at..at + 4).and_then(|b| b.try_into().ok()).map(i32::from_le_bytes).ok_or(GuardError::Corrupt)
    };
    body.chunks_exact(SLOT_BYTES)
        .map(|c| {
            Ok(time_slot::Model {
                id: i64_at(c, 0)?,
                doctor_id: i64_at(c, 8)?,
                start_at: from_micros(i64_at(c, 16)?)?,
                end_at: from_micros(i64_at(c, 24)?)?,
                capacity: i32_at(c, 32)?,
                booked_count: i32_at(c, 36)?,
                version: i64_at(c, 40)?,
                // Only open slots are listed (and cached).
                closed_at: None,
                closed_reason: None,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(id: i64) -> time_slot::Model {
        let start = DateTime::UNIX_EPOCH + chrono::Duration::microseconds(1_900_000_000_123_456);
        time_slot::Model {
            id,
            doctor_id: 7,
            start_at: start,
            end_at: start + chrono::Duration::minutes(15),
            capacity: 2_000_000_000,
            booked_count: 3,
            version: 9,
            closed_at: None,
            closed_reason: None,
        }
    }

    #[test]
    fn encoding_round_trips() {
        let rows = vec![slot(1), slot(2)];
        assert_eq!(decode(&encode(&rows)).ok(), Some(rows.clone()));
        assert_eq!(decode(&encode(&[])).ok(), Some(vec![]));
        assert!(decode(&[]).is_err());
        assert!(decode(&[2]).is_err());
        assert!(decode(&encode(&rows)[..20]).is_err());
    }

    #[tokio::test]
    async fn local_cache_expires_and_invalidates() {
        let date = NaiveDate::default();
        let cache = SlotCache::local(Duration::from_millis(50));
        assert!(cache.get(7, date).await.is_none());
        cache.put(7, date, &[slot(1)]).await;
        assert_eq!(cache.get(7, date).await.map(|rows| rows.len()), Some(1));
        cache.invalidate(7, date).await;
        assert!(cache.get(7, date).await.is_none());
        cache.put(7, date, &[slot(1)]).await;
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(cache.get(7, date).await.is_none());
        assert!(SlotCache::local(Duration::ZERO).get(7, date).await.is_none());
    }
}
