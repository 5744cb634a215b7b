//! The booking domain's settings: how long holds and waitlist offers keep their seats.

use std::time::Duration;

use crate::settings::{ConfigError, Reader};

/// The booking domain's settings.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// How long a hold keeps its seat before it expires (`HOLD_TTL_SECS`, default 600).
    pub hold_ttl: Duration,
    /// How often the expiry job looks for holds that ran out (`HOLD_EXPIRY_POLL_MS`, default
    /// 1000: with a batch's time on top, well within the five seconds the contract allows).
    pub hold_expiry_interval: Duration,
    /// How long a waitlist offer keeps its seat (`WAITLIST_OFFER_SECS`, default 900).
    pub waitlist_offer_ttl: Duration,
}

impl Settings {
    /// Reads them.
    pub fn from_env(r: &mut Reader) -> Result<Self, ConfigError> {
        Ok(Self {
            hold_ttl: r.secs("HOLD_TTL_SECS", 600, 1.., "a number of seconds")?,
            hold_expiry_interval: r.millis("HOLD_EXPIRY_POLL_MS", 1000, 10.., "a number of milliseconds")?,
            waitlist_offer_ttl: r.secs("WAITLIST_OFFER_SECS", 900, 1.., "a number of seconds")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::{config::tests::config, settings::ConfigError};

    #[test]
    fn hold_and_offer_settings() -> Result<(), ConfigError> {
        let c = config(&[])?.booking;
        assert_eq!(c.hold_ttl, Duration::from_secs(600));
        assert_eq!(c.hold_expiry_interval, Duration::from_millis(1000));
        assert_eq!(c.waitlist_offer_ttl, Duration::from_secs(900));
        for (var, bad) in [
            ("HOLD_TTL_SECS", "0"),
            ("HOLD_TTL_SECS", "10m"),
            ("HOLD_EXPIRY_POLL_MS", "5"),
            ("WAITLIST_OFFER_SECS", "0"),
        ] {
            assert_eq!(config(&[(var, bad)]).unwrap_err().var, var, "{var}={bad}");
        }
        Ok(())
    }
}
