//! Reading settings: a [`Reader`] over the environment (or a map, in tests) whose typed getters
//! each record the variable they read, and the one [`ConfigError`] a bad value makes.
//!
//! Every module reads its own variables with it, in a `Settings::from_env` beside the code
//! they configure; [`crate::config::Config`] is their composition. The names a load read are
//! what the tests compare with the README's table, and they prove that no variable is read
//! twice.

use std::{
    collections::HashMap,
    fmt::Display,
    ops::{Bound, RangeBounds},
    str::FromStr,
    time::Duration,
};

/// A setting that could not be used: one line naming the variable, the value found and why.
#[derive(Debug, thiserror::Error)]
#[error("{var}={value:?}: {reason}")]
pub struct ConfigError {
    /// The environment variable.
    pub var: &'static str,
    /// The value found (without any password).
    pub value: String,
    /// What was expected instead.
    pub reason: String,
}

impl ConfigError {
    /// `var` had `value`, unusable because of `reason`.
    pub fn new(var: &'static str, value: impl Into<String>, reason: impl Into<String>) -> Self {
        Self { var, value: value.into(), reason: reason.into() }
    }
}

type Lookup<'a> = Box<dyn Fn(&str) -> Option<String> + 'a>;

/// Where settings come from, recording each variable read and the source file that read it.
pub struct Reader<'a> {
    lookup: Lookup<'a>,
    read: Vec<(&'static str, &'static str)>,
}

impl Reader<'static> {
    /// The process environment.
    pub fn env() -> Self {
        Self::new(|k| std::env::var(k).ok())
    }

    /// A fixed set of variables (tests).
    pub fn map(vars: HashMap<String, String>) -> Self {
        Self::new(move |k| vars.get(k).cloned())
    }
}

impl<'a> Reader<'a> {
    /// Variables as `lookup` finds them.
    pub fn new(lookup: impl Fn(&str) -> Option<String> + 'a) -> Self {
        Self { lookup: Box::new(lookup), read: Vec::new() }
    }

    /// The variables read so far, in order, each as often as it was read, with the source file
    /// of the `from_env` that read it.
    pub fn read(&self) -> &[(&'static str, &'static str)] {
        &self.read
    }

    /// The value of `var`; unset and blank alike are `None`.
    #[track_caller]
    pub fn string(&mut self, var: &'static str) -> Option<String> {
        self.read.push((var, std::panic::Location::caller().file()));
        (self.lookup)(var).filter(|v| !v.trim().is_empty())
    }

    /// `var` made into a `T` by `parse`, whose `Err` is the reason; `None` when unset.
    #[track_caller]
    pub fn with<T>(
        &mut self,
        var: &'static str,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Result<Option<T>, ConfigError> {
        self.string(var).map(|raw| parse(&raw).map_err(|reason| ConfigError::new(var, raw, reason))).transpose()
    }

    /// `var` made into a `T` by `parse`, or `default` made into one when unset (a default is
    /// spelt as a value would be, and checked alike).
    #[track_caller]
    pub fn with_or<T>(
        &mut self,
        var: &'static str,
        default: &str,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Result<T, ConfigError> {
        let raw = self.string(var).unwrap_or_else(|| default.to_owned());
        parse(&raw).map_err(|reason| ConfigError::new(var, raw, reason))
    }

    /// `var` made into a `T` by `parse`, which is given the name to make its own error with
    /// (to show a part of the value, or the value without its password); `None` when unset.
    #[track_caller]
    pub fn with_named<T>(
        &mut self,
        var: &'static str,
        parse: impl FnOnce(&'static str, &str) -> Result<T, ConfigError>,
    ) -> Result<Option<T>, ConfigError> {
        self.string(var).map(|raw| parse(var, &raw)).transpose()
    }

    /// `var` parsed as a `T` (`expected` says what it should be, e.g. "a number of seconds"),
    /// `default` when unset.
    #[track_caller]
    pub fn parse<T: FromStr>(&mut self, var: &'static str, default: T, expected: &str) -> Result<T, ConfigError> {
        Ok(self.with(var, |raw| raw.trim().parse().map_err(|_| format!("expected {expected}")))?.unwrap_or(default))
    }

    /// A number within `range` (a value outside says "must be at least …" or "at most …").
    #[track_caller]
    pub fn number<T>(
        &mut self,
        var: &'static str,
        default: T,
        range: impl RangeBounds<T>,
        expected: &str,
    ) -> Result<T, ConfigError>
    where
        T: FromStr + PartialOrd + Display,
    {
        let value = self.parse(var, default, expected)?;
        let out = |reason: String| Err(ConfigError::new(var, value.to_string(), reason));
        if let Bound::Included(min) = range.start_bound() {
            if value < *min {
                return out(format!("must be at least {min}"));
            }
        }
        if let Bound::Included(max) = range.end_bound() {
            if value > *max {
                return out(format!("must be at most {max}"));
            }
        }
        Ok(value)
    }

    /// A whole number of milliseconds within `range`.
    #[track_caller]
    pub fn millis(
        &mut self,
        var: &'static str,
        default: u64,
        range: impl RangeBounds<u64>,
        expected: &str,
    ) -> Result<Duration, ConfigError> {
        self.number(var, default, range, expected).map(Duration::from_millis)
    }

    /// A whole number of seconds within `range`.
    #[track_caller]
    pub fn secs(
        &mut self,
        var: &'static str,
        default: u64,
        range: impl RangeBounds<u64>,
        expected: &str,
    ) -> Result<Duration, ConfigError> {
        self.number(var, default, range, expected).map(Duration::from_secs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(vars: &[(&str, &str)]) -> Reader<'static> {
        Reader::map(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    #[test]
    fn getters_record_what_they_read_and_name_it_in_errors() {
        let mut r = reader(&[("A", " 7 "), ("B", "  "), ("C", "x"), ("D", "3")]);
        assert_eq!(r.number("A", 1u32, 1.., "a count").ok(), Some(7));
        assert_eq!(r.string("B"), None, "blank is unset");
        let err = r.parse("C", 0u32, "a count").unwrap_err();
        assert_eq!(err.to_string(), "C=\"x\": expected a count");
        let err = r.millis("D", 0, 10.., "a number of milliseconds").unwrap_err();
        assert_eq!(err.to_string(), "D=\"3\": must be at least 10");
        assert_eq!(r.secs("E", 5, ..=4, "seconds").unwrap_err().reason, "must be at most 4");
        let names: Vec<_> = r.read().iter().map(|(var, _)| *var).collect();
        assert_eq!(names, ["A", "B", "C", "D", "E"]);
        assert!(r.read().iter().all(|(_, file)| file.ends_with("settings.rs")), "{:?}", r.read());
    }
}
