//! The database's settings: where the data lives (`DATABASE_URL`) and the pool's bounds.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use super::PoolSettings;
use crate::settings::{ConfigError, Reader};

/// The database's settings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The database (`DATABASE_URL`; default: the SQLite file `clinic-booking.sqlite3` in
    /// `DATA_DIR`).
    pub target: DatabaseTarget,
    /// Connections of the main pool (`DB_POOL_MAX`, default 32); the hot statements have their own.
    pub pool_max: u32,
    /// PostgreSQL `statement_timeout` of the pool (`DB_STATEMENT_TIMEOUT_MS`, default 5000).
    pub statement_timeout: Duration,
    /// The longest wait of any operation on PostgreSQL, a commit waiting for the synchronous
    /// standby and the wait for a pool connection included (`DB_UNAVAILABLE_TIMEOUT_MS`,
    /// default 5000): past it the operation answers `UNAVAILABLE` and its connection is closed.
    pub unavailable_timeout: Duration,
}

impl Settings {
    /// Reads them; the SQLite file's default place is in `data_dir`.
    pub fn from_env(r: &mut Reader, data_dir: &Path) -> Result<Self, ConfigError> {
        let target = r
            .with("DATABASE_URL", DatabaseTarget::parse)?
            .unwrap_or_else(|| DatabaseTarget::Sqlite(data_dir.join("clinic-booking.sqlite3")));
        Ok(Self {
            target,
            pool_max: r.number("DB_POOL_MAX", 32, 2.., "a number of connections")?,
            statement_timeout: r.millis("DB_STATEMENT_TIMEOUT_MS", 5000, 100.., "a number of milliseconds")?,
            unavailable_timeout: r.millis("DB_UNAVAILABLE_TIMEOUT_MS", 5000, 100.., "a number of milliseconds")?,
        })
    }

    /// The main pool of a serving instance, with `hot_connections` of its own for the hot
    /// statements.
    pub fn pool(&self, hot_connections: u32) -> PoolSettings {
        PoolSettings {
            max_connections: self.pool_max,
            acquire_timeout: self.unavailable_timeout,
            statement_timeout: self.statement_timeout,
            hot_connections,
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_in_messages_carry_no_password() {
        assert_eq!(redact_url("postgres://nobody:s3cret@127.0.0.1:5432/test"), "postgres://nobody@127.0.0.1:5432/test");
        assert_eq!(redact_url("postgres://u:p@ss@h/db?sslmode=require"), "postgres://u@h/db?sslmode=require");
        assert_eq!(redact_url("postgres://h/db?password=x&application_name=a"), "postgres://h/db?application_name=a");
        assert_eq!(redact_url("redis://:pw@127.0.0.1:6379"), "redis://@127.0.0.1:6379");
        assert_eq!(redact_url("postgres://postgres@127.0.0.1:5432/test"), "postgres://postgres@127.0.0.1:5432/test");
    }

    #[test]
    fn sqlite_urls_name_a_file() {
        assert_eq!(DatabaseTarget::parse("sqlite://a/b.db"), Ok(DatabaseTarget::Sqlite("a/b.db".into())));
        assert_eq!(DatabaseTarget::parse("sqlite:x.db?mode=rwc"), Ok(DatabaseTarget::Sqlite("x.db".into())));
        assert!(DatabaseTarget::parse("sqlite::memory:").is_err());
    }
}
