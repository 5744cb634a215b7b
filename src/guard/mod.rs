//! Burst protection in front of the database: the slot-list cache (rows shared in Redis), the
//! generations that say whether what was made of a read is still current, the per-patient
//! booking rate limit, known-full early rejects and the booking bulkhead.
//!
//! The first three live in Redis when `REDIS_URL` is set (shared by every instance) and in
//! process otherwise. Redis is never the source of truth: every Redis operation has a short
//! timeout, and a failure (counted in `redis_errors_total`, logged at most every 10 s) makes
//! the request go on to the database as if the guard were not there. The database alone
//! decides every booking, so nothing is over- or under-booked whatever Redis does.

pub mod bulkhead;
pub mod cache;
pub mod flights;
pub mod generations;
pub mod known_full;
pub mod lane;
pub mod rate_limit;
mod redis_link;
pub mod settings;

use std::{sync::Arc, time::Duration};

pub use bulkhead::{Bulkhead, Entered, Saturated};
pub use cache::{SlotCache, TimezoneCache};
pub use generations::{Generations, Stamp};
pub use known_full::{FullMark, KnownFull};
pub use rate_limit::RateLimiter;
pub use settings::Settings;

/// Entries each in-process guard keeps (slot lists, time zones, marks, rate windows); past it
/// the least recently used go first.
const LOCAL_MAX_ENTRIES: u64 = 100_000;

/// An in-process guard's map: bounded by [`LOCAL_MAX_ENTRIES`], entries dropped `ttl` after
/// their last write. A crate, not a `HashMap` swept by hand: a sweep at the bound costs the
/// whole map on every insert while nothing has expired yet (a burst of 100,000 marks within
/// the TTL made each `setWorkingHours` take 2 s), where moka evicts in O(1).
fn local_map<K, V>(ttl: Option<Duration>) -> moka::sync::Cache<K, V>
where
    K: std::hash::Hash + Eq + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    let builder = moka::sync::Cache::builder()
        .max_capacity(LOCAL_MAX_ENTRIES)
        .eviction_policy(moka::policy::EvictionPolicy::lru());
    match ttl {
        Some(ttl) => builder.time_to_live(ttl).build(),
        None => builder.build(),
    }
}

/// Every guard of an instance, shared by its requests.
pub struct Guard {
    /// Slot lists by doctor and day.
    pub slots: SlotCache,
    /// Each doctor's slots' generation (in process; told of this instance's commits by the
    /// booking service's commit sink, of every instance's by the live-availability bus).
    pub generations: Arc<Generations>,
    /// Doctors' time zones (in process).
    pub timezones: TimezoneCache,
    /// Per-patient booking attempts.
    pub limiter: RateLimiter,
    /// Slots seen full.
    pub known_full: KnownFull,
    /// Concurrency of booking attempts on the database.
    pub bulkhead: Bulkhead,
    /// Where the operations that move seats run (see [`lane`]).
    pub lane: lane::Lane,
}

impl Guard {
    /// Guards that change nothing: no cache, no limit, no early reject, no practical bound.
    pub fn disabled() -> Self {
        Self {
            slots: SlotCache::off(),
            generations: Arc::default(),
            timezones: TimezoneCache::default(),
            limiter: RateLimiter::off(),
            known_full: KnownFull::off(),
            bulkhead: Bulkhead::new(u32::MAX, Duration::from_secs(3600)),
            lane: lane::Lane::inline("booking"),
        }
    }

    /// The guards of `settings`: in Redis through `redis` when given, under `redis_prefix`
    /// (connected in the background, on the booking lane, so an instance starts while Redis is
    /// down), in process otherwise. Must run inside the Tokio runtime; fails only when the
    /// lane's threads cannot be started.
    pub fn new(settings: &Settings, redis: Option<redis::Client>, redis_prefix: &str) -> std::io::Result<Self> {
        let lane = lane::Lane::dedicated("booking", settings.booking_lane_threads)?;
        let bulkhead = Bulkhead::new(settings.booking_concurrency, settings.queue_timeout);
        let timezones = TimezoneCache::default();
        let generations = Arc::new(Generations::new());
        Ok(match redis {
            None => Self {
                slots: SlotCache::local(settings.slot_cache_ttl),
                generations: Arc::clone(&generations),
                timezones,
                limiter: RateLimiter::local(settings.rate_limit, settings.rate_window),
                known_full: KnownFull::local(settings.known_full_ttl),
                bulkhead,
                lane,
            },
            Some(client) => {
                let link = redis_link::RedisLink::start(client, redis_prefix, settings.redis_timeout, &lane);
                Self {
                    slots: SlotCache::redis(link.clone(), settings.slot_cache_ttl),
                    generations,
                    timezones,
                    limiter: RateLimiter::redis(link.clone(), settings.rate_limit, settings.rate_window),
                    known_full: KnownFull::redis(link, settings.known_full_ttl),
                    bulkhead,
                    lane,
                }
            }
        })
    }
}
