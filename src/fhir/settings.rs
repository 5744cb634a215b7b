//! The FHIR surface's settings: its public URLs, the feed's refresh, and the clinic's one
//! `Location`.

use std::time::Duration;

use super::{feed::FeedSettings, map::MapSettings};
use crate::settings::{ConfigError, Reader};

/// Settings of the FHIR surface (`/fhir`) and its SMART Scheduling Links feed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Public origin (and path prefix) the service is reached at, e.g. `https://api.example.com`
    /// (`PUBLIC_BASE_URL`, no trailing slash); absolute URLs are `{this}/fhir/…`. `None`: taken
    /// from each request's `Host` header, else `http://BIND_ADDR`.
    pub public_base_url: Option<String>,
    /// `Cache-Control: max-age` of the feed, the polling interval it suggests
    /// (`FHIR_FEED_MAX_AGE_SECS`, default 10).
    pub feed_max_age: Duration,
    /// The feed: its refresh (`FHIR_FEED_REFRESH_MS`, default 1000, at least 50), its full
    /// rebuild (`FHIR_FEED_RESYNC_SECS`, default 3600; 0 = never), the booking page slots link
    /// to (`PUBLIC_BOOKING_URL`) and the clinic's `Location` (`FHIR_LOCATION_*`).
    pub feed: FeedSettings,
}

impl Settings {
    /// Reads them.
    pub fn from_env(r: &mut Reader) -> Result<Self, ConfigError> {
        let public_base_url = r.with("PUBLIC_BASE_URL", |raw| {
            let trimmed = raw.trim().trim_end_matches('/').to_owned();
            check_http_url(&trimmed, false).map(|()| trimmed)
        })?;
        let booking_url = r.with("PUBLIC_BOOKING_URL", |raw| {
            let trimmed = raw.trim().to_owned();
            check_http_url(&trimmed, true).map(|()| trimmed)
        })?;
        let feed_max_age = r.secs("FHIR_FEED_MAX_AGE_SECS", 10, .., "a number of seconds")?;
        let refresh = r.millis("FHIR_FEED_REFRESH_MS", 1000, 50.., "a number of milliseconds")?;
        let resync = r.secs("FHIR_FEED_RESYNC_SECS", 3600, .., "a number of seconds (0 = never)")?;
        let location = LocationSettings::from_env(r)?;
        Ok(Self {
            public_base_url,
            feed_max_age,
            feed: FeedSettings {
                refresh,
                resync: (!resync.is_zero()).then_some(resync),
                map: MapSettings { booking_url, location },
            },
        })
    }
}

impl LocationSettings {
    /// Reads them.
    fn from_env(r: &mut Reader) -> Result<Self, ConfigError> {
        let name = r.with_or("FHIR_LOCATION_NAME", "Clinic", |raw| match raw.trim() {
            name if name.chars().count() > 200 => Err("at most 200 characters".into()),
            name => Ok(name.to_owned()),
        })?;
        let phone = r.with("FHIR_LOCATION_PHONE", |raw| {
            let p = raw.trim();
            if p.chars().count() > 40 || !p.chars().all(|c| c.is_ascii_digit() || " +-().".contains(c)) {
                return Err("expected a phone number (digits, spaces and + - ( ) .)".into());
            }
            Ok(p.to_owned())
        })?;
        let address = r.with("FHIR_LOCATION_ADDRESS", |raw| {
            PostalAddress::parse(raw)
                .ok_or_else(|| "expected line;city;state;postalCode with no part empty (lines separated by |)".into())
        })?;
        Ok(Self { name, phone, address })
    }
}

/// The clinic as one FHIR `Location` (the data model has no locations).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocationSettings {
    /// Its name (`FHIR_LOCATION_NAME`, default `Clinic`).
    pub name: String,
    /// Its phone number (`FHIR_LOCATION_PHONE`); SMART aggregators expect one.
    pub phone: Option<String>,
    /// Its postal address (`FHIR_LOCATION_ADDRESS`, `line;city;state;postalCode`, several lines
    /// separated by `|`); SMART aggregators expect one.
    pub address: Option<PostalAddress>,
}

/// A postal address, as SMART Scheduling Links wants it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostalAddress {
    /// Street lines.
    pub lines: Vec<String>,
    /// City.
    pub city: String,
    /// State or region.
    pub state: String,
    /// Postal code.
    pub postal_code: String,
}

impl PostalAddress {
    /// Parses `line;city;state;postalCode` (lines separated by `|`).
    fn parse(raw: &str) -> Option<Self> {
        let parts: Vec<&str> = raw.split(';').map(str::trim).collect();
        let [lines, city, state, postal_code] = parts.as_slice() else {
            return None;
        };
        let lines: Vec<String> = lines.split('|').map(|l| l.trim().to_owned()).collect();
        if lines.iter().any(String::is_empty) || [city, state, postal_code].iter().any(|p| p.is_empty()) {
            return None;
        }
        Some(Self {
            lines,
            city: (*city).to_owned(),
            state: (*state).to_owned(),
            postal_code: (*postal_code).to_owned(),
        })
    }
}

/// Checks an absolute `http(s)://host[:port][/path]` URL; a query only when `query_ok`, never a
/// fragment, no spaces or control characters.
fn check_http_url(url: &str, query_ok: bool) -> Result<(), String> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| "expected an absolute http:// or https:// URL".to_owned())?;
    let host = rest.split(['/', '?']).next().unwrap_or("");
    if host.is_empty() || !host.bytes().all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b)) {
        return Err("expected a host name (and port) after the scheme".into());
    }
    if url.bytes().any(|b| b.is_ascii_control() || b == b' ' || b == b'#') {
        return Err("no spaces, control characters or fragment (#) allowed".into());
    }
    if !query_ok && url.contains('?') {
        return Err("no query (?) allowed".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::tests::config;
    use crate::settings::ConfigError;
    use std::time::Duration;

    #[test]
    fn fhir_settings() -> Result<(), ConfigError> {
        let c = config(&[])?.fhir;
        assert_eq!(c.public_base_url, None);
        assert_eq!(c.feed_max_age, Duration::from_secs(10));
        assert_eq!(c.feed.refresh, Duration::from_millis(1000));
        assert_eq!(c.feed.resync, Some(Duration::from_secs(3600)));
        assert_eq!(c.feed.map.location.name, "Clinic");
        let c = config(&[
            ("PUBLIC_BASE_URL", "https://api.example.com/base/"),
            ("PUBLIC_BOOKING_URL", "https://book.example.com/slots?src=fhir"),
            ("FHIR_FEED_RESYNC_SECS", "0"),
            ("FHIR_LOCATION_ADDRESS", "1 Main St|Floor 2; Springfield ;IL;62701"),
            ("FHIR_LOCATION_PHONE", "+1 217 555 0100"),
        ])?
        .fhir;
        assert_eq!(c.public_base_url.as_deref(), Some("https://api.example.com/base"));
        assert_eq!(c.feed.resync, None);
        let address = c.feed.map.location.address.expect("address");
        assert_eq!(address.lines, ["1 Main St", "Floor 2"]);
        assert_eq!((address.city.as_str(), address.postal_code.as_str()), ("Springfield", "62701"));
        for (var, bad) in [
            ("PUBLIC_BASE_URL", "api.example.com"),
            ("PUBLIC_BASE_URL", "https://api.example.com/?x=1"),
            ("PUBLIC_BASE_URL", "ftp://api.example.com"),
            ("PUBLIC_BOOKING_URL", "https:///nohost"),
            ("PUBLIC_BOOKING_URL", "https://book.example.com/#slot"),
            ("FHIR_FEED_REFRESH_MS", "10"),
            ("FHIR_FEED_MAX_AGE_SECS", "-1"),
            ("FHIR_LOCATION_ADDRESS", "1 Main St;Springfield;IL"),
            ("FHIR_LOCATION_ADDRESS", "1 Main St;;IL;62701"),
            ("FHIR_LOCATION_PHONE", "call us"),
        ] {
            assert_eq!(config(&[(var, bad)]).unwrap_err().var, var, "{var}={bad}");
        }
        Ok(())
    }
}
