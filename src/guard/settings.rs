//! The guards' settings: cache lifetimes, the rate limit, known-full marks, the bulkhead, the
//! booking lane and the wait for Redis.

use std::time::Duration;

use crate::settings::{ConfigError, Reader};

/// The guards' settings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// How long a cached slot list may be served (`SLOT_CACHE_TTL_MS`, default 5000; 0 = no
    /// cache, and then no kept answers either).
    pub slot_cache_ttl: Duration,
    /// Booking attempts allowed per patient per window (`RATE_LIMIT_BOOKINGS`, default 5; 0 = off).
    pub rate_limit: u32,
    /// The rate-limit window (`RATE_LIMIT_WINDOW_SECS`, default 10).
    pub rate_window: Duration,
    /// How long a slot found full answers `SLOT_FULL` without the booking transaction
    /// (`KNOWN_FULL_TTL_SECS`, default 30; 0 = off).
    pub known_full_ttl: Duration,
    /// Booking and cancel attempts using the database at once (`BOOKING_CONCURRENCY`, default
    /// half of `DB_POOL_MAX`), so they never take the whole pool.
    pub booking_concurrency: u32,
    /// Longest wait for a place in the bulkhead before `OVERLOADED`
    /// (`BOOKING_QUEUE_TIMEOUT_MS`, default 2000).
    pub queue_timeout: Duration,
    /// Longest wait for one Redis operation before going on without it (`REDIS_TIMEOUT_MS`,
    /// default 100).
    pub redis_timeout: Duration,
    /// Worker threads of the booking lane, a runtime of its own for the operations that move
    /// seats (`BOOKING_LANE_THREADS`, default 0: on the main runtime; on two cores the lane made
    /// bookings slower in every alternating run, docs/benchmarks-history.md, fifth pass).
    pub booking_lane_threads: usize,
}

impl Settings {
    /// Reads them; `pool_max` (`DB_POOL_MAX`) makes the bulkhead's default, half of it.
    pub fn from_env(r: &mut Reader, pool_max: u32) -> Result<Self, ConfigError> {
        Ok(Self {
            rate_limit: r.parse("RATE_LIMIT_BOOKINGS", 5, "a count (0 switches the limit off)")?,
            rate_window: r.secs("RATE_LIMIT_WINDOW_SECS", 10, 1.., "a number of seconds")?,
            slot_cache_ttl: r.millis(
                "SLOT_CACHE_TTL_MS",
                5000,
                ..,
                "a number of milliseconds (0 switches the cache off)",
            )?,
            known_full_ttl: r.secs("KNOWN_FULL_TTL_SECS", 30, .., "a number of seconds (0 switches it off)")?,
            booking_concurrency: r.number("BOOKING_CONCURRENCY", pool_max / 2, 1.., "a number of attempts")?,
            queue_timeout: r.millis("BOOKING_QUEUE_TIMEOUT_MS", 2000, 1.., "a number of milliseconds")?,
            redis_timeout: r.millis("REDIS_TIMEOUT_MS", 100, 1.., "a number of milliseconds")?,
            booking_lane_threads: r.number(
                "BOOKING_LANE_THREADS",
                0,
                ..=64,
                "a number of threads (0: none of its own)",
            )?,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::{config::tests::config, settings::ConfigError};

    #[test]
    fn burst_protection_settings() -> Result<(), ConfigError> {
        let c = config(&[("DB_POOL_MAX", "20")])?;
        assert_eq!(c.guard.booking_concurrency, 10, "half of DB_POOL_MAX");
        assert_eq!(c.guard.slot_cache_ttl, Duration::from_millis(5000));
        assert_eq!(c.graphql.answer_cache_ttl, Duration::from_secs(30));
        assert_eq!(c.guard.known_full_ttl, Duration::from_secs(30));
        assert_eq!(c.guard.redis_timeout, Duration::from_millis(100));
        let off = config(&[("SLOT_CACHE_TTL_MS", "0"), ("KNOWN_FULL_TTL_SECS", "0")])?;
        assert!(off.guard.slot_cache_ttl.is_zero() && off.guard.known_full_ttl.is_zero());
        assert!(off.graphql.answer_cache_ttl.is_zero(), "no slot-list cache, no kept answers");
        for (var, bad) in [
            ("SLOT_CACHE_TTL_MS", "-1"),
            ("SLOT_CACHE_TTL_MS", "4s"),
            ("ANSWER_CACHE_TTL_MS", "30s"),
            ("KNOWN_FULL_TTL_SECS", "x"),
            ("BOOKING_CONCURRENCY", "0"),
            ("BOOKING_QUEUE_TIMEOUT_MS", "0"),
            ("REDIS_TIMEOUT_MS", "0"),
            ("BOOKING_LANE_THREADS", "65"),
            ("DB_STATEMENT_TIMEOUT_MS", "50"),
        ] {
            assert_eq!(config(&[(var, bad)]).unwrap_err().var, var, "{var}={bad}");
        }
        Ok(())
    }
}
