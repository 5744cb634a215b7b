//! The outbox relay's settings.

use std::time::Duration;

use crate::settings::{ConfigError, Reader};

/// The outbox relay's settings.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// How often the relay looks for rows no commit of this instance announced, e.g. a crashed
    /// instance's (`OUTBOX_POLL_MS`, default 500).
    pub poll_interval: Duration,
    /// How long the relay waits after a commit woke it, so that one pass (one transaction, one
    /// publish) carries the changes of many commits (`OUTBOX_GATHER_MS`, default 10).
    pub gather: Duration,
}

impl Settings {
    /// Reads them.
    pub fn from_env(r: &mut Reader) -> Result<Self, ConfigError> {
        Ok(Self {
            poll_interval: r.millis("OUTBOX_POLL_MS", 500, 10.., "a number of milliseconds")?,
            gather: r.millis("OUTBOX_GATHER_MS", 10, .., "a number of milliseconds")?,
        })
    }
}
