//! Dedicated PostgreSQL connections for the hottest single statements: the booking statement
//! and the coalesced reads. Bookings thereby never take a connection from the main pool that
//! reads use, and a connection goes back without the ping sqlx's pool sends on every return.
//!
//! That ping (`PoolConnection::return_to_pool`, unconditional in sqlx 0.8 and 0.9) is a round trip per
//! statement for both sides: about a twelfth of the server's CPU on the booking success path,
//! plus the database's share. sqlx pings because a statement whose future was dropped midway
//! may leave its connection mid-conversation; here such a connection is closed instead of being
//! returned, and so is one that failed for any reason other than the database refusing the
//! statement (a refused statement leaves the connection ready for the next one), and one the
//! failure policy condemns (`failure.rs`): a refusal classed unavailable (a read-only or
//! shutting-down server), or any connection opened before the latest such failure, which may
//! lead to a dead or demoted primary.

use std::{
    sync::{Mutex, MutexGuard, PoisonError},
    time::Instant,
};

use sqlx::{
    postgres::{PgArguments, PgConnectOptions, PgRow},
    query::Query,
    Connection, PgConnection, Postgres,
};
use tokio::sync::Semaphore;

use super::failure::{self, FailureClass};

/// A small pool of dedicated connections, opened on demand and kept open.
pub(crate) struct HotConnections {
    options: PgConnectOptions,
    /// One permit per connection that may be open.
    permits: Semaphore,
    /// The idle connections, each with when it was opened.
    idle: Mutex<Vec<(PgConnection, Instant)>>,
}

impl std::fmt::Debug for HotConnections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HotConnections").field("idle", &self.idle().len()).finish_non_exhaustive()
    }
}

impl HotConnections {
    /// Up to `size` connections made with `options`.
    pub(crate) fn new(options: PgConnectOptions, size: u32) -> Self {
        Self { options, permits: Semaphore::new(size as usize), idle: Mutex::new(Vec::new()) }
    }

    fn idle(&self) -> MutexGuard<'_, Vec<(PgConnection, Instant)>> {
        // A Vec of connections stays consistent whatever a panicking holder did.
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs one statement on a dedicated connection and returns its rows. The connection goes
    /// back only when the statement finished cleanly or the database refused it; when this
    /// future is dropped midway (a cancelled request) or the connection itself failed, it is
    /// dropped here, which closes it.
    pub(crate) async fn fetch_all(&self, query: Query<'_, Postgres, PgArguments>) -> Result<Vec<PgRow>, sqlx::Error> {
        let _permit = self.permits.acquire().await.map_err(|_| sqlx::Error::PoolClosed)?;
        let idle = self.idle().pop().filter(|(_, opened)| !failure::opened_before_failure(opened.elapsed()));
        let (mut conn, opened) = match idle {
            Some(idle) => idle,
            None => (PgConnection::connect_with(&self.options).await?, Instant::now()),
        };
        let result = query.fetch_all(&mut conn).await;
        let reusable = match &result {
            Ok(_) => true,
            Err(e @ sqlx::Error::Database(_)) => failure::of_sqlx(e) != FailureClass::Unavailable,
            Err(_) => false,
        };
        if reusable {
            self.idle().push((conn, opened));
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use std::{str::FromStr, time::Duration};

    use super::*;

    /// The backend pid of the connection that ran the statement.
    async fn pid(hot: &HotConnections) -> Result<i32, sqlx::Error> {
        use sqlx::Row;
        hot.fetch_all(sqlx::query("SELECT pg_backend_pid()")).await?.first().map_or(Ok(0), |r| r.try_get(0))
    }

    #[tokio::test]
    async fn connections_are_reused_unless_a_statement_was_cut_off() -> Result<(), sqlx::Error> {
        let Some(url) = std::env::var("DATABASE_URL").ok().filter(|u| u.starts_with("postgres")) else {
            return Ok(()); // needs PostgreSQL
        };
        let hot = HotConnections::new(PgConnectOptions::from_str(&url)?, 1);
        let first = pid(&hot).await?;
        assert_eq!(pid(&hot).await?, first, "a clean statement gives its connection back");

        let refused = hot.fetch_all(sqlx::query("SELECT 1 / 0")).await;
        assert!(matches!(refused, Err(sqlx::Error::Database(_))));
        assert_eq!(pid(&hot).await?, first, "a statement the database refused leaves the connection usable");

        let cut = tokio::time::timeout(Duration::from_millis(50), hot.fetch_all(sqlx::query("SELECT pg_sleep(1)")));
        assert!(cut.await.is_err());
        assert_ne!(pid(&hot).await?, first, "a connection left mid-statement is closed, not reused");
        Ok(())
    }
}
