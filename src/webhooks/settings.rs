//! Partner webhooks' settings: the retry schedule, the networks webhook URLs may reach, and
//! how the worker sends.

use std::time::Duration;

use crate::settings::{ConfigError, Reader};

/// Partner webhooks' settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// The waits before the 2nd, 3rd, … attempt of a delivery (`WEBHOOK_RETRY_SCHEDULE`,
    /// default `5s,5m,30m,2h,5h,10h,14h,20h,24h`); after the last, the delivery is `FAILED`.
    pub retry_schedule: Vec<Duration>,
    /// Networks webhook URLs may reach although they are not public, and where plain `http://`
    /// is allowed (`WEBHOOK_ALLOW_CIDRS`, comma-separated CIDRs, default none).
    pub allow_cidrs: Vec<ipnet::IpNet>,
    /// Longest wait for one attempt's answer (`WEBHOOK_TIMEOUT_MS`, default 15000).
    pub timeout: Duration,
    /// How often the workers look for due deliveries when nothing woke them
    /// (`WEBHOOK_POLL_MS`, default 1000).
    pub poll_interval: Duration,
    /// Attempts one instance makes at once (`WEBHOOK_CONCURRENCY`, default 32: with 8,
    /// deliveries fell behind a full booking rate on two cores).
    pub concurrency: usize,
}

impl Settings {
    /// Reads them.
    pub fn from_env(r: &mut Reader) -> Result<Self, ConfigError> {
        Ok(Self {
            retry_schedule: r.with_or("WEBHOOK_RETRY_SCHEDULE", DEFAULT_RETRY_SCHEDULE, parse_schedule)?,
            allow_cidrs: r.with("WEBHOOK_ALLOW_CIDRS", parse_cidrs)?.unwrap_or_default(),
            timeout: r.millis("WEBHOOK_TIMEOUT_MS", 15_000, 1.., "a number of milliseconds")?,
            poll_interval: r.millis("WEBHOOK_POLL_MS", 1000, 10.., "a number of milliseconds")?,
            concurrency: r.number("WEBHOOK_CONCURRENCY", 32, 1.., "a number of attempts")?,
        })
    }

    /// Attempts of a delivery, the first included.
    pub fn max_attempts(&self) -> i32 {
        i32::try_from(self.retry_schedule.len() + 1).unwrap_or(i32::MAX)
    }
}

/// The default of `WEBHOOK_RETRY_SCHEDULE`: the Standard Webhooks schedule.
pub const DEFAULT_RETRY_SCHEDULE: &str = "5s,5m,30m,2h,5h,10h,14h,20h,24h";
/// Most entries of `WEBHOOK_RETRY_SCHEDULE`.
const MAX_RETRIES: usize = 30;
/// Longest single wait of `WEBHOOK_RETRY_SCHEDULE`.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(7 * 24 * 3600);

/// Parses a retry schedule: comma-separated waits such as `5s`, `5m`, `2h` (also `ms` and `d`).
pub fn parse_schedule(raw: &str) -> Result<Vec<Duration>, String> {
    let waits = raw.split(',').map(|item| parse_wait(item.trim())).collect::<Result<Vec<_>, _>>()?;
    if waits.len() > MAX_RETRIES {
        return Err(format!("at most {MAX_RETRIES} waits"));
    }
    Ok(waits)
}

fn parse_wait(item: &str) -> Result<Duration, String> {
    let bad = || format!("{item:?} is not a wait like 5s, 5m or 2h (a positive whole number and ms, s, m, h or d)");
    let split = item.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (number, unit) = item.split_at(split);
    let n: u64 = number.parse().map_err(|_| bad())?;
    let unit_secs = match unit {
        "ms" => return checked_wait(Duration::from_millis(n), item),
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    checked_wait(Duration::from_secs(n.checked_mul(unit_secs).ok_or_else(bad)?), item)
}

fn checked_wait(wait: Duration, item: &str) -> Result<Duration, String> {
    if wait.is_zero() {
        return Err(format!("{item:?}: a wait must be longer than zero"));
    }
    if wait > MAX_RETRY_WAIT {
        return Err(format!("{item:?}: a wait may be at most 7 days"));
    }
    Ok(wait)
}

/// Parses comma-separated CIDRs (`127.0.0.0/8, ::1/128`); a bare address means just that one.
pub fn parse_cidrs(raw: &str) -> Result<Vec<ipnet::IpNet>, String> {
    raw.split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(|item| {
            item.parse::<ipnet::IpNet>()
                .or_else(|_| item.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .map(|net| net.trunc())
                .map_err(|_| format!("{item:?} is not a CIDR like 127.0.0.0/8 or fd00::/8"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::config;

    #[test]
    fn webhook_settings() -> Result<(), ConfigError> {
        let c = config(&[])?.webhooks;
        let hours = |h: u64| Duration::from_secs(h * 3600);
        assert_eq!(
            c.retry_schedule,
            vec![
                Duration::from_secs(5),
                Duration::from_secs(300),
                Duration::from_secs(1800),
                hours(2),
                hours(5),
                hours(10),
                hours(14),
                hours(20),
                hours(24)
            ]
        );
        assert!(c.allow_cidrs.is_empty());
        assert_eq!((c.timeout, c.concurrency), (Duration::from_secs(15), 32));
        let t = config(&[
            ("WEBHOOK_RETRY_SCHEDULE", " 1s, 250ms ,2d"),
            ("WEBHOOK_ALLOW_CIDRS", "127.0.0.0/8, ::1, 10.1.2.3/8"),
        ])?
        .webhooks;
        assert_eq!(
            t.retry_schedule,
            vec![Duration::from_secs(1), Duration::from_millis(250), Duration::from_secs(172_800)]
        );
        let nets: Vec<String> = t.allow_cidrs.iter().map(ToString::to_string).collect();
        assert_eq!(nets, ["127.0.0.0/8", "::1/128", "10.0.0.0/8"]);
        for bad in ["5", "5x", "-1s", "0s", "1s,,2s", "1.5s", "8d", "s", "99999999999999999999h"] {
            let err = config(&[("WEBHOOK_RETRY_SCHEDULE", bad)]).unwrap_err();
            assert_eq!(err.var, "WEBHOOK_RETRY_SCHEDULE", "{bad}");
        }
        let too_many = vec!["1s"; 31].join(",");
        assert_eq!(config(&[("WEBHOOK_RETRY_SCHEDULE", &too_many)]).unwrap_err().var, "WEBHOOK_RETRY_SCHEDULE");
        for bad in ["127.0.0.0/33", "localhost", "10.0.0.0/8;", "::1/129"] {
            assert_eq!(config(&[("WEBHOOK_ALLOW_CIDRS", bad)]).unwrap_err().var, "WEBHOOK_ALLOW_CIDRS", "{bad}");
        }
        for (var, bad) in [("WEBHOOK_TIMEOUT_MS", "0"), ("WEBHOOK_POLL_MS", "5"), ("WEBHOOK_CONCURRENCY", "0")] {
            assert_eq!(config(&[(var, bad)]).unwrap_err().var, var);
        }
        Ok(())
    }
}
