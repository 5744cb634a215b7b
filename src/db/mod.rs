//! Persistence: connecting to PostgreSQL or SQLite, migrating, and the queries of each table.
//!
//! Every function here takes `&impl ConnectionTrait`, so the booking layer decides what runs
//! inside one transaction. Nothing above this module writes SQL, nor asks which database it
//! talks to: where the two differ, one call here does the right thing on each ([`seats::take`]
//! books in one statement on PostgreSQL and in a transaction on SQLite, [`CoalescedReads`]
//! coalesces the hot reads on PostgreSQL only), or a capability says what a caller may rely on
//! ([`Db::skips_locked_rows`]).
//!
//! Writes go through [`Db::begin_write`] (a transaction) or after [`Db::writing`] (a single
//! statement): on SQLite these serialize the writers of the process on a fair in-process gate
//! per file, so they never depend on SQLite's polling busy wait (see `write.rs`).
//!
//! ## Queue claims
//!
//! The queues (outbox, patient messages, webhook deliveries, due holds) are claimed on
//! PostgreSQL as `… WHERE id = ANY(ARRAY(SELECT id … LIMIT n FOR UPDATE SKIP LOCKED))`, never
//! `WHERE id IN (SELECT …)`. The planner may turn `IN` into a semi join: with a hash it reads
//! the whole table (sent messages included) at every claim, and with the nested loop it picks
//! for a table it believes empty (the first minute after a deploy, before autovacuum has
//! counted its rows) it runs the locking subquery again for every row, quadratic in the
//! backlog (150 ms a claim, queues 20-30 s behind in the load test). `ARRAY(…)` runs once and
//! the rows are found by key. The delivery workers' pool and the relay plan these statements
//! afresh at each run (`plan_cache_mode = force_custom_plan`): a plan cached while the queue was
//! empty would scan it. A status named by a partial index's predicate (`WHERE status = 'HELD'`)
//! is written into the statement, not bound: a generic plan can use such an index only when the
//! statement itself proves the predicate (the hold expiry read the whole appointment table at
//! every pass while its status was a parameter).

#[macro_use]
mod rows;
pub mod appointments;
pub mod book_pg;
pub mod coalesced;
pub mod contacts;
pub mod doctors;
pub mod entity;
pub mod failure;
pub mod fhir;
pub mod find;
mod hot;
pub mod hours;
pub mod identities;
pub mod messages;
pub mod outbox;
pub mod seats;
pub mod settings;
pub mod slots;
pub mod waitlist;
mod write;

pub use coalesced::CoalescedReads;
pub use failure::FailureClass;
pub use settings::{redact_url, DatabaseTarget, Settings};
pub use write::{WriteTransaction, Writing};
pub mod webhooks;

use std::{
    future::Future,
    str::FromStr,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use migration::MigratorTrait;
use sea_orm::{DatabaseConnection, DbBackend, DbErr, SqlxPostgresConnector, SqlxSqliteConnector};
use sqlx::{
    postgres::{PgConnectOptions, PgPoolOptions},
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous},
};

/// Failure of the persistence layer. What it means to a caller is its [`StoreError::class`]
/// (see `failure.rs`), which each edge maps once.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database refused or failed a statement.
    #[error("database error: {0}")]
    Db(DbErr),
    /// The connection could not be made.
    #[error("cannot connect to the database: {0}")]
    Connect(sqlx::Error),
    /// A row broke an invariant the code relies on (a bug or a hand-edited database).
    #[error("inconsistent data: {0}")]
    Inconsistent(String),
    /// A request's write found no turn within its wait: the SQLite file stayed locked, by a
    /// writer of this process that waits longer (a background job) or by another process.
    #[error("no turn to write within {0:?}: the database is busy")]
    Busy(Duration),
    /// The operation's wait on the database ran past `DB_UNAVAILABLE_TIMEOUT_MS`, or no primary
    /// answered: its outcome may be unknown.
    #[error("the database is unavailable: {0}")]
    Unavailable(String),
    /// A failure shared by every request a batched read answered (see `coalesced.rs`), kept as
    /// it was so that its class survives.
    #[error(transparent)]
    Shared(Arc<StoreError>),
}

impl From<DbErr> for StoreError {
    fn from(err: DbErr) -> Self {
        if failure::of_db_err(&err) == FailureClass::Unavailable && !matches!(err, DbErr::ConnectionAcquire(_)) {
            failure::note_unavailable();
        }
        Self::Db(err)
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(err: sqlx::Error) -> Self {
        if failure::of_sqlx(&err) == FailureClass::Unavailable && !matches!(err, sqlx::Error::PoolTimedOut) {
            failure::note_unavailable();
        }
        Self::Connect(err)
    }
}

impl StoreError {
    /// What the failure means to the caller: the one policy of `failure.rs`.
    pub fn class(&self) -> FailureClass {
        match self {
            Self::Db(e) => failure::of_db_err(e),
            Self::Connect(e) => failure::of_sqlx(e),
            Self::Inconsistent(_) => FailureClass::Internal,
            Self::Busy(_) => FailureClass::Overloaded,
            Self::Unavailable(_) => FailureClass::Unavailable,
            Self::Shared(e) => e.class(),
        }
    }

    /// Whether PostgreSQL aborted the statement to break a deadlock or a serialization conflict
    /// (`40P01`, `40001`): running the whole transaction again is safe and likely to succeed.
    pub fn is_transient(&self) -> bool {
        let sqlx_error = match self {
            Self::Db(DbErr::Exec(sea_orm::RuntimeErr::SqlxError(e)))
            | Self::Db(DbErr::Query(sea_orm::RuntimeErr::SqlxError(e)))
            | Self::Db(DbErr::Conn(sea_orm::RuntimeErr::SqlxError(e))) => e.as_ref(),
            Self::Connect(e) => e,
            Self::Shared(e) => return e.is_transient(),
            _ => return false,
        };
        let code = sqlx_error.as_database_error().and_then(|d| d.code());
        matches!(code.as_deref(), Some("40P01" | "40001"))
    }

    /// Whether the database was too busy to take the statement ([`FailureClass::Overloaded`]:
    /// SQLite's `SQLITE_BUSY`, a statement or lock timeout). Retrying later is safe: nothing
    /// was written.
    pub fn is_busy(&self) -> bool {
        self.class() == FailureClass::Overloaded
    }

    /// Whether no primary answered ([`FailureClass::Unavailable`]).
    pub fn is_unavailable(&self) -> bool {
        self.class() == FailureClass::Unavailable
    }
}

/// Settings of the connection pool.
#[derive(Clone, Debug)]
pub struct PoolSettings {
    /// Most connections open at once.
    pub max_connections: u32,
    /// Longest wait for a free connection; on PostgreSQL also the bound of every operation
    /// [`Db::bounded`] runs (`DB_UNAVAILABLE_TIMEOUT_MS`).
    pub acquire_timeout: Duration,
    /// PostgreSQL `statement_timeout`: no statement holds a connection longer.
    pub statement_timeout: Duration,
    /// Dedicated PostgreSQL connections for the booking statement and the coalesced reads,
    /// besides the pool (0: those use the pool too).
    pub hot_connections: u32,
}

/// A connection pool plus a count of the statements it ran (for `/metrics` and for tests
/// that prove a page costs a constant number of queries).
#[derive(Clone, Debug)]
pub struct Db {
    conn: DatabaseConnection,
    statements: Arc<AtomicU64>,
    /// The dedicated connections of the hottest statements (PostgreSQL, when configured).
    hot: Option<Arc<hot::HotConnections>>,
    /// SQLite: the write gate of the file, shared by every pool of the process on it.
    gate: Option<write::Gate>,
    /// SQLite: how to open the connection of its own that [`Db::migrate`] uses.
    sqlite: Option<SqliteConnectOptions>,
    /// SQLite, once [`Db::with_request_wait`] set it: the pool of the writes a request waits
    /// for ([`Db::begin_request_write`]), whose busy timeout is that wait, and the wait.
    requests: Option<(DatabaseConnection, Duration)>,
    /// PostgreSQL: how its connections were opened (for [`Db::relaxed_commit`]), and the
    /// acquire timeout of its pool.
    pg: Option<(PgConnectOptions, Duration)>,
}

impl Db {
    /// Opens a pool on `target`. SQLite runs in WAL mode (readers never wait for the writer),
    /// with a write gate per file for this process's writers and a busy timeout for other
    /// processes' (see [`Db::begin_write`]).
    pub async fn connect(target: &DatabaseTarget, settings: &PoolSettings) -> Result<Self, StoreError> {
        let mut hot = None;
        let mut gate = None;
        let mut sqlite = None;
        let mut pg = None;
        let mut conn = match target {
            DatabaseTarget::Postgres(url) => {
                let timeout_ms = settings.statement_timeout.as_millis().to_string();
                let options = PgConnectOptions::from_str(url)?
                    .options([("statement_timeout", timeout_ms.as_str())])
                    .application_name("clinic-booking");
                // No ping before each acquire (sqlx's default): it is one more round trip per
                // statement, about a tenth of the CPU of a slot list or a rejected booking. A
                // connection that broke while idle fails its statement instead, and the pool
                // drops it.
                let pool = pg_pool_options(settings.max_connections, settings.acquire_timeout)
                    .connect_with(options.clone())
                    .await?;
                if settings.hot_connections > 0 {
                    hot = Some(Arc::new(hot::HotConnections::new(options.clone(), settings.hot_connections)));
                }
                pg = Some((options, settings.acquire_timeout));
                SqlxPostgresConnector::from_sqlx_postgres_pool(pool)
            }
            DatabaseTarget::Sqlite(path) => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir).map_err(|e| StoreError::Connect(sqlx::Error::Io(e)))?;
                }
                let options = SqliteConnectOptions::new()
                    .filename(path)
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Normal)
                    .busy_timeout(Duration::from_secs(30))
                    .foreign_keys(true);
                // Opens (or creates) the file now, so that a bad path fails at start-up.
                SqlitePoolOptions::new().max_connections(1).connect_with(options.clone()).await?.close().await;
                // No connection of the pool is opened before the migrations ran (see
                // `Db::migrate`). No ping before each acquire: an embedded connection cannot
                // break while idle, and the ping is one more hop to the connection's thread,
                // inside the write gate too.
                let pool = SqlitePoolOptions::new()
                    .max_connections(settings.max_connections.min(16))
                    .test_before_acquire(false)
                    .acquire_timeout(settings.acquire_timeout.max(Duration::from_secs(30)))
                    .connect_lazy_with(options.clone());
                gate = Some(write::gate_for(path));
                sqlite = Some(options);
                SqlxSqliteConnector::from_sqlx_sqlite_pool(pool)
            }
        };
        let statements = Arc::new(AtomicU64::new(0));
        count_into(&mut conn, &statements);
        Ok(Self { conn, statements, hot, gate, sqlite, requests: None, pg })
    }

    /// The same database, whose writes for requests ([`Db::begin_request_write`]) wait at most
    /// `wait` for SQLite's write lock (their turn at the write gate included), where the others
    /// wait the busy timeout (30 s). On PostgreSQL, where row locks order the writers, nothing
    /// changes.
    ///
    /// Why: another process holding the file's lock (a `clinic-booking migrate`, a backup, an
    /// operator's `sqlite3` shell) made a booking wait the whole busy timeout, and with it every
    /// writer of this process queued at the gate behind it. A request should rather answer
    /// `OVERLOADED` within its queue timeout; background jobs keep waiting, as they lose nothing.
    /// The busy timeout is a setting of each SQLite connection, so these writes get a pool of
    /// their own: two connections, as the gate lets one such write run at a time.
    pub fn with_request_wait(mut self, wait: Duration) -> Self {
        if let Some(options) = &self.sqlite {
            let pool = SqlitePoolOptions::new()
                .max_connections(2)
                .test_before_acquire(false)
                .acquire_timeout(wait)
                .connect_lazy_with(options.clone().busy_timeout(wait));
            let mut conn = SqlxSqliteConnector::from_sqlx_sqlite_pool(pool);
            count_into(&mut conn, &self.statements);
            self.requests = Some((conn, wait));
        }
        self
    }

    /// The same database through a pool of `max_connections` whose transactions commit without
    /// waiting for the WAL flush (`synchronous_commit = off`), sharing this one's statement
    /// count; SQLite: this very pool.
    ///
    /// For the delivery workers' claims and outcomes only. Such a commit is visible at once and
    /// durable within a fraction of a second; only a crash of PostgreSQL itself in between can
    /// undo it, and undoing a claim or an outcome makes the message go again (the at-least-once
    /// repeat the workers already allow for, with the same id), never lose one. Under load it
    /// takes the workers' commits out of the queue for the WAL flush that bookings wait in.
    /// Its statements are planned at each run (`plan_cache_mode = force_custom_plan`, see
    /// "Queue claims" above): they are few, large, and on queues whose size changes by the second.
    pub fn relaxed_commit(&self, max_connections: u32) -> Self {
        let Some((options, acquire_timeout)) = &self.pg else {
            return self.clone();
        };
        let pool = pg_pool_options(max_connections.max(1), *acquire_timeout).connect_lazy_with(
            options.clone().options([("synchronous_commit", "off"), ("plan_cache_mode", "force_custom_plan")]),
        );
        let mut conn = SqlxPostgresConnector::from_sqlx_postgres_pool(pool);
        count_into(&mut conn, &self.statements);
        Self {
            conn,
            statements: Arc::clone(&self.statements),
            hot: None,
            gate: None,
            sqlite: None,
            requests: None,
            pg: self.pg.clone(),
        }
    }

    /// The connection pool, for queries and transactions.
    pub fn conn(&self) -> &DatabaseConnection {
        &self.conn
    }

    /// Which SQL dialect the pool speaks.
    pub fn backend(&self) -> DbBackend {
        self.conn.get_database_backend()
    }

    /// Whether a claim of queued rows (see "Queue claims") skips the rows other transactions
    /// hold locked, so that claims running at once take disjoint batches (PostgreSQL). SQLite
    /// has one writer: a second claim at once only waits for the first.
    pub fn skips_locked_rows(&self) -> bool {
        self.backend() == DbBackend::Postgres
    }

    /// Applies every pending migration; call it before any other statement.
    ///
    /// On SQLite the migrations run on a connection of their own, closed after them, and the
    /// pool opens its connections only afterwards. A SQLite connection keeps the schema it read
    /// and does not re-read it for every error: one opened while the migrations ran (the pool
    /// opens another when the previous statement's connection is not back yet) saw
    /// `time_slot` before its unique index, and `publishSchedule`'s `INSERT … ON CONFLICT
    /// (doctor_id, start_at)` then failed on it ("ON CONFLICT clause does not match any PRIMARY
    /// KEY or UNIQUE constraint"), once in a while, more often under load.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        let _writing = self.writing().await;
        match &self.sqlite {
            Some(options) => {
                let pool = SqlitePoolOptions::new().max_connections(1).connect_with(options.clone()).await?;
                let own = SqlxSqliteConnector::from_sqlx_sqlite_pool(pool);
                let migrated = migration::Migrator::up(&own, None).await;
                let _ = own.close().await;
                migrated?;
            }
            None => migration::Migrator::up(&self.conn, None).await?,
        }
        Ok(())
    }

    /// Runs `SELECT 1`, for readiness.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.conn.ping().await?;
        Ok(())
    }

    /// The longest wait of one operation on PostgreSQL (`DB_UNAVAILABLE_TIMEOUT_MS`); `None` on
    /// SQLite, whose waits are the write gate's and the busy timeout's.
    pub fn unavailable_timeout(&self) -> Option<Duration> {
        self.pg.as_ref().map(|(_, limit)| *limit)
    }

    /// Runs `op`, on PostgreSQL within [`Db::unavailable_timeout`]: past it the operation is
    /// cut (its future dropped, which drops a hot connection it held) and answers
    /// [`StoreError::Unavailable`]. A commit waiting for the synchronous standby ignores
    /// `statement_timeout`, and sqlx sends no cancel: without this a booking could wait
    /// forever. The cut is noted as a failure (`failure.rs`), so the pool closes the cut
    /// connections instead of reusing them.
    pub async fn bounded<T, E, F>(&self, op: F) -> Result<T, E>
    where
        F: Future<Output = Result<T, E>>,
        E: From<StoreError>,
    {
        self.within(op).await.unwrap_or_else(|limit| Err(StoreError::Unavailable(cut_message(limit)).into()))
    }

    /// Runs `op` within [`Db::unavailable_timeout`] (unbounded on SQLite); past it, the cut is
    /// noted as a failure (`failure.rs`) and the limit returned, for the caller to word.
    async fn within<T>(&self, op: impl Future<Output = T>) -> Result<T, Duration> {
        let Some(limit) = self.unavailable_timeout() else {
            return Ok(op.await);
        };
        tokio::time::timeout(limit, op).await.map_err(|_| {
            failure::note_unavailable();
            limit
        })
    }

    /// PostgreSQL: makes sure every change committed before now (a row a replay is about to be
    /// answered from) is held by the synchronous standby, by committing a transaction of its
    /// own that writes WAL (a transactional logical message, which touches no table, so that
    /// concurrent replays do not queue on a row): its commit record comes after that row's in
    /// the WAL, and the commit returns only once the standby has it. A transaction that only
    /// takes a transaction id (`txid_current()`) would not do: PostgreSQL neither flushes nor
    /// waits for the standby at the commit of a transaction that wrote no other WAL. Bounded
    /// like any operation. A row committed locally whose commit was cut while waiting for the
    /// standby (its client gone) is thereby never answered as done before the standby holds
    /// it. SQLite: nothing to do.
    pub async fn make_durable(&self) -> Result<(), StoreError> {
        let Ok(pool) = self.pg_pool() else {
            return Ok(());
        };
        self.bounded(async {
            let mut tx = pool.begin().await?;
            sqlx::query("SELECT pg_logical_emit_message(true, 'clinic-booking', 'durable')").execute(&mut *tx).await?;
            tx.commit().await?;
            Ok::<_, StoreError>(())
        })
        .await
    }

    /// For readiness: whether a primary answers, bounded like any operation. On PostgreSQL the
    /// server must be writable (not in recovery, not read-only): a demoted primary or a standby
    /// is [`StoreError::Unavailable`], and noted as a failure so that the pool drops the
    /// connections to it. SQLite: `SELECT 1`.
    pub async fn check_primary(&self) -> Result<(), StoreError> {
        let Ok(pool) = self.pg_pool() else {
            return self.ping().await;
        };
        self.bounded(async {
            let writable: bool = sqlx::query_scalar(
                "SELECT NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off'",
            )
            .fetch_one(pool)
            .await?;
            if writable {
                Ok(())
            } else {
                failure::note_unavailable();
                Err(StoreError::Unavailable("the server is read-only or in recovery".into()))
            }
        })
        .await
    }

    /// Runs one statement on PostgreSQL (whose `operation`, `SELECT`, `UPDATE`…, names its span
    /// in traces) and returns its rows, counted and timed like every other statement: on the dedicated connections when there are some, else on the pool.
    /// For the hottest statements: decoding rows by position cost a fraction of sea-orm's
    /// decoding by column name (which tries several timestamp types per value).
    pub(crate) async fn pg_fetch_all<'q>(
        &self,
        operation: &'static str,
        query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> Result<Vec<sqlx::postgres::PgRow>, DbErr> {
        let pool = self.pg_pool()?;
        let started = std::time::Instant::now();
        let result = self
            .cut_after(async {
                match &self.hot {
                    Some(hot) => hot.fetch_all(query).await,
                    None => query.fetch_all(pool).await,
                }
            })
            .await;
        count_statement(
            &self.statements,
            "postgresql",
            Operation::Named(operation),
            started.elapsed(),
            result.is_err(),
        );
        result.map_err(|e| DbErr::Query(sea_orm::RuntimeErr::SqlxError(Arc::new(e))))
    }

    /// [`Db::pg_fetch_all`] on the main pool always: for reads that should not take the
    /// dedicated connections of the booking statement (the slot search).
    pub(crate) async fn pg_fetch_pooled<'q>(
        &self,
        operation: &'static str,
        query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> Result<Vec<sqlx::postgres::PgRow>, DbErr> {
        let pool = self.pg_pool()?;
        let started = std::time::Instant::now();
        let result = self.cut_after(query.fetch_all(pool)).await;
        count_statement(
            &self.statements,
            "postgresql",
            Operation::Named(operation),
            started.elapsed(),
            result.is_err(),
        );
        result.map_err(|e| DbErr::Query(sea_orm::RuntimeErr::SqlxError(Arc::new(e))))
    }

    /// `statement` within [`Db::unavailable_timeout`]; past it, an I/O error that says so
    /// (classed unavailable), the cut noted as in [`Db::bounded`].
    async fn cut_after<T>(&self, statement: impl Future<Output = Result<T, sqlx::Error>>) -> Result<T, sqlx::Error> {
        self.within(statement).await.unwrap_or_else(|limit| {
            Err(sqlx::Error::Io(std::io::Error::new(std::io::ErrorKind::TimedOut, cut_message(limit))))
        })
    }

    /// The PostgreSQL pool beneath sea-orm, for statements that need sqlx itself.
    pub(crate) fn pg_pool(&self) -> Result<&sqlx::PgPool, DbErr> {
        match self.backend() {
            DbBackend::Postgres => Ok(self.conn.get_postgres_connection_pool()),
            _ => Err(DbErr::Custom("a PostgreSQL statement was sent to another database".into())),
        }
    }

    /// Statements run so far through this pool.
    pub fn statements_executed(&self) -> u64 {
        self.statements.load(Ordering::Relaxed)
    }

    /// Connections open and idle, for `/metrics`.
    pub fn pool_state(&self) -> (u32, usize) {
        match self.backend() {
            DbBackend::Postgres => {
                let pool = self.conn.get_postgres_connection_pool();
                (pool.size(), pool.num_idle())
            }
            DbBackend::Sqlite => {
                let pool = self.conn.get_sqlite_connection_pool();
                (pool.size(), pool.num_idle())
            }
            _ => (0, 0),
        }
    }

    /// Closes the pool.
    pub async fn close(self) {
        let _ = self.conn.close().await;
    }
}

/// Why an operation was cut.
fn cut_message(limit: Duration) -> String {
    format!("no answer within {} ms (DB_UNAVAILABLE_TIMEOUT_MS)", limit.as_millis())
}

/// The options of every PostgreSQL pool: at most `max` connections, a wait of `acquire` for
/// one (`DB_UNAVAILABLE_TIMEOUT_MS`), and no connection opened before the latest failure
/// classed unavailable handed out or taken back (closed instead: it may lead to a dead or
/// demoted server, or still wait for the answer of a statement cut midway; see `failure.rs`).
fn pg_pool_options(max: u32, acquire: Duration) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(acquire)
        .test_before_acquire(false)
        .before_acquire(|_, meta| Box::pin(async move { Ok(!failure::opened_before_failure(meta.age)) }))
        .after_release(|_, meta| Box::pin(async move { Ok(!failure::opened_before_failure(meta.age)) }))
}

/// Counts every statement `conn` runs in `statements` (and in `/metrics`, and in the trace of
/// the request it serves).
fn count_into(conn: &mut DatabaseConnection, statements: &Arc<AtomicU64>) {
    let counter = Arc::clone(statements);
    let system = system_name(conn.get_database_backend());
    conn.set_metric_callback(move |info| {
        count_statement(&counter, system, Operation::Sql(&info.statement.sql), info.elapsed, info.failed);
    });
}

pub(crate) use crate::telemetry::traces::Operation;

/// The OpenTelemetry `db.system.name` of a backend.
fn system_name(backend: DbBackend) -> &'static str {
    match backend {
        DbBackend::Postgres => "postgresql",
        DbBackend::Sqlite => "sqlite",
        _ => "other_sql",
    }
}

/// Counts a statement run, for tests, records its time in `db_statement_seconds`, and makes it a
/// span of the trace it ran in (when that trace is recorded; the span names the operation only,
/// never the statement's values).
fn count_statement(
    counter: &AtomicU64,
    system: &'static str,
    operation: Operation<'_>,
    elapsed: Duration,
    failed: bool,
) {
    counter.fetch_add(1, Ordering::Relaxed);
    metrics::histogram!("db_statement_seconds", "failed" => if failed { "true" } else { "false" })
        .record(elapsed.as_secs_f64());
    crate::telemetry::traces::statement(system, operation, elapsed, failed);
}

/// The condition on `id` that claims the rows `due` selects (`SELECT id … LIMIT n`): on
/// PostgreSQL locked `SKIP LOCKED` and taken as one array, found by key (see "Queue claims"
/// above); on SQLite, whose single writer needs no lock, the plain subquery.
fn claimed_ids(backend: DbBackend, due: &str) -> String {
    if backend == DbBackend::Postgres {
        format!("= ANY(ARRAY({due} FOR UPDATE SKIP LOCKED))")
    } else {
        format!("IN ({due})")
    }
}

/// Truncates to microseconds, the precision both databases store, so a value read back
/// compares equal to the one written.
pub fn micros(t: chrono::DateTime<chrono::Utc>) -> chrono::DateTime<chrono::Utc> {
    use chrono::{DurationRound, TimeDelta};
    t.duration_trunc(TimeDelta::microseconds(1)).unwrap_or(t)
}

/// Whether `err` is the unique violation of the constraint `name` (PostgreSQL names it;
/// SQLite names its columns, given as `columns`, e.g. `appointment.idempotency_key`).
pub fn is_unique_violation(err: &DbErr, name: &str, columns: &str) -> bool {
    match err.sql_err() {
        Some(sea_orm::SqlErr::UniqueConstraintViolation(msg)) => msg.contains(name) || msg.contains(columns),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{doctors, slots, Db, PoolSettings};
    use crate::db::DatabaseTarget;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_pool_connections_open_only_after_the_migrations() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let settings = PoolSettings {
            max_connections: 8,
            acquire_timeout: Duration::from_secs(30),
            statement_timeout: Duration::from_secs(30),
            hot_connections: 0,
        };
        let db = Db::connect(&DatabaseTarget::Sqlite(dir.path().join("m.sqlite3")), &settings).await?;
        assert_eq!(db.pool_state().0, 0, "no pool connection is open before the migrations");
        db.migrate().await?;
        assert_eq!(db.pool_state().0, 0, "the migrations ran on a connection of their own");
        // Every pool connection now reads the whole schema: the upsert that needs the unique
        // index works on each of the ones opened at once.
        let doctor = doctors::insert(db.conn(), "Dr Test", None, "UTC").await?;
        let start = chrono::Utc::now() + chrono::TimeDelta::days(1);
        let upserts = (0..8i64).map(|i| {
            let db = db.clone();
            let at = super::micros(start + chrono::TimeDelta::minutes(i % 4));
            async move {
                let slot = slots::NewSlot { start_at: at, end_at: at + chrono::TimeDelta::minutes(1) };
                slots::insert_skipping_existing(db.conn(), doctor.id, 1, &[slot]).await
            }
        });
        let created: u64 = futures_util::future::try_join_all(upserts).await?.into_iter().sum();
        assert_eq!(created, 4, "four distinct starts, each created once");
        Ok(())
    }
}
