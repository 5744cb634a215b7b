//! Configuration: every setting the service reads from the environment, parsed and validated
//! in one place at start-up, with one clear message per bad value.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

/// Where the data lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DatabaseTarget {
    /// An embedded SQLite file (the newcomer's default).
    Sqlite(PathBuf),
    /// A PostgreSQL server, by `postgres://` URL.
    Postgres(String),
}

impl DatabaseTarget {
    /// Parses a `DATABASE_URL` value: `postgres://…`/`postgresql://…`, or `sqlite:PATH` /
    /// `sqlite://PATH`.
    pub fn parse(url: &str) -> Result<Self, String> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(Self::Postgres(url.to_owned()));
        }
        if let Some(rest) = url.strip_prefix("sqlite:") {
            let path = rest.trim_start_matches("//");
            let path = path.split('?').next().unwrap_or_default();
            if path.is_empty() || path == ":memory:" {
                return Err("a SQLite URL must name a file, e.g. sqlite://clinic-booking.sqlite3 \
                            (in-memory databases are not shared between connections)"
                    .into());
            }
            return Ok(Self::Sqlite(PathBuf::from(path)));
        }
        Err("expected postgres://user@host:port/db or sqlite://path/to/file".into())
    }

    /// True for the embedded SQLite database.
    pub fn is_sqlite(&self) -> bool {
        matches!(self, Self::Sqlite(_))
    }
}

/// The text of the JWT signing secret; never printed.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret's bytes, for signing and verifying.
    pub fn expose(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Every setting of a server instance.
#[derive(Clone, Debug)]
pub struct Config {
    /// Address the HTTP server listens on (`BIND_ADDR`; port 0 picks a free port).
    pub bind_addr: SocketAddr,
    /// The database (`DATABASE_URL`; default: SQLite file in `data_dir`).
    pub database: DatabaseTarget,
    /// Redis for cross-instance pub/sub, cache and rate limits (`REDIS_URL`); `None` keeps all
    /// of that in process.
    pub redis_url: Option<String>,
    /// Prefix of every Redis key and channel (`REDIS_KEY_PREFIX`, default `clinic-booking`), so
    /// several deployments (or test runs) can share one Redis.
    pub redis_prefix: String,
    /// HS256 secret for bearer tokens (`JWT_SECRET`); `None` only in single-process dev mode.
    pub jwt_secret: Option<Secret>,
    /// Directory for the SQLite file and the dev-mode secret (`DATA_DIR`, default `.`).
    pub data_dir: PathBuf,
    /// Connections of the main pool (`DB_POOL_MAX`); the hot statements have their own.
    pub db_pool_max: u32,
    /// Booking attempts allowed per patient per window (`RATE_LIMIT_BOOKINGS`; 0 = off).
    pub rate_limit_bookings: u32,
    /// The rate-limit window (`RATE_LIMIT_WINDOW_SECS`).
    pub rate_limit_window: Duration,
    /// How long a cached slot list may be served (`SLOT_CACHE_TTL_MS`, default 5000; 0 = no cache).
    pub slot_cache_ttl: Duration,
    /// How long a slot found full answers `SLOT_FULL` without the booking transaction
    /// (`KNOWN_FULL_TTL_SECS`, default 30; 0 = off).
    pub known_full_ttl: Duration,
    /// Booking and cancel attempts using the database at once (`BOOKING_CONCURRENCY`, default
    /// half of `DB_POOL_MAX`), so they never take the whole pool.
    pub booking_concurrency: u32,
    /// Longest wait for a booking slot of the bulkhead before `OVERLOADED`
    /// (`BOOKING_QUEUE_TIMEOUT_MS`, default 2000).
    pub booking_queue_timeout: Duration,
    /// Longest wait for one Redis operation before going on without it (`REDIS_TIMEOUT_MS`, default 100).
    pub redis_timeout: Duration,
    /// PostgreSQL `statement_timeout` of the pool (`DB_STATEMENT_TIMEOUT_MS`, default 5000).
    pub db_statement_timeout: Duration,
    /// Largest accepted request body in bytes (`MAX_BODY_BYTES`).
    pub max_body_bytes: usize,
    /// Deepest accepted query (`MAX_QUERY_DEPTH`).
    pub max_query_depth: usize,
    /// Highest accepted query complexity (`MAX_QUERY_COMPLEXITY`).
    pub max_query_complexity: usize,
    /// Most operations in one batched request (`MAX_BATCH_OPERATIONS`).
    pub max_batch_operations: usize,
    /// Log line format (`LOG_FORMAT`: `text` or `json`).
    pub log_format: LogFormat,
    /// How often the outbox relay looks for rows no commit of this instance announced, e.g. a
    /// crashed instance's (`OUTBOX_POLL_MS`, default 500).
    pub outbox_poll_interval: Duration,
    /// How long the relay waits after a commit woke it, so that one pass (one transaction, one
    /// publish) carries the changes of many commits (`OUTBOX_GATHER_MS`, default 10).
    pub outbox_gather: Duration,
    /// Longest wait for `connection_init` on a WebSocket (`WS_INIT_TIMEOUT_MS`, default 10000).
    pub ws_init_timeout: Duration,
    /// Most operations running at once on one WebSocket (`WS_MAX_SUBSCRIPTIONS`, default 100).
    pub ws_max_subscriptions: usize,
    /// The FHIR surface and the SMART Scheduling Links feed.
    pub fhir: FhirSettings,
}

/// Settings of the FHIR surface (`/fhir`) and its SMART Scheduling Links feed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FhirSettings {
    /// Public origin (and path prefix) the service is reached at, e.g. `https://api.example.com`
    /// (`PUBLIC_BASE_URL`, no trailing slash); absolute URLs are `{this}/fhir/…`. `None`: taken
    /// from each request's `Host` header, else `http://BIND_ADDR`.
    pub public_base_url: Option<String>,
    /// The booking page slots link to (`PUBLIC_BOOKING_URL`): `{slot}` in it is replaced by the
    /// slot id, otherwise `slot={id}` is added to its query. `None`: no `booking-deep-link`.
    pub public_booking_url: Option<String>,
    /// `Cache-Control: max-age` of the feed, the polling interval it suggests
    /// (`FHIR_FEED_MAX_AGE_SECS`, default 10).
    pub feed_max_age: Duration,
    /// How often the feed applies committed changes and looks for new doctors and slots
    /// (`FHIR_FEED_REFRESH_MS`, default 1000).
    pub feed_refresh: Duration,
    /// How often the feed is rebuilt from the database as a whole, the safety net for rows the
    /// incremental refresh cannot see (`FHIR_FEED_RESYNC_SECS`, default 3600; 0 = never).
    pub feed_resync: Option<Duration>,
    /// The clinic's `Location`.
    pub location: LocationSettings,
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

impl FhirSettings {
    fn from_get(get: &impl Fn(&'static str) -> Option<String>) -> Result<Self, ConfigError> {
        let public_base_url = get("PUBLIC_BASE_URL")
            .map(|raw| {
                let trimmed = raw.trim().trim_end_matches('/').to_owned();
                check_http_url(&trimmed, false).map(|()| trimmed).map_err(|reason| ConfigError {
                    var: "PUBLIC_BASE_URL",
                    value: raw,
                    reason,
                })
            })
            .transpose()?;
        let public_booking_url = get("PUBLIC_BOOKING_URL")
            .map(|raw| {
                let trimmed = raw.trim().to_owned();
                check_http_url(&trimmed, true).map(|()| trimmed).map_err(|reason| ConfigError {
                    var: "PUBLIC_BOOKING_URL",
                    value: raw,
                    reason,
                })
            })
            .transpose()?;
        let feed_max_age = Duration::from_secs(parse(get, "FHIR_FEED_MAX_AGE_SECS", Some(10), "a number of seconds")?);
        let feed_refresh = Duration::from_millis(at_least(
            parse(get, "FHIR_FEED_REFRESH_MS", Some(1000), "a number of milliseconds")?,
            50,
            "FHIR_FEED_REFRESH_MS",
        )?);
        let resync: u64 = parse(get, "FHIR_FEED_RESYNC_SECS", Some(3600), "a number of seconds (0 = never)")?;
        let feed_resync = (resync > 0).then(|| Duration::from_secs(resync));
        let name = get("FHIR_LOCATION_NAME").map_or_else(|| "Clinic".to_owned(), |n| n.trim().to_owned());
        if name.chars().count() > 200 {
            return Err(ConfigError {
                var: "FHIR_LOCATION_NAME",
                value: name,
                reason: "at most 200 characters".into(),
            });
        }
        let phone = get("FHIR_LOCATION_PHONE").map(|p| p.trim().to_owned());
        if let Some(p) = &phone {
            if p.chars().count() > 40 || !p.chars().all(|c| c.is_ascii_digit() || " +-().".contains(c)) {
                return Err(ConfigError {
                    var: "FHIR_LOCATION_PHONE",
                    value: p.clone(),
                    reason: "expected a phone number (digits, spaces and + - ( ) .)".into(),
                });
            }
        }
        let address = get("FHIR_LOCATION_ADDRESS")
            .map(|raw| {
                PostalAddress::parse(&raw).ok_or_else(|| ConfigError {
                    var: "FHIR_LOCATION_ADDRESS",
                    value: raw.clone(),
                    reason: "expected line;city;state;postalCode with no part empty (lines separated by |)".into(),
                })
            })
            .transpose()?;
        Ok(Self {
            public_base_url,
            public_booking_url,
            feed_max_age,
            feed_refresh,
            feed_resync,
            location: LocationSettings { name, phone, address },
        })
    }
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

/// A setting that could not be used, with the variable's name and why.
#[derive(Debug, thiserror::Error)]
#[error("{var}={value:?}: {reason}")]
pub struct ConfigError {
    /// The environment variable.
    pub var: &'static str,
    /// The value found.
    pub value: String,
    /// What was expected instead.
    pub reason: String,
}

impl Config {
    /// Reads the configuration from the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads the configuration through `lookup` (the environment, or a map in tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |var: &'static str| lookup(var).filter(|v| !v.trim().is_empty());
        let data_dir = PathBuf::from(get("DATA_DIR").unwrap_or_else(|| ".".into()));
        let database = match get("DATABASE_URL") {
            Some(url) => DatabaseTarget::parse(&url).map_err(|reason| ConfigError {
                var: "DATABASE_URL",
                value: url.clone(),
                reason,
            })?,
            None => DatabaseTarget::Sqlite(data_dir.join("clinic-booking.sqlite3")),
        };
        let redis_url = match get("REDIS_URL") {
            Some(url) if url.starts_with("redis://") || url.starts_with("rediss://") => Some(url),
            Some(url) => {
                return Err(ConfigError {
                    var: "REDIS_URL",
                    value: url,
                    reason: "expected redis://host:port[/db]".into(),
                })
            }
            None => None,
        };
        let redis_prefix = get("REDIS_KEY_PREFIX").unwrap_or_else(|| "clinic-booking".into());
        if !redis_prefix.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b)) {
            return Err(ConfigError {
                var: "REDIS_KEY_PREFIX",
                value: redis_prefix,
                reason: "use letters, digits and - _ . : only".into(),
            });
        }
        let jwt_secret = get("JWT_SECRET").map(Secret::new);
        if let Some(secret) = &jwt_secret {
            if secret.expose().len() < 16 {
                return Err(ConfigError {
                    var: "JWT_SECRET",
                    value: "(hidden)".into(),
                    reason: "must be at least 16 bytes long".into(),
                });
            }
        }
        let single_process = database.is_sqlite() && redis_url.is_none();
        if jwt_secret.is_none() && !single_process {
            return Err(ConfigError {
                var: "JWT_SECRET",
                value: String::new(),
                reason: "must be set when DATABASE_URL is PostgreSQL or REDIS_URL is set \
                         (only single-process dev mode makes its own secret)"
                    .into(),
            });
        }
        let db_pool_max = at_least(parse(&get, "DB_POOL_MAX", Some(32), "a number of connections")?, 2, "DB_POOL_MAX")?;
        let bind_addr = parse(&get, "BIND_ADDR", "127.0.0.1:8080".parse().ok(), "an address like 127.0.0.1:8080")?;
        let log_format = match get("LOG_FORMAT").as_deref() {
            None | Some("text") => LogFormat::Text,
            Some("json") => LogFormat::Json,
            Some(other) => {
                return Err(ConfigError {
                    var: "LOG_FORMAT",
                    value: other.into(),
                    reason: "expected text or json".into(),
                })
            }
        };
        Ok(Self {
            bind_addr,
            database,
            redis_url,
            redis_prefix,
            jwt_secret,
            data_dir,
            db_pool_max,
            rate_limit_bookings: parse(&get, "RATE_LIMIT_BOOKINGS", Some(5), "a count (0 switches the limit off)")?,
            rate_limit_window: Duration::from_secs(at_least(
                parse(&get, "RATE_LIMIT_WINDOW_SECS", Some(10), "a number of seconds")?,
                1,
                "RATE_LIMIT_WINDOW_SECS",
            )?),
            slot_cache_ttl: Duration::from_millis(parse(
                &get,
                "SLOT_CACHE_TTL_MS",
                Some(5000),
                "a number of milliseconds (0 switches the cache off)",
            )?),
            known_full_ttl: Duration::from_secs(parse(
                &get,
                "KNOWN_FULL_TTL_SECS",
                Some(30),
                "a number of seconds (0 switches it off)",
            )?),
            booking_concurrency: at_least(
                parse(&get, "BOOKING_CONCURRENCY", Some(db_pool_max / 2), "a number of attempts")?,
                1,
                "BOOKING_CONCURRENCY",
            )?,
            booking_queue_timeout: Duration::from_millis(at_least(
                parse(&get, "BOOKING_QUEUE_TIMEOUT_MS", Some(2000), "a number of milliseconds")?,
                1,
                "BOOKING_QUEUE_TIMEOUT_MS",
            )?),
            redis_timeout: Duration::from_millis(at_least(
                parse(&get, "REDIS_TIMEOUT_MS", Some(100), "a number of milliseconds")?,
                1,
                "REDIS_TIMEOUT_MS",
            )?),
            db_statement_timeout: Duration::from_millis(at_least(
                parse(&get, "DB_STATEMENT_TIMEOUT_MS", Some(5000), "a number of milliseconds")?,
                100,
                "DB_STATEMENT_TIMEOUT_MS",
            )?),
            max_body_bytes: at_least(
                parse(&get, "MAX_BODY_BYTES", Some(256 * 1024), "a number of bytes")?,
                1024,
                "MAX_BODY_BYTES",
            )?,
            max_query_depth: at_least(parse(&get, "MAX_QUERY_DEPTH", Some(15), "a depth")?, 2, "MAX_QUERY_DEPTH")?,
            max_query_complexity: at_least(
                parse(&get, "MAX_QUERY_COMPLEXITY", Some(1000), "a complexity")?,
                10,
                "MAX_QUERY_COMPLEXITY",
            )?,
            max_batch_operations: at_least(
                parse(&get, "MAX_BATCH_OPERATIONS", Some(10), "a count")?,
                1,
                "MAX_BATCH_OPERATIONS",
            )?,
            log_format,
            outbox_poll_interval: Duration::from_millis(at_least(
                parse(&get, "OUTBOX_POLL_MS", Some(500), "a number of milliseconds")?,
                10,
                "OUTBOX_POLL_MS",
            )?),
            outbox_gather: Duration::from_millis(parse(
                &get,
                "OUTBOX_GATHER_MS",
                Some(10),
                "a number of milliseconds",
            )?),
            ws_init_timeout: Duration::from_millis(at_least(
                parse(&get, "WS_INIT_TIMEOUT_MS", Some(10_000), "a number of milliseconds")?,
                1,
                "WS_INIT_TIMEOUT_MS",
            )?),
            ws_max_subscriptions: at_least(
                parse(&get, "WS_MAX_SUBSCRIPTIONS", Some(100), "a count")?,
                1,
                "WS_MAX_SUBSCRIPTIONS",
            )?,
            fhir: FhirSettings::from_get(&get)?,
        })
    }

    /// True when the service runs alone: SQLite and no Redis (dev mode).
    pub fn single_process(&self) -> bool {
        self.database.is_sqlite() && self.redis_url.is_none()
    }
}

fn parse<T: std::str::FromStr>(
    get: &impl Fn(&'static str) -> Option<String>,
    var: &'static str,
    default: Option<T>,
    expected: &str,
) -> Result<T, ConfigError> {
    match get(var) {
        Some(raw) => {
            raw.trim().parse().map_err(|_| ConfigError { var, value: raw, reason: format!("expected {expected}") })
        }
        None => default.ok_or_else(|| ConfigError {
            var,
            value: String::new(),
            reason: format!("must be set to {expected}"),
        }),
    }
}

fn at_least<T: PartialOrd + std::fmt::Display>(value: T, min: T, var: &'static str) -> Result<T, ConfigError> {
    if value < min {
        return Err(ConfigError { var, value: value.to_string(), reason: format!("must be at least {min}") });
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn config(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn defaults_are_single_process_sqlite() -> Result<(), ConfigError> {
        let c = config(&[])?;
        assert!(c.single_process());
        assert_eq!(c.bind_addr.to_string(), "127.0.0.1:8080");
        assert_eq!(c.rate_limit_bookings, 5);
        assert_eq!(c.max_body_bytes, 262_144);
        Ok(())
    }

    #[test]
    fn postgres_without_secret_is_refused() {
        let err = config(&[("DATABASE_URL", "postgres://x@localhost/db")]).unwrap_err();
        assert_eq!(err.var, "JWT_SECRET");
    }

    #[test]
    fn bad_values_name_their_variable() {
        assert_eq!(config(&[("BIND_ADDR", "nope")]).unwrap_err().var, "BIND_ADDR");
        assert_eq!(config(&[("DATABASE_URL", "mysql://x")]).unwrap_err().var, "DATABASE_URL");
        assert_eq!(config(&[("RATE_LIMIT_BOOKINGS", "-1")]).unwrap_err().var, "RATE_LIMIT_BOOKINGS");
        assert_eq!(config(&[("LOG_FORMAT", "xml")]).unwrap_err().var, "LOG_FORMAT");
        assert_eq!(config(&[("JWT_SECRET", "short")]).unwrap_err().var, "JWT_SECRET");
    }

    #[test]
    fn burst_protection_settings() -> Result<(), ConfigError> {
        let c = config(&[("DB_POOL_MAX", "20")])?;
        assert_eq!(c.booking_concurrency, 10);
        assert_eq!(c.slot_cache_ttl, Duration::from_millis(5000));
        assert_eq!(c.known_full_ttl, Duration::from_secs(30));
        assert_eq!(c.redis_timeout, Duration::from_millis(100));
        let off = config(&[("SLOT_CACHE_TTL_MS", "0"), ("KNOWN_FULL_TTL_SECS", "0")])?;
        assert!(off.slot_cache_ttl.is_zero() && off.known_full_ttl.is_zero());
        for (var, bad) in [
            ("SLOT_CACHE_TTL_MS", "-1"),
            ("SLOT_CACHE_TTL_MS", "4s"),
            ("KNOWN_FULL_TTL_SECS", "x"),
            ("BOOKING_CONCURRENCY", "0"),
            ("BOOKING_QUEUE_TIMEOUT_MS", "0"),
            ("REDIS_TIMEOUT_MS", "0"),
            ("DB_STATEMENT_TIMEOUT_MS", "50"),
        ] {
            assert_eq!(config(&[(var, bad)]).unwrap_err().var, var, "{var}={bad}");
        }
        Ok(())
    }

    #[test]
    fn fhir_settings() -> Result<(), ConfigError> {
        let c = config(&[])?.fhir;
        assert_eq!(c.public_base_url, None);
        assert_eq!(c.feed_max_age, Duration::from_secs(10));
        assert_eq!(c.feed_refresh, Duration::from_millis(1000));
        assert_eq!(c.feed_resync, Some(Duration::from_secs(3600)));
        assert_eq!(c.location.name, "Clinic");
        let c = config(&[
            ("PUBLIC_BASE_URL", "https://api.example.com/base/"),
            ("PUBLIC_BOOKING_URL", "https://book.example.com/slots?src=fhir"),
            ("FHIR_FEED_RESYNC_SECS", "0"),
            ("FHIR_LOCATION_ADDRESS", "1 Main St|Floor 2; Springfield ;IL;62701"),
            ("FHIR_LOCATION_PHONE", "+1 217 555 0100"),
        ])?
        .fhir;
        assert_eq!(c.public_base_url.as_deref(), Some("https://api.example.com/base"));
        assert_eq!(c.feed_resync, None);
        let address = c.location.address.expect("address");
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

    #[test]
    fn sqlite_urls_name_a_file() {
        assert_eq!(DatabaseTarget::parse("sqlite://a/b.db"), Ok(DatabaseTarget::Sqlite("a/b.db".into())));
        assert_eq!(DatabaseTarget::parse("sqlite:x.db?mode=rwc"), Ok(DatabaseTarget::Sqlite("x.db".into())));
        assert!(DatabaseTarget::parse("sqlite::memory:").is_err());
    }
}
