//! Configuration: the composition of every module's settings, read from the environment once
//! at start-up, plus the rules that involve more than one module.
//!
//! Each module owns its settings: a `Settings` type beside the code it configures, with its
//! defaults, parsing and validation in its `from_env` (e.g. [`crate::guard::Settings`],
//! [`crate::http::AllowedOrigins`] beside the CORS layer, the SMTP and SMS URLs beside their
//! transports in [`crate::notify::transport`]). Each variable is named once, where it is read,
//! and once in the README's table; the tests below check both. Adding a variable: read it in
//! its module's `from_env`, add its row to the README.

use std::path::PathBuf;

use crate::{auth, booking, db, events, fhir, graphql, guard, http, notify, retention, telemetry, webhooks};

pub use crate::{
    auth::Secret,
    db::settings::{redact_url, DatabaseTarget},
    settings::{ConfigError, Reader},
};

/// Every setting of a server instance, module by module.
#[derive(Clone, Debug)]
pub struct Config {
    /// Directory for the SQLite file, the dev-mode secret and the dev-mode message files
    /// (`DATA_DIR`, default `.`).
    pub data_dir: PathBuf,
    /// Redis, shared by the guards and live availability.
    pub redis: RedisSettings,
    /// The database and its pool.
    pub db: db::Settings,
    /// The token signing secret.
    pub auth: auth::Settings,
    /// Logging.
    pub telemetry: telemetry::Settings,
    /// The listen address, request limits and CORS.
    pub http: http::Settings,
    /// Query limits and kept answers.
    pub graphql: graphql::Settings,
    /// Burst protection.
    pub guard: guard::Settings,
    /// The outbox relay.
    pub events: events::Settings,
    /// Holds and waitlist offers.
    pub booking: booking::Settings,
    /// Emails and SMS to patients.
    pub notify: notify::Settings,
    /// Partner webhooks.
    pub webhooks: webhooks::Settings,
    /// The FHIR surface and its feed.
    pub fhir: fhir::Settings,
    /// The retention job.
    pub retention: retention::Settings,
}

/// Redis for cross-instance pub/sub, cache and rate limits.
#[derive(Clone, Debug)]
pub struct RedisSettings {
    /// Its URL (`REDIS_URL`); `None` keeps all of that in process.
    pub url: Option<String>,
    /// Prefix of every Redis key and channel (`REDIS_KEY_PREFIX`, default `clinic-booking`), so
    /// several deployments (or test runs) can share one Redis.
    pub prefix: String,
}

impl RedisSettings {
    /// Reads them.
    pub fn from_env(r: &mut Reader) -> Result<Self, ConfigError> {
        let url = r.with("REDIS_URL", |url| {
            if url.starts_with("redis://") || url.starts_with("rediss://") {
                Ok(url.to_owned())
            } else {
                Err("expected redis://host:port[/db]".into())
            }
        })?;
        let prefix = r.with_or("REDIS_KEY_PREFIX", "clinic-booking", |prefix| {
            if prefix.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b)) {
                Ok(prefix.to_owned())
            } else {
                Err("use letters, digits and - _ . : only".into())
            }
        })?;
        Ok(Self { url, prefix })
    }
}

impl Config {
    /// Reads the configuration from the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_reader(&mut Reader::env())
    }

    /// Reads the configuration through `lookup` (the environment, or a map in tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        Self::from_reader(&mut Reader::new(lookup))
    }

    /// Reads every module's settings through `r`, which records the variables read, then
    /// applies the rules that involve several modules.
    pub fn from_reader(r: &mut Reader) -> Result<Self, ConfigError> {
        let data_dir = PathBuf::from(r.string("DATA_DIR").unwrap_or_else(|| ".".into()));
        let db = db::Settings::from_env(r, &data_dir)?;
        let redis = RedisSettings::from_env(r)?;
        let auth = auth::Settings::from_env(r)?;
        let single_process = db.target.is_sqlite() && redis.url.is_none();
        // Several instances must sign alike: only a lone instance may make its own secret.
        // With trusted providers the secret is optional: then only their tokens are accepted.
        if auth.jwt_secret.is_none() && auth.issuers.is_empty() && !single_process {
            return Err(ConfigError::new(
                auth::settings::JWT_SECRET,
                "",
                "must be set when DATABASE_URL is PostgreSQL or REDIS_URL is set, unless AUTH_ISSUERS is \
                 (only single-process dev mode makes its own secret)",
            ));
        }
        let telemetry = telemetry::Settings::from_env(r)?;
        let http = http::Settings::from_env(r, single_process)?;
        let mut graphql = graphql::Settings::from_env(r)?;
        let guard = guard::Settings::from_env(r, db.pool_max)?;
        // No slot-list cache means no kept answers either: `SLOT_CACHE_TTL_MS=0` switches off both.
        if guard.slot_cache_ttl.is_zero() {
            graphql.answer_cache_ttl = std::time::Duration::ZERO;
        }
        Ok(Self {
            data_dir,
            redis,
            db,
            auth,
            telemetry,
            http,
            graphql,
            guard,
            events: events::Settings::from_env(r)?,
            booking: booking::Settings::from_env(r)?,
            notify: notify::Settings::from_env(r)?,
            webhooks: webhooks::Settings::from_env(r)?,
            fhir: fhir::Settings::from_env(r)?,
            retention: retention::Settings::from_env(r)?,
        })
    }

    /// True when the service runs alone: SQLite and no Redis (dev mode).
    pub fn single_process(&self) -> bool {
        self.db.target.is_sqlite() && self.redis.url.is_none()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::{BTreeSet, HashMap};

    use super::*;

    /// The configuration of exactly `vars`.
    pub(crate) fn config(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::from_lookup(|k| map.get(k).cloned())
    }

    /// The variables a load with nothing set reads, with the file that read each: every
    /// variable (none depends on another's value to be read at all).
    fn reads() -> Vec<(&'static str, &'static str)> {
        let mut r = Reader::new(|_| None);
        let loaded = Config::from_reader(&mut r);
        assert!(loaded.is_ok(), "the defaults load: {:?}", loaded.err());
        r.read().to_vec()
    }

    /// The variables a load reads.
    fn variables_read() -> Vec<&'static str> {
        reads().into_iter().map(|(var, _)| var).collect()
    }

    #[test]
    fn defaults_are_single_process_sqlite() -> Result<(), ConfigError> {
        let c = config(&[])?;
        assert!(c.single_process());
        assert_eq!(c.http.bind_addr.to_string(), "127.0.0.1:8080");
        assert_eq!(c.guard.rate_limit, 5);
        assert_eq!(c.http.limits.max_body_bytes, 262_144);
        Ok(())
    }

    #[test]
    fn postgres_without_secret_is_refused() {
        let err = config(&[("DATABASE_URL", "postgres://x@localhost/db")]).unwrap_err();
        assert_eq!(err.var, "JWT_SECRET");
        let issuers = r#"[{"issuer":"https://idp.example","audience":"clinic"}]"#;
        let with_providers = config(&[("DATABASE_URL", "postgres://x@localhost/db"), ("AUTH_ISSUERS", issuers)]);
        assert!(with_providers.is_ok_and(|c| c.auth.jwt_secret.is_none()), "providers make JWT_SECRET optional");
        assert_eq!(config(&[("AUTH_ISSUERS", "[{}]")]).unwrap_err().var, "AUTH_ISSUERS");
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
    fn each_variable_is_read_once_by_one_module() {
        let mut by_var: HashMap<&str, Vec<&str>> = HashMap::new();
        for (var, file) in reads() {
            by_var.entry(var).or_default().push(file);
        }
        let twice: BTreeSet<_> = by_var.iter().filter(|(_, files)| files.len() > 1).collect();
        assert!(twice.is_empty(), "read more than once (by these files): {twice:?}");
        // The modules read their own: the composition reads only what several of them share.
        let composition: BTreeSet<_> =
            by_var.iter().filter(|(_, files)| files[0].ends_with("config.rs")).map(|(var, _)| *var).collect();
        assert_eq!(composition, BTreeSet::from(["DATA_DIR", "REDIS_KEY_PREFIX", "REDIS_URL"]));
    }

    #[test]
    fn the_readme_lists_exactly_the_variables_read() {
        let readme = include_str!("../README.md");
        let section = readme.split("\n## Configuration\n").nth(1).expect("a Configuration section");
        let section = section.split("\n## ").next().unwrap_or_default();
        let mut listed = BTreeSet::new();
        for row in section.lines().filter(|l| l.starts_with("| `")) {
            let first_cell = row.split('|').nth(1).unwrap_or_default();
            for name in first_cell.split('`').skip(1).step_by(2) {
                assert!(listed.insert(name.to_owned()), "{name} has two rows");
            }
        }
        let read: BTreeSet<String> = variables_read().into_iter().map(str::to_owned).collect();
        let unlisted: Vec<_> = read.difference(&listed).collect();
        let unread: Vec<_> = listed.difference(&read).collect();
        assert!(unlisted.is_empty() && unread.is_empty(), "not in the README: {unlisted:?}; never read: {unread:?}");
    }

    #[test]
    fn each_variable_is_named_once_in_the_sources() {
        fn sources(dir: &std::path::Path, out: &mut Vec<(PathBuf, String)>) {
            for entry in std::fs::read_dir(dir).expect("src/ readable").flatten() {
                let path = entry.path();
                if path.is_dir() {
                    sources(&path, out);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let text = std::fs::read_to_string(&path).expect("a source file");
                    // Unit tests set variables by name as they please: only the code counts.
                    let code = ["#[cfg(test)]\nmod tests", "#[cfg(test)]\npub(crate) mod tests"]
                        .iter()
                        .filter_map(|marker| text.find(marker))
                        .min()
                        .map_or(text.as_str(), |end| &text[..end]);
                    out.push((path.clone(), code.to_owned()));
                }
            }
        }
        let mut files = Vec::new();
        sources(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
        for var in variables_read() {
            let literal = format!("\"{var}\"");
            let places: Vec<_> = files.iter().filter(|(_, code)| code.contains(&literal)).map(|(p, _)| p).collect();
            let count: usize = files.iter().map(|(_, code)| code.matches(&literal).count()).sum();
            assert_eq!(count, 1, "{var} is named {count} times, in {places:?}");
        }
    }
}
