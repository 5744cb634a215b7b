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

    /// The target for messages, with no password: `postgres://user@host:port/db` (a password in
    /// the URL's user part or in a `password=` parameter is left out), or `sqlite://path`.
    pub fn redacted(&self) -> String {
        match self {
            Self::Sqlite(path) => format!("sqlite://{}", path.display()),
            Self::Postgres(url) => redact_url(url),
        }
    }
}

/// `url` without the password of its user part nor any `password=` query parameter.
pub fn redact_url(url: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, None), |(b, q)| (b, Some(q)));
    let base = match base.split_once("://") {
        Some((scheme, rest)) => {
            // The user part ends at the last '@' before the path.
            let authority_end = rest.find('/').unwrap_or(rest.len());
            match rest[..authority_end].rfind('@') {
                Some(at) => {
                    let user = rest[..at].split(':').next().unwrap_or_default();
                    format!("{scheme}://{user}@{}", &rest[at + 1..])
                }
                None => base.to_owned(),
            }
        }
        None => base.to_owned(),
    };
    let kept: Vec<&str> = query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty() && !p.to_ascii_lowercase().starts_with("password="))
        .collect();
    if kept.is_empty() {
        base
    } else {
        format!("{base}?{}", kept.join("&"))
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

/// A URL that may carry credentials (`SMTP_URL`, `SMS_URL`): its `Debug` hides the password.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretUrl(url::Url);

impl SecretUrl {
    /// The URL, credentials included.
    pub fn expose(&self) -> &url::Url {
        &self.0
    }

    /// The URL without its credentials, for logs.
    pub fn redacted(&self) -> String {
        let mut shown = self.0.clone();
        if !shown.username().is_empty() || shown.password().is_some() {
            let _ = shown.set_username("");
            let _ = shown.set_password(None);
        }
        shown.to_string()
    }
}

impl std::fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretUrl({})", self.redacted())
    }
}

/// An SMS gateway: where the Twilio-style form goes, and the sender it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SmsGateway {
    /// `SMS_URL`; basic-auth credentials, if any, in its userinfo.
    pub url: SecretUrl,
    /// `SMS_FROM`.
    pub from: String,
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// The browser origins allowed to call the API from pages of other sites (CORS) and to open
/// WebSockets (`CORS_ALLOWED_ORIGINS`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllowedOrigins {
    /// Any origin (`*`); responses then allow no credentials.
    Any,
    /// Exactly these origins, as browsers write them: `scheme://host[:port]`, lower case, no
    /// default port. Empty: no other site (the production default).
    List(Vec<String>),
    /// Any `http` origin on this machine (`localhost`, `127.0.0.1`, `[::1]`, any port): the
    /// default in single-process dev mode, for a front end served by a local dev server.
    Loopback,
}

impl AllowedOrigins {
    /// Parses a `CORS_ALLOWED_ORIGINS` value: `*`, or origins separated by commas (empty
    /// entries are ignored). `Err` carries the bad entry and why.
    pub fn parse(value: &str) -> Result<Self, (String, String)> {
        let entries: Vec<&str> = value.split(',').map(str::trim).filter(|e| !e.is_empty()).collect();
        if entries.contains(&"*") {
            if entries.len() > 1 {
                return Err(("*".into(), "* (any origin) stands alone, without other origins".into()));
            }
            return Ok(Self::Any);
        }
        let mut origins = Vec::with_capacity(entries.len());
        for entry in entries {
            let origin = normalize_origin(entry).map_err(|reason| (entry.to_owned(), reason))?;
            if !origins.contains(&origin) {
                origins.push(origin);
            }
        }
        Ok(Self::List(origins))
    }

    /// True when a browser page of `origin` (an `Origin` header's value) may call the API.
    pub fn allows(&self, origin: &str) -> bool {
        match self {
            Self::Any => true,
            Self::List(origins) => origins.iter().any(|o| o.eq_ignore_ascii_case(origin)),
            Self::Loopback => normalize_origin(origin).is_ok_and(|o| {
                let Some(authority) = o.strip_prefix("http://") else { return false };
                let host = match authority.rsplit_once(':') {
                    Some((host, port)) if !port.contains(']') => host,
                    _ => authority,
                };
                matches!(host, "localhost" | "127.0.0.1" | "[::1]")
            }),
        }
    }

    /// True when no other site is allowed at all.
    pub fn is_none(&self) -> bool {
        matches!(self, Self::List(origins) if origins.is_empty())
    }
}

/// An origin as browsers serialize it (lower case, no default port), or why `raw` is none.
fn normalize_origin(raw: &str) -> Result<String, String> {
    const SHAPE: &str = "an origin is scheme://host[:port], e.g. https://app.example.com";
    let Some((scheme, authority)) = raw.split_once("://") else {
        return Err(format!("{SHAPE} (no scheme:// found)"));
    };
    let scheme = scheme.to_ascii_lowercase();
    let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b));
    if !scheme_ok {
        return Err(format!("{SHAPE} (bad scheme)"));
    }
    if authority.contains(['/', '?', '#']) {
        return Err(format!("{SHAPE}, without a path, not even a trailing /"));
    }
    if authority.contains('@') {
        return Err(format!("{SHAPE}, without user name or password"));
    }
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (addr, rest) = v6.split_once(']').ok_or_else(|| format!("{SHAPE} (unclosed [ of an IPv6 address)"))?;
            if addr.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(format!("{SHAPE} ({addr} is not an IPv6 address)"));
            }
            let port = match rest {
                "" => None,
                _ => Some(rest.strip_prefix(':').ok_or_else(|| format!("{SHAPE} (text after the IPv6 address)"))?),
            };
            (format!("[{}]", addr.to_ascii_lowercase()), port)
        }
        None => {
            let (host, port) = match authority.split_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            };
            let host_ok = !host.is_empty()
                && !host.starts_with(['.', '-'])
                && host.bytes().all(|b| b.is_ascii_alphanumeric() || b"-.".contains(&b));
            if !host_ok {
                return Err(format!("{SHAPE} (bad host {host:?})"));
            }
            (host.to_ascii_lowercase(), port)
        }
    };
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => Some(n),
            _ => return Err(format!("{SHAPE} (bad port {p:?})")),
        },
    };
    let default_port = match scheme.as_str() {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    };
    Ok(match port {
        Some(n) if Some(n) != default_port => format!("{scheme}://{host}:{n}"),
        _ => format!("{scheme}://{host}"),
    })
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
    /// How long a rendered slot-list answer may be kept at most, dropped earlier by every change
    /// this instance hears of (`ANSWER_CACHE_TTL_MS`, default 30000; 0 = none kept).
    pub answer_cache_ttl: Duration,
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
    /// The mail server (`SMTP_URL`: `smtp://host[:port]`, `smtp://host?tls=required`,
    /// `smtps://user:pass@host[:port]`); `None`: emails are written as files into
    /// `DATA_DIR/outbox-mail/`.
    pub smtp_url: Option<SecretUrl>,
    /// Sender of the emails (`MAIL_FROM`, default `clinic-booking <no-reply@localhost>`); its
    /// domain also names the messages and calendar events (`Message-ID`, `UID`).
    pub mail_from: lettre::message::Mailbox,
    /// The SMS gateway (`SMS_URL` with `SMS_FROM`); `None`: SMS are written as files into
    /// `DATA_DIR/outbox-sms/`.
    pub sms: Option<SmsGateway>,
    /// Sender named in SMS written as files when there is no gateway (`SMS_FROM`, optional then).
    pub sms_from: Option<String>,
    /// How long before a booked appointment its reminder goes out (`REMINDER_BEFORE_SECS`,
    /// default 86400; 0: no reminders).
    pub reminder_before: Duration,
    /// Longest wait between two attempts of a message (`NOTIFY_RETRY_MAX_SECS`, default 300).
    pub notify_retry_max: Duration,
    /// Attempts of a message, the first included, before it is kept as failed
    /// (`NOTIFY_MAX_ATTEMPTS`, default 10).
    pub notify_max_attempts: u32,
    /// How often the message workers look for due messages when no commit woke them
    /// (`NOTIFY_POLL_MS`, default 1000): retries and reminders are due this much late at most.
    pub notify_poll_interval: Duration,
    /// Messages one instance sends at once (`NOTIFY_CONCURRENCY`, default 32: fewer fell
    /// behind a full booking rate on two cores, see docs/benchmarks-history.md, "Sixth pass").
    pub notify_concurrency: usize,
    /// How long sent, given-up and skipped messages and finished webhook deliveries are kept
    /// before the retention job removes them (`RETENTION_DAYS`, default 30); `None` (`0`):
    /// kept for ever.
    pub retention: Option<Duration>,
    /// How long a hold keeps its seat before it expires (`HOLD_TTL_SECS`, default 600).
    pub hold_ttl: Duration,
    /// Working hours' planning horizon (`SCHEDULE_HORIZON_*`, parsed by its module).
    pub horizon: crate::booking::HorizonSettings,
    /// How often the expiry job looks for holds that ran out (`HOLD_EXPIRY_POLL_MS`, default
    /// 1000: with a batch's time on top, well within the five seconds the contract allows).
    pub hold_expiry_interval: Duration,
    /// Worker threads of the booking lane, a runtime of its own for the operations that move
    /// seats (`BOOKING_LANE_THREADS`, default 0: on the main runtime; on two cores the lane made
    /// bookings slower in every alternating run, docs/benchmarks-history.md, fifth pass).
    pub booking_lane_threads: usize,
    /// How long a waitlist offer keeps its seat (`WAITLIST_OFFER_SECS`, default 900).
    pub waitlist_offer_ttl: Duration,
    /// Origins whose pages may call the API and open WebSockets (`CORS_ALLOWED_ORIGINS`; default
    /// none, or any loopback `http` origin in single-process dev mode).
    pub cors_allowed_origins: AllowedOrigins,
    /// Partner webhooks: the waits before the 2nd, 3rd, … attempt of a delivery
    /// (`WEBHOOK_RETRY_SCHEDULE`, default `5s,5m,30m,2h,5h,10h,14h,20h,24h`); after the last,
    /// the delivery is `FAILED`.
    pub webhook_retry_schedule: Vec<Duration>,
    /// Networks webhook URLs may reach although they are not public, and where plain `http://`
    /// is allowed (`WEBHOOK_ALLOW_CIDRS`, comma-separated CIDRs, default none).
    pub webhook_allow_cidrs: Vec<ipnet::IpNet>,
    /// Longest wait for one webhook attempt's answer (`WEBHOOK_TIMEOUT_MS`, default 15000).
    pub webhook_timeout: Duration,
    /// How often the webhook workers look for due deliveries when nothing woke them
    /// (`WEBHOOK_POLL_MS`, default 1000).
    pub webhook_poll_interval: Duration,
    /// Webhook attempts one instance makes at once (`WEBHOOK_CONCURRENCY`, default 32, for the
    /// same reason as `NOTIFY_CONCURRENCY`).
    pub webhook_concurrency: usize,
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

/// The default of `WEBHOOK_RETRY_SCHEDULE`: the Standard Webhooks schedule.
pub const DEFAULT_WEBHOOK_RETRY_SCHEDULE: &str = "5s,5m,30m,2h,5h,10h,14h,20h,24h";
/// Most entries of `WEBHOOK_RETRY_SCHEDULE`.
const MAX_RETRIES: usize = 30;
/// Longest single wait of `WEBHOOK_RETRY_SCHEDULE`.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(7 * 24 * 3600);

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
        let cors_allowed_origins = match get("CORS_ALLOWED_ORIGINS") {
            Some(value) => AllowedOrigins::parse(&value).map_err(|(entry, reason)| ConfigError {
                var: "CORS_ALLOWED_ORIGINS",
                value: entry,
                reason,
            })?,
            None if single_process => AllowedOrigins::Loopback,
            None => AllowedOrigins::List(Vec::new()),
        };
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
        let webhook_retry_schedule = {
            let raw = get("WEBHOOK_RETRY_SCHEDULE").unwrap_or_else(|| DEFAULT_WEBHOOK_RETRY_SCHEDULE.into());
            parse_schedule(&raw).map_err(|reason| ConfigError { var: "WEBHOOK_RETRY_SCHEDULE", value: raw, reason })?
        };
        let webhook_allow_cidrs = match get("WEBHOOK_ALLOW_CIDRS") {
            Some(raw) => {
                parse_cidrs(&raw).map_err(|reason| ConfigError { var: "WEBHOOK_ALLOW_CIDRS", value: raw, reason })?
            }
            None => Vec::new(),
        };
        let smtp_url = get("SMTP_URL").map(|raw| parse_smtp_url(&raw)).transpose()?;
        let mail_from = get("MAIL_FROM").unwrap_or_else(|| DEFAULT_MAIL_FROM.into());
        let mail_from = parse_mail_from(&mail_from).map_err(|reason| ConfigError {
            var: "MAIL_FROM",
            value: mail_from.clone(),
            reason,
        })?;
        let sms_from = get("SMS_FROM").map(|raw| parse_sms_from(&raw)).transpose()?;
        let sms = match get("SMS_URL") {
            Some(raw) => {
                let url = parse_sms_url(&raw)?;
                let from = sms_from.clone().ok_or_else(|| ConfigError {
                    var: "SMS_FROM",
                    value: String::new(),
                    reason: "must be set when SMS_URL is: the sender number (E.164) or an alphanumeric sender id"
                        .into(),
                })?;
                Some(SmsGateway { url, from })
            }
            None => None,
        };
        Ok(Self {
            smtp_url,
            mail_from,
            sms,
            sms_from,
            reminder_before: Duration::from_secs(parse(
                &get,
                "REMINDER_BEFORE_SECS",
                Some(86_400),
                "a number of seconds (0 switches reminders off)",
            )?),
            notify_retry_max: Duration::from_secs(at_least(
                parse(&get, "NOTIFY_RETRY_MAX_SECS", Some(300), "a number of seconds")?,
                1,
                "NOTIFY_RETRY_MAX_SECS",
            )?),
            notify_max_attempts: at_least(
                parse(&get, "NOTIFY_MAX_ATTEMPTS", Some(10), "a number of attempts")?,
                1,
                "NOTIFY_MAX_ATTEMPTS",
            )?,
            notify_poll_interval: Duration::from_millis(at_least(
                parse(&get, "NOTIFY_POLL_MS", Some(1000), "a number of milliseconds")?,
                10,
                "NOTIFY_POLL_MS",
            )?),
            notify_concurrency: at_least(
                parse(&get, "NOTIFY_CONCURRENCY", Some(32), "a number of messages")?,
                1,
                "NOTIFY_CONCURRENCY",
            )?,
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
            answer_cache_ttl: Duration::from_millis(parse(
                &get,
                "ANSWER_CACHE_TTL_MS",
                Some(30_000),
                "a number of milliseconds (0 keeps no answers)",
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
            retention: {
                let days = at_most(
                    parse(&get, "RETENTION_DAYS", Some(30u64), "a number of days (0 keeps them for ever)")?,
                    MAX_RETENTION_DAYS,
                    "RETENTION_DAYS",
                )?;
                (days > 0).then(|| Duration::from_secs(days * 86_400))
            },
            horizon: crate::booking::HorizonSettings::from_lookup(&get)?,
            hold_ttl: Duration::from_secs(at_least(
                parse(&get, "HOLD_TTL_SECS", Some(600), "a number of seconds")?,
                1,
                "HOLD_TTL_SECS",
            )?),
            hold_expiry_interval: Duration::from_millis(at_least(
                parse(&get, "HOLD_EXPIRY_POLL_MS", Some(1000), "a number of milliseconds")?,
                10,
                "HOLD_EXPIRY_POLL_MS",
            )?),
            booking_lane_threads: at_most(
                parse(&get, "BOOKING_LANE_THREADS", Some(0), "a number of threads (0: none of its own)")?,
                64,
                "BOOKING_LANE_THREADS",
            )?,
            waitlist_offer_ttl: Duration::from_secs(at_least(
                parse(&get, "WAITLIST_OFFER_SECS", Some(900), "a number of seconds")?,
                1,
                "WAITLIST_OFFER_SECS",
            )?),
            cors_allowed_origins,
            webhook_retry_schedule,
            webhook_allow_cidrs,
            webhook_timeout: Duration::from_millis(at_least(
                parse(&get, "WEBHOOK_TIMEOUT_MS", Some(15_000), "a number of milliseconds")?,
                1,
                "WEBHOOK_TIMEOUT_MS",
            )?),
            webhook_poll_interval: Duration::from_millis(at_least(
                parse(&get, "WEBHOOK_POLL_MS", Some(1000), "a number of milliseconds")?,
                10,
                "WEBHOOK_POLL_MS",
            )?),
            webhook_concurrency: at_least(
                parse(&get, "WEBHOOK_CONCURRENCY", Some(32), "a number of attempts")?,
                1,
                "WEBHOOK_CONCURRENCY",
            )?,
            fhir: FhirSettings::from_get(&get)?,
        })
    }

    /// True when the service runs alone: SQLite and no Redis (dev mode).
    pub fn single_process(&self) -> bool {
        self.database.is_sqlite() && self.redis_url.is_none()
    }
}

/// Largest `RETENTION_DAYS`: a hundred years, far beyond any use, and far from overflowing.
const MAX_RETENTION_DAYS: u64 = 36_500;

/// `MAIL_FROM` when unset.
pub const DEFAULT_MAIL_FROM: &str = "clinic-booking <no-reply@localhost>";

/// `SMTP_URL`: what lettre's `AsyncSmtpTransport::from_url` takes, minus what would send a
/// password in the clear.
fn parse_smtp_url(raw: &str) -> Result<SecretUrl, ConfigError> {
    let bad = |reason: &str| ConfigError { var: "SMTP_URL", value: hide_password(raw), reason: reason.into() };
    let url = url::Url::parse(raw).map_err(|e| bad(&format!("not a URL ({e}); expected smtp://host:port")))?;
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("names no host; expected smtp://host:port or smtps://user:pass@host"));
    }
    let mut tls = None;
    for (key, value) in url.query_pairs() {
        match (key.as_ref(), value.as_ref()) {
            ("tls", "required" | "opportunistic") if tls.is_none() => tls = Some(value.into_owned()),
            _ => return Err(bad("the only query parameter understood is tls=required or tls=opportunistic")),
        }
    }
    let credentials = !url.username().is_empty() || url.password().is_some();
    match url.scheme() {
        "smtps" if tls.is_some() => Err(bad("smtps:// is TLS from the start; tls= applies to smtp:// only")),
        "smtps" => Ok(SecretUrl(url)),
        "smtp" if credentials && tls.as_deref() != Some("required") && !is_loopback(&url) => Err(bad(
            "credentials would travel unencrypted: use smtps://user:pass@host or smtp://user:pass@host?tls=required \
             (plain smtp:// with credentials only to a loopback address)",
        )),
        "smtp" => Ok(SecretUrl(url)),
        _ => Err(bad("expected smtp://host:port or smtps://user:pass@host[:port]")),
    }
}

/// `SMS_URL`: an `https://` endpoint, or `http://` to a loopback address (basic-auth
/// credentials must not cross a network in the clear).
fn parse_sms_url(raw: &str) -> Result<SecretUrl, ConfigError> {
    let bad = |reason: &str| ConfigError { var: "SMS_URL", value: hide_password(raw), reason: reason.into() };
    let url = url::Url::parse(raw).map_err(|e| bad(&format!("not a URL ({e})")))?;
    if url.host().is_none() {
        return Err(bad("names no host"));
    }
    match url.scheme() {
        "https" => Ok(SecretUrl(url)),
        "http" if is_loopback(&url) => Ok(SecretUrl(url)),
        "http" => Err(bad("use https:// (http:// only to a loopback address, for local gateways)")),
        _ => Err(bad("expected an https:// URL (basic auth from its userinfo)")),
    }
}

/// Whether `url` names this machine (`localhost`, 127.0.0.0/8, `::1`): credentials may go
/// there unencrypted.
fn is_loopback(url: &url::Url) -> bool {
    match url.host() {
        // Hosts of non-special schemes (smtp://) are opaque to `url`: an address reads as a name.
        Some(url::Host::Domain(d)) => {
            d.eq_ignore_ascii_case("localhost")
                || d.trim_matches(['[', ']']).parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
        }
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// `MAIL_FROM`: a mailbox (`Name <user@domain>` or `user@domain`) as lettre parses it.
fn parse_mail_from(raw: &str) -> Result<lettre::message::Mailbox, String> {
    raw.trim()
        .parse::<lettre::message::Mailbox>()
        .map_err(|e| format!("expected a mailbox such as {DEFAULT_MAIL_FROM:?} ({e})"))
}

/// `SMS_FROM`: an E.164 number or an alphanumeric sender id (1–11 letters, digits or spaces,
/// with at least one letter), the two forms SMS gateways take.
fn parse_sms_from(raw: &str) -> Result<String, ConfigError> {
    let value = raw.trim();
    let e164 = value
        .strip_prefix('+')
        .is_some_and(|d| (8..=15).contains(&d.len()) && d.bytes().all(|b| b.is_ascii_digit()) && !d.starts_with('0'));
    let alphanumeric = (1..=11).contains(&value.len())
        && value.bytes().all(|b| b.is_ascii_alphanumeric() || b == b' ')
        && value.bytes().any(|b| b.is_ascii_alphabetic());
    if e164 || alphanumeric {
        return Ok(value.to_owned());
    }
    Err(ConfigError {
        var: "SMS_FROM",
        value: raw.into(),
        reason: "expected an E.164 number (+ and 8 to 15 digits) or an alphanumeric sender id of up to 11 characters"
            .into(),
    })
}

/// A URL value as shown in an error: without its password.
fn hide_password(raw: &str) -> String {
    match url::Url::parse(raw) {
        Ok(mut url) if url.password().is_some() => {
            let _ = url.set_password(Some("***"));
            url.to_string()
        }
        _ => raw.to_owned(),
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

fn at_most<T: PartialOrd + std::fmt::Display>(value: T, max: T, var: &'static str) -> Result<T, ConfigError> {
    if value > max {
        return Err(ConfigError { var, value: value.to_string(), reason: format!("must be at most {max}") });
    }
    Ok(value)
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

    #[test]
    fn urls_in_messages_carry_no_password() {
        assert_eq!(redact_url("postgres://nobody:s3cret@127.0.0.1:5432/test"), "postgres://nobody@127.0.0.1:5432/test");
        assert_eq!(redact_url("postgres://u:p@ss@h/db?sslmode=require"), "postgres://u@h/db?sslmode=require");
        assert_eq!(redact_url("postgres://h/db?password=x&application_name=a"), "postgres://h/db?application_name=a");
        assert_eq!(redact_url("redis://:pw@127.0.0.1:6379"), "redis://@127.0.0.1:6379");
        assert_eq!(redact_url("postgres://postgres@127.0.0.1:5432/test"), "postgres://postgres@127.0.0.1:5432/test");
    }

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
        assert_eq!(c.answer_cache_ttl, Duration::from_secs(30));
        assert_eq!(c.known_full_ttl, Duration::from_secs(30));
        assert_eq!(c.redis_timeout, Duration::from_millis(100));
        let off = config(&[("SLOT_CACHE_TTL_MS", "0"), ("KNOWN_FULL_TTL_SECS", "0")])?;
        assert!(off.slot_cache_ttl.is_zero() && off.known_full_ttl.is_zero());
        for (var, bad) in [
            ("SLOT_CACHE_TTL_MS", "-1"),
            ("SLOT_CACHE_TTL_MS", "4s"),
            ("ANSWER_CACHE_TTL_MS", "30s"),
            ("KNOWN_FULL_TTL_SECS", "x"),
            ("BOOKING_CONCURRENCY", "0"),
            ("BOOKING_QUEUE_TIMEOUT_MS", "0"),
            ("REDIS_TIMEOUT_MS", "0"),
            ("DB_STATEMENT_TIMEOUT_MS", "50"),
            ("HOLD_TTL_SECS", "0"),
            ("HOLD_TTL_SECS", "10m"),
            ("HOLD_EXPIRY_POLL_MS", "5"),
            ("WAITLIST_OFFER_SECS", "0"),
        ] {
            assert_eq!(config(&[(var, bad)]).unwrap_err().var, var, "{var}={bad}");
        }
        Ok(())
    }

    #[test]
    fn message_settings() -> Result<(), ConfigError> {
        let c = config(&[])?;
        assert!(c.smtp_url.is_none() && c.sms.is_none());
        assert_eq!(c.mail_from.email.domain(), "localhost");
        assert_eq!(c.reminder_before, Duration::from_secs(86_400));
        assert_eq!(c.notify_retry_max, Duration::from_secs(300));
        assert_eq!(c.notify_max_attempts, 10);
        let c = config(&[
            ("SMTP_URL", "smtps://user:p%40ss@mail.example.org"),
            ("MAIL_FROM", "Clinic <hello@clinic.example>"),
            ("SMS_URL", "https://AC1:token@sms.example.org/2010-04-01/Accounts/AC1/Messages.json"),
            ("SMS_FROM", "+15005550006"),
            ("REMINDER_BEFORE_SECS", "0"),
        ])?;
        let smtp = c.smtp_url.as_ref().map(SecretUrl::redacted).unwrap_or_default();
        assert_eq!(smtp, "smtps://mail.example.org");
        assert!(!format!("{c:?}").contains("p%40ss") && !format!("{c:?}").contains("token"));
        assert_eq!(c.sms.map(|s| s.from).as_deref(), Some("+15005550006"));
        assert!(c.reminder_before.is_zero());
        assert!(config(&[("SMTP_URL", "smtp://127.0.0.1:2525")]).is_ok());
        assert!(config(&[("SMTP_URL", "smtp://relay.example.org?tls=required")]).is_ok());
        assert!(config(&[("SMTP_URL", "smtp://u:p@relay.example.org?tls=required")]).is_ok());
        assert!(config(&[("SMTP_URL", "smtp://u:p@127.0.0.1:2525")]).is_ok(), "a local relay");
        assert!(config(&[("SMS_URL", "http://127.0.0.1:9/sms"), ("SMS_FROM", "Clinic")]).is_ok());
        for (vars, var) in [
            (vec![("SMTP_URL", "mailto:x@y")], "SMTP_URL"),
            (vec![("SMTP_URL", "smtp://u:p@relay.example.org")], "SMTP_URL"),
            (vec![("SMTP_URL", "smtp://relay.example.org?tls=sometimes")], "SMTP_URL"),
            (vec![("MAIL_FROM", "not an address")], "MAIL_FROM"),
            (vec![("SMS_URL", "https://sms.example.org")], "SMS_FROM"),
            (vec![("SMS_URL", "http://sms.example.org"), ("SMS_FROM", "+15005550006")], "SMS_URL"),
            (vec![("SMS_FROM", "+0123")], "SMS_FROM"),
            (vec![("NOTIFY_MAX_ATTEMPTS", "0")], "NOTIFY_MAX_ATTEMPTS"),
            (vec![("NOTIFY_RETRY_MAX_SECS", "0")], "NOTIFY_RETRY_MAX_SECS"),
            (vec![("REMINDER_BEFORE_SECS", "-5")], "REMINDER_BEFORE_SECS"),
        ] {
            let err = config(&vars).unwrap_err();
            assert_eq!(err.var, var, "{vars:?}");
            assert!(!err.to_string().contains(":p@"), "the password is hidden: {err}");
        }
        Ok(())
    }

    #[test]
    fn retention_settings() -> Result<(), ConfigError> {
        assert_eq!(config(&[])?.retention, Some(Duration::from_secs(30 * 86_400)));
        assert_eq!(config(&[("RETENTION_DAYS", "7")])?.retention, Some(Duration::from_secs(7 * 86_400)));
        assert_eq!(config(&[("RETENTION_DAYS", "0")])?.retention, None, "0 keeps them for ever");
        for bad in ["-1", "30d", "1.5", "ten", "36501"] {
            let err = config(&[("RETENTION_DAYS", bad)]).unwrap_err();
            assert_eq!(err.var, "RETENTION_DAYS", "{bad}");
            assert!(err.to_string().starts_with("RETENTION_DAYS="), "{err}");
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
    fn cors_origins_default_by_mode_and_are_validated() -> Result<(), ConfigError> {
        assert_eq!(config(&[])?.cors_allowed_origins, AllowedOrigins::Loopback);
        let production = [("DATABASE_URL", "postgres://x@localhost/db"), ("JWT_SECRET", "0123456789abcdef")];
        assert!(config(&production)?.cors_allowed_origins.is_none());
        let c = config(&[("CORS_ALLOWED_ORIGINS", " https://App.Example.com:443, http://localhost:3000,,")])?;
        assert_eq!(
            c.cors_allowed_origins,
            AllowedOrigins::List(vec!["https://app.example.com".into(), "http://localhost:3000".into()])
        );
        assert_eq!(config(&[("CORS_ALLOWED_ORIGINS", "*")])?.cors_allowed_origins, AllowedOrigins::Any);
        assert_eq!(
            config(&[("CORS_ALLOWED_ORIGINS", "http://[::1]:8080")])?.cors_allowed_origins,
            AllowedOrigins::List(vec!["http://[::1]:8080".into()])
        );
        for bad in [
            "app.example.com",
            "https://app.example.com/",
            "https://app.example.com/path",
            "https://user@app.example.com",
            "https://app.example.com:0",
            "https://app.example.com:99999",
            "https://app.example.com:",
            "https://:8080",
            "https://exa mple.com",
            "https://[::1",
            "https://[nope]",
            "1http://x",
            "https://ok.example.com, *",
        ] {
            let err = config(&[("CORS_ALLOWED_ORIGINS", bad)]).unwrap_err();
            assert_eq!(err.var, "CORS_ALLOWED_ORIGINS", "{bad}");
            assert!(err.to_string().starts_with("CORS_ALLOWED_ORIGINS="), "{err}");
        }
        Ok(())
    }

    #[test]
    fn webhook_settings() -> Result<(), ConfigError> {
        let c = config(&[])?;
        let hours = |h: u64| Duration::from_secs(h * 3600);
        assert_eq!(
            c.webhook_retry_schedule,
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
        assert!(c.webhook_allow_cidrs.is_empty());
        assert_eq!((c.webhook_timeout, c.webhook_concurrency), (Duration::from_secs(15), 32));
        let t = config(&[
            ("WEBHOOK_RETRY_SCHEDULE", " 1s, 250ms ,2d"),
            ("WEBHOOK_ALLOW_CIDRS", "127.0.0.0/8, ::1, 10.1.2.3/8"),
        ])?;
        assert_eq!(
            t.webhook_retry_schedule,
            vec![Duration::from_secs(1), Duration::from_millis(250), Duration::from_secs(172_800)]
        );
        let nets: Vec<String> = t.webhook_allow_cidrs.iter().map(ToString::to_string).collect();
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

    #[test]
    fn origins_match_as_browsers_send_them() -> Result<(), (String, String)> {
        let list = AllowedOrigins::parse("https://app.example.com, http://localhost:3000")?;
        assert!(list.allows("https://app.example.com"));
        assert!(list.allows("http://localhost:3000"));
        for refused in ["http://app.example.com", "https://app.example.com:8443", "http://localhost:3001", "null"] {
            assert!(!list.allows(refused), "{refused}");
        }
        let dev = AllowedOrigins::Loopback;
        for ok in ["http://localhost", "http://localhost:5173", "http://127.0.0.1:8080", "http://[::1]:3000"] {
            assert!(dev.allows(ok), "{ok}");
        }
        for refused in ["https://localhost", "http://localhost.evil.com", "http://127.0.0.2", "http://evil.com", "null"]
        {
            assert!(!dev.allows(refused), "{refused}");
        }
        assert!(AllowedOrigins::Any.allows("https://anything.example"));
        assert!(!AllowedOrigins::parse("")?.allows("http://localhost"));
        Ok(())
    }

    #[test]
    fn sqlite_urls_name_a_file() {
        assert_eq!(DatabaseTarget::parse("sqlite://a/b.db"), Ok(DatabaseTarget::Sqlite("a/b.db".into())));
        assert_eq!(DatabaseTarget::parse("sqlite:x.db?mode=rwc"), Ok(DatabaseTarget::Sqlite("x.db".into())));
        assert!(DatabaseTarget::parse("sqlite::memory:").is_err());
    }
}
