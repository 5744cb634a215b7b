//! Known-full slots: once a booking finds a slot full, later attempts on it answer `SLOT_FULL`
//! without the booking transaction for a while (the TTL), until a cancel of the slot commits.
//!
//! Each mark carries the slot `version` it was observed at, and a cancel leaves an "open at
//! version v" mark instead of deleting: a "full" observed before the cancel (a lower version)
//! that arrives after it is ignored, so a late writer cannot hide a freed seat. With Redis the
//! marks are shared by every instance (`PREFIX:full:SLOT`); a Redis failure reads as "not
//! known", which sends the attempt to the database.

use std::time::Duration;

use moka::{ops::compute::Op, sync::Cache};

use chrono::{DateTime, Utc};

use super::redis_link::{GuardError, RedisLink};
use crate::db::entity::time_slot;

/// Sets KEYS[1] to ARGV[1] for ARGV[3] ms unless it holds a mark of version ≥ ARGV[2].
const SET_IF_NEWER: &str = r"
local cur = redis.call('GET', KEYS[1])
if cur then
  local v = tonumber(string.match(cur, '^%a:(%-?%d+)'))
  if v and v >= tonumber(ARGV[2]) then return 0 end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
return 1
";

/// A slot seen full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FullMark {
    /// The slot's version when it was seen full.
    pub version: i64,
    /// Its start (a full slot that has started answers `SLOT_IN_PAST`).
    pub start_at: DateTime<Utc>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Mark {
    full: bool,
    version: i64,
    start_us: i64,
}

impl Mark {
    fn encode(self) -> String {
        if self.full {
            format!("F:{}:{}", self.version, self.start_us)
        } else {
            format!("O:{}", self.version)
        }
    }

    fn decode(raw: &str) -> Result<Self, GuardError> {
        let mut parts = raw.split(':');
        let kind = parts.next();
        let version = parts.next().and_then(|v| v.parse().ok()).ok_or(GuardError::Corrupt)?;
        match kind {
            Some("F") => {
                let start_us = parts.next().and_then(|v| v.parse().ok()).ok_or(GuardError::Corrupt)?;
                Ok(Self { full: true, version, start_us })
            }
            Some("O") => Ok(Self { full: false, version, start_us: 0 }),
            _ => Err(GuardError::Corrupt),
        }
    }

    fn full_mark(self) -> Option<FullMark> {
        if !self.full {
            return None;
        }
        DateTime::from_timestamp_micros(self.start_us).map(|start_at| FullMark { version: self.version, start_at })
    }
}

/// The known-full marks of an instance.
pub struct KnownFull {
    ttl: Duration,
    backend: Backend,
}

enum Backend {
    Off,
    Local(Cache<i64, Mark>),
    Redis(RedisLink, redis::Script),
}

impl KnownFull {
    /// Never short-circuits.
    pub fn off() -> Self {
        Self { ttl: Duration::ZERO, backend: Backend::Off }
    }

    /// Marks kept in process; off when `ttl` is zero.
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
        Self { ttl, backend: Backend::Redis(link, redis::Script::new(SET_IF_NEWER)) }
    }

    /// Whether the slot is known full.
    pub async fn get(&self, slot_id: i64) -> Option<FullMark> {
        match &self.backend {
            Backend::Off => None,
            Backend::Local(marks) => marks.get(&slot_id).and_then(Mark::full_mark),
            Backend::Redis(link, _) => {
                let key = link.key(format_args!("full:{slot_id}"));
                let raw: Option<String> = link
                    .run("known_full_get", |mut c| async move { redis::cmd("GET").arg(key).query_async(&mut c).await })
                    .await
                    .ok()
                    .flatten();
                match Mark::decode(&raw?) {
                    Ok(mark) => mark.full_mark(),
                    Err(e) => {
                        link.failed("known_full_decode", &e);
                        None
                    }
                }
            }
        }
    }

    /// Records that `slot` (as read or left by a statement) is full.
    pub async fn mark_full(&self, slot: &time_slot::Model) {
        let mark = Mark { full: true, version: slot.version, start_us: slot.start_at.timestamp_micros() };
        self.set_if_newer(slot.id, mark).await;
    }

    /// Records that `slot` (as left by a committed cancel) has a seat again.
    pub async fn mark_open(&self, slot: &time_slot::Model) {
        self.set_if_newer(slot.id, Mark { full: false, version: slot.version, start_us: 0 }).await;
    }

    async fn set_if_newer(&self, slot_id: i64, mark: Mark) {
        match &self.backend {
            Backend::Off => {}
            Backend::Local(marks) => {
                marks.entry(slot_id).and_compute_with(|old| match old {
                    Some(old) if old.value().version >= mark.version => Op::Nop,
                    _ => Op::Put(mark),
                });
            }
            Backend::Redis(link, script) => {
                let key = link.key(format_args!("full:{slot_id}"));
                let ttl_ms = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX);
                let _ = link
                    .run("known_full_set", |mut c| async move {
                        let mut invocation = script.prepare_invoke();
                        invocation.key(key).arg(mark.encode()).arg(mark.version).arg(ttl_ms);
                        invocation.invoke_async::<i64>(&mut c).await
                    })
                    .await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(version: i64) -> time_slot::Model {
        let start = DateTime::UNIX_EPOCH + chrono::Duration::seconds(1_900_000_000);
        time_slot::Model {
            id: 5,
            doctor_id: 1,
            start_at: start,
            end_at: start + chrono::Duration::minutes(15),
            capacity: 1,
            booked_count: 1,
            version,
            closed_at: None,
            closed_reason: None,
        }
    }

    #[test]
    fn marks_round_trip() {
        for m in [Mark { full: true, version: 3, start_us: -5 }, Mark { full: false, version: 4, start_us: 0 }] {
            assert_eq!(Mark::decode(&m.encode()).ok(), Some(m));
        }
        assert!(Mark::decode("X:1").is_err());
        assert!(Mark::decode("F:1").is_err());
    }

    #[tokio::test]
    async fn a_late_full_mark_cannot_hide_a_cancel() {
        let marks = KnownFull::local(Duration::from_secs(30));
        assert!(marks.get(5).await.is_none());
        marks.mark_full(&slot(1)).await;
        assert_eq!(marks.get(5).await.map(|m| m.version), Some(1));
        marks.mark_open(&slot(2)).await;
        assert!(marks.get(5).await.is_none());
        marks.mark_full(&slot(1)).await; // observed before the cancel, arriving after it
        assert!(marks.get(5).await.is_none());
        marks.mark_full(&slot(3)).await;
        assert!(marks.get(5).await.is_some());
    }

    #[tokio::test]
    async fn past_the_bound_the_newest_marks_stay_and_versions_still_rule() {
        let marks = KnownFull::local(Duration::from_secs(30));
        let past = i64::try_from(super::super::LOCAL_MAX_ENTRIES).unwrap_or(i64::MAX) + 20_000;
        for id in 100..100 + past {
            marks.mark_full(&time_slot::Model { id, ..slot(1) }).await;
        }
        assert!(marks.get(100 + past - 1).await.is_some(), "the newest mark is kept");
        marks.mark_open(&slot(2)).await;
        marks.mark_full(&slot(1)).await;
        assert!(marks.get(5).await.is_none(), "a cancel's mark still beats a late full one");
    }
}
