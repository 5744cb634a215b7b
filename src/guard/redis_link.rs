//! The one shared Redis connection of the guards: connected in the background (the service
//! starts and serves while Redis is down), every operation bounded by a short timeout, and
//! every failure counted and logged at most once in a while, never passed on to callers.
//!
//! A circuit breaker keeps an outage cheap: after Redis fails to answer (timeout, refused or
//! dropped connection), operations fail at once for [`OPEN_FOR`] instead of each waiting out
//! the timeout, then the next ones try again. Without it every request of an outage paid the
//! timeout once or twice, and a few hundred requests per second queued up behind it.

use std::{
    future::Future,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, OnceLock,
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

/// Seconds between two warnings about Redis, so an outage does not flood the log.
const WARN_EVERY_SECS: u64 = 10;
/// Pause between two attempts to make the first connection.
const CONNECT_RETRY: Duration = Duration::from_secs(1);
/// How long operations skip Redis after it failed to answer.
const OPEN_FOR: Duration = Duration::from_millis(1000);

/// Why a guard went on without Redis. Internal: it only reaches the log and `/metrics`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GuardError {
    /// No connection has been made yet.
    #[error("not connected yet")]
    NotConnected,
    /// Redis failed to answer a moment ago; not tried again yet.
    #[error("skipped: Redis failed to answer less than a second ago")]
    CircuitOpen,
    /// The operation did not answer within the timeout.
    #[error("timed out")]
    Timeout,
    /// Redis refused or the connection broke.
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
    /// A stored value could not be read (another version wrote it, or a bug).
    #[error("unreadable value")]
    Corrupt,
}

/// A cheaply cloned handle on the shared connection and the key prefix.
#[derive(Clone)]
pub(crate) struct RedisLink {
    inner: Arc<Inner>,
}

struct Inner {
    conn: OnceLock<ConnectionManager>,
    prefix: String,
    timeout: Duration,
    last_warn: AtomicU64,
    /// Until when (ms since the Unix epoch) operations skip Redis; 0 when closed.
    open_until: AtomicU64,
}

impl RedisLink {
    /// Starts connecting to `client` in the background and returns at once. The connection's
    /// own tasks run on `lane` (the booking lane: bookings wait on them).
    pub(crate) fn start(client: redis::Client, prefix: &str, timeout: Duration, lane: &super::lane::Lane) -> Self {
        let link = Self {
            inner: Arc::new(Inner {
                conn: OnceLock::new(),
                prefix: prefix.to_owned(),
                timeout,
                last_warn: AtomicU64::new(0),
                open_until: AtomicU64::new(0),
            }),
        };
        let background = link.clone();
        lane.spawn(async move { background.connect(client).await });
        link
    }

    async fn connect(&self, client: redis::Client) {
        // Connection attempts get more time than one operation: a cold TCP connect plus HELLO.
        let connect_timeout = self.inner.timeout.max(Duration::from_millis(500));
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            .set_response_timeout(Some(self.inner.timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_secs(1));
        loop {
            match tokio::time::timeout(
                connect_timeout * 4,
                ConnectionManager::new_with_config(client.clone(), config.clone()),
            )
            .await
            {
                Ok(Ok(conn)) => {
                    let _ = self.inner.conn.set(conn);
                    tracing::info!("guards connected to Redis");
                    return;
                }
                Ok(Err(e)) => self.failed("connect", &GuardError::Redis(e)),
                Err(_) => self.failed("connect", &GuardError::Timeout),
            }
            tokio::time::sleep(CONNECT_RETRY).await;
        }
    }

    /// `PREFIX:` followed by `rest`: every key the guards write starts with the prefix.
    pub(crate) fn key(&self, rest: std::fmt::Arguments<'_>) -> String {
        format!("{}:{rest}", self.inner.prefix)
    }

    /// Runs one operation on the connection, bounded by the timeout. Failures are counted
    /// (`redis_errors_total{op}`) and logged here; the caller only decides how to go on.
    pub(crate) async fn run<T, F, Fut>(&self, op: &'static str, f: F) -> Result<T, GuardError>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        if now_ms() < self.inner.open_until.load(Ordering::Relaxed) {
            metrics::counter!("redis_errors_total", "op" => op).increment(1);
            return Err(GuardError::CircuitOpen);
        }
        let result = match self.inner.conn.get() {
            None => Err(GuardError::NotConnected),
            Some(conn) => match tokio::time::timeout(self.inner.timeout, f(conn.clone())).await {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(e)) => Err(GuardError::Redis(e)),
                Err(_) => Err(GuardError::Timeout),
            },
        };
        if let Err(e) = &result {
            let unreachable = match e {
                GuardError::Timeout => true,
                GuardError::Redis(e) => e.is_io_error() || e.is_connection_refusal() || e.is_connection_dropped(),
                GuardError::NotConnected | GuardError::CircuitOpen | GuardError::Corrupt => false,
            };
            if unreachable {
                let until = now_ms().saturating_add(u64::try_from(OPEN_FOR.as_millis()).unwrap_or(u64::MAX));
                self.inner.open_until.store(until, Ordering::Relaxed);
            }
            self.failed(op, e);
        }
        result
    }

    /// Counts a failure and warns, at most once per [`WARN_EVERY_SECS`].
    pub(crate) fn failed(&self, op: &'static str, err: &GuardError) {
        metrics::counter!("redis_errors_total", "op" => op).increment(1);
        let now = now_ms() / 1000;
        let last = self.inner.last_warn.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= WARN_EVERY_SECS
            && self.inner.last_warn.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            tracing::warn!(op, error = %err, "Redis unavailable: going on without it (cache, rate limit and \
                 known-full checks fall back; the database still decides every booking)");
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
