//! The GraphQL layer's settings: what one request may ask, and how long a rendered answer is
//! kept.

use std::time::Duration;

use super::QueryLimits;
use crate::settings::{ConfigError, Reader};

/// The GraphQL layer's settings.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Deepest accepted query (`MAX_QUERY_DEPTH`, default 15) and highest accepted complexity
    /// (`MAX_QUERY_COMPLEXITY`, default 1000).
    pub limits: QueryLimits,
    /// How long a rendered slot-list answer may be kept at most, dropped earlier by every
    /// change this instance hears of (`ANSWER_CACHE_TTL_MS`, default 30000; 0 = none kept).
    pub answer_cache_ttl: Duration,
}

impl Settings {
    /// Reads them.
    pub fn from_env(r: &mut Reader) -> Result<Self, ConfigError> {
        Ok(Self {
            limits: QueryLimits {
                depth: r.number("MAX_QUERY_DEPTH", 15, 2.., "a depth")?,
                complexity: r.number("MAX_QUERY_COMPLEXITY", 1000, 10.., "a complexity")?,
            },
            answer_cache_ttl: r.millis(
                "ANSWER_CACHE_TTL_MS",
                30_000,
                ..,
                "a number of milliseconds (0 keeps no answers)",
            )?,
        })
    }
}
