//! The settings of working hours' planning horizon, parsed here (the module owns them) and
//! kept in [`crate::config::Config::horizon`].

use std::time::Duration;

use crate::config::ConfigError;

/// Default `SCHEDULE_HORIZON_DAYS`.
pub(super) const DEFAULT_HORIZON_DAYS: u32 = 14;
/// Longest horizon: a year.
const MAX_HORIZON_DAYS: u32 = 366;
/// Default `SCHEDULE_HORIZON_POLL_SECS`: a new day has its slots well within the hour the
/// contract allows after the doctor's midnight.
const DEFAULT_POLL_SECS: u64 = 300;

/// How far ahead working hours make slots, and how often each instance looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HorizonSettings {
    /// Days after today, in each doctor's zone, whose slots exist (`SCHEDULE_HORIZON_DAYS`,
    /// default 14; 0 means today only).
    pub days: u32,
    /// How often each instance extends the horizon (`SCHEDULE_HORIZON_POLL_SECS`, default 300,
    /// at most 3600).
    pub poll: Duration,
}

impl Default for HorizonSettings {
    fn default() -> Self {
        Self { days: DEFAULT_HORIZON_DAYS, poll: Duration::from_secs(DEFAULT_POLL_SECS) }
    }
}

impl HorizonSettings {
    /// Reads `SCHEDULE_HORIZON_DAYS` and `SCHEDULE_HORIZON_POLL_SECS` through `get` (unset or
    /// blank: the default); one error naming the variable otherwise.
    pub fn from_lookup(get: &impl Fn(&'static str) -> Option<String>) -> Result<Self, ConfigError> {
        let days = number(get, "SCHEDULE_HORIZON_DAYS", DEFAULT_HORIZON_DAYS.into(), 0, MAX_HORIZON_DAYS.into())?;
        let poll = number(get, "SCHEDULE_HORIZON_POLL_SECS", DEFAULT_POLL_SECS, 1, 3600)?;
        Ok(Self { days: u32::try_from(days).unwrap_or(DEFAULT_HORIZON_DAYS), poll: Duration::from_secs(poll) })
    }
}

fn number(
    get: &impl Fn(&'static str) -> Option<String>,
    var: &'static str,
    default: u64,
    min: u64,
    max: u64,
) -> Result<u64, ConfigError> {
    let Some(raw) = get(var).filter(|v| !v.trim().is_empty()) else {
        return Ok(default);
    };
    match raw.trim().parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(ConfigError { var, value: raw, reason: format!("expected a whole number from {min} to {max}") }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(vars: &[(&'static str, &str)]) -> Result<HorizonSettings, ConfigError> {
        let vars: Vec<(&'static str, String)> = vars.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
        HorizonSettings::from_lookup(&|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()))
    }

    #[test]
    fn defaults_and_bounds() -> Result<(), ConfigError> {
        assert_eq!(read(&[])?, HorizonSettings::default());
        assert_eq!(read(&[("SCHEDULE_HORIZON_DAYS", "3"), ("SCHEDULE_HORIZON_POLL_SECS", "60")])?.days, 3);
        for (var, bad) in
            [("SCHEDULE_HORIZON_DAYS", "400"), ("SCHEDULE_HORIZON_DAYS", "x"), ("SCHEDULE_HORIZON_POLL_SECS", "0")]
        {
            let err = read(&[(var, bad)]).err().map(|e| e.var);
            assert_eq!(err, Some(var), "{var}={bad} is refused, naming the variable");
        }
        Ok(())
    }
}
