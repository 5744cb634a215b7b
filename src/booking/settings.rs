//! The booking domain's settings: how long holds and waitlist offers keep their seats, and how
//! far ahead working hours make slots.

use std::time::Duration;

use crate::settings::{ConfigError, Reader};

/// Default `SCHEDULE_HORIZON_DAYS`, the contract's 14 days.
pub(super) const DEFAULT_HORIZON_DAYS: u32 = 14;
/// Default `SCHEDULE_ROLL_SHARE_PERCENT`.
pub(super) const DEFAULT_ROLL_SHARE_PERCENT: u32 = 10;

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
    /// Days after today, in each doctor's zone, whose slots working hours make
    /// (`SCHEDULE_HORIZON_DAYS`, default 14, at most a year; 0: today only).
    pub horizon_days: u32,
    /// How often each instance extends the horizon (`SCHEDULE_HORIZON_POLL_SECS`, default 300:
    /// a new day has its slots well within the hour the contract allows after the doctor's
    /// midnight; at most 3600).
    pub horizon_poll: Duration,
    /// The share of one database connection's time the daily roll (doctors missing only the
    /// horizon's newest day) may take, in percent (`SCHEDULE_ROLL_SHARE_PERCENT`, default 10;
    /// 100: no pause). The day it makes is the horizon's far end, so it yields to bookings;
    /// catching up (a new doctor, a first start, an outage) runs at full speed.
    pub roll_share_percent: u32,
    /// No-shows in the last 365 days at which a patient is refused new bookings and holds
    /// (`NO_SHOW_LIMIT`, default 0: no limit); admins booking for the patient are not refused.
    pub no_show_limit: u32,
}

impl Settings {
    /// Reads them.
    pub fn from_env(r: &mut Reader) -> Result<Self, ConfigError> {
        Ok(Self {
            hold_ttl: r.secs("HOLD_TTL_SECS", 600, 1.., "a number of seconds")?,
            hold_expiry_interval: r.millis("HOLD_EXPIRY_POLL_MS", 1000, 10.., "a number of milliseconds")?,
            waitlist_offer_ttl: r.secs("WAITLIST_OFFER_SECS", 900, 1.., "a number of seconds")?,
            horizon_days: r.number("SCHEDULE_HORIZON_DAYS", DEFAULT_HORIZON_DAYS, 0..=366, "a number of days")?,
            horizon_poll: r.secs("SCHEDULE_HORIZON_POLL_SECS", 300, 1..=3600, "a number of seconds")?,
            roll_share_percent: r.number(
                "SCHEDULE_ROLL_SHARE_PERCENT",
                DEFAULT_ROLL_SHARE_PERCENT,
                1..=100,
                "a percentage from 1 to 100",
            )?,
            no_show_limit: r.number("NO_SHOW_LIMIT", 0, 0..=10_000, "a number of no-shows (0: no limit)")?,
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
        assert_eq!(c.horizon_days, 14);
        assert_eq!(c.horizon_poll, Duration::from_secs(300));
        assert_eq!(c.roll_share_percent, 10);
        assert_eq!(c.no_show_limit, 0);
        assert_eq!(config(&[("NO_SHOW_LIMIT", "3")])?.booking.no_show_limit, 3);
        for (var, bad) in [
            ("HOLD_TTL_SECS", "0"),
            ("HOLD_TTL_SECS", "10m"),
            ("HOLD_EXPIRY_POLL_MS", "5"),
            ("WAITLIST_OFFER_SECS", "0"),
            ("SCHEDULE_HORIZON_DAYS", "400"),
            ("SCHEDULE_HORIZON_DAYS", "x"),
            ("SCHEDULE_HORIZON_POLL_SECS", "0"),
            ("SCHEDULE_HORIZON_POLL_SECS", "3601"),
            ("SCHEDULE_ROLL_SHARE_PERCENT", "0"),
            ("SCHEDULE_ROLL_SHARE_PERCENT", "101"),
            ("NO_SHOW_LIMIT", "-1"),
            ("NO_SHOW_LIMIT", "many"),
        ] {
            assert_eq!(config(&[(var, bad)]).unwrap_err().var, var, "{var}={bad}");
        }
        Ok(())
    }
}
