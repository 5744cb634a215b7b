//! How SQLite writers wait their turn.
//!
//! SQLite lets one writer at a time change a file. The busy timeout makes a writer that finds
//! the lock taken retry, but only by sleeping and polling (1 ms, 2 ms, 5 ms, … up to 100 ms a
//! try), with no queue: under load some writers keep missing the lock, so their waits grow to
//! seconds, and a write that outwaits the busy timeout fails with `SQLITE_BUSY`. A transaction
//! whose first statement only reads gets `SQLITE_BUSY` at once when it then writes after
//! another connection did, since SQLite cannot wait for a snapshot that is already stale.
//!
//! So every write of this process to one SQLite file first takes that file's write gate: a
//! fair (first come, first served) async mutex shared by every [`Db`] of the process on the
//! file (two instances in one test process share it too). Writers queue in memory, and each
//! finds the lock free when its turn comes; readers never wait (WAL). The gate is taken before
//! a pool connection, so queued writers do not hold connections that readers need.
//! [`Db::begin_write`] gives a transaction that holds the gate until its commit or rollback;
//! [`Db::writing`] holds it for single write statements. On PostgreSQL both are plain: row
//! locks and the database order the writers there.
//!
//! Other processes on the same file (a `clinic-booking migrate`, say) are still ordered by the
//! busy timeout alone; a write that still fails busy answers `OVERLOADED` with
//! `retryAfterSeconds`, never `INTERNAL` (see [`super::StoreError::is_busy`]). The writes of
//! requests that answer `OVERLOADED` rather than wait (bookings, holds, cancels:
//! [`Db::begin_request_write`]) wait for the gate and for that lock no longer than the booking
//! queue timeout; the others wait the whole busy timeout, a background job losing nothing by it.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{Arc, Mutex as StdMutex, OnceLock, Weak},
};

use sea_orm::{
    ConnectionTrait, DatabaseTransaction, DbBackend, DbErr, ExecResult, QueryResult, Statement, TransactionTrait,
};
use tokio::sync::{Mutex, OwnedMutexGuard};

use super::{Db, StoreError};

/// The write gate of one SQLite file.
pub(super) type Gate = Arc<Mutex<()>>;

/// The gate of the SQLite file at `path`, shared by every pool of this process on that file.
pub(super) fn gate_for(path: &Path) -> Gate {
    static GATES: OnceLock<StdMutex<HashMap<PathBuf, Weak<Mutex<()>>>>> = OnceLock::new();
    let key = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mut gates = GATES.get_or_init(Default::default).lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(gate) = gates.get(&key).and_then(Weak::upgrade) {
        return gate;
    }
    // Files whose pools are all gone (tests make thousands) leave no entry behind.
    gates.retain(|_, g| g.strong_count() > 0);
    let gate = Gate::default();
    gates.insert(key, Arc::downgrade(&gate));
    gate
}

/// Held while a write runs: this file's turn on SQLite, nothing on PostgreSQL.
#[must_use = "the turn ends when this is dropped"]
#[derive(Debug)]
pub struct Writing {
    _turn: Option<OwnedMutexGuard<()>>,
}

/// A transaction that may write: on SQLite it holds the file's write gate until it ends.
/// Statements take it as `&tx` like any connection.
#[derive(Debug)]
pub struct WriteTransaction {
    tx: DatabaseTransaction,
    _writing: Writing,
}

impl Db {
    /// Waits for this process's turn to write (SQLite; at once on PostgreSQL), for a write
    /// statement run outside a transaction: `let _writing = db.writing().await;`.
    pub async fn writing(&self) -> Writing {
        Writing {
            _turn: match &self.gate {
                Some(gate) => Some(Arc::clone(gate).lock_owned().await),
                None => None,
            },
        }
    }

    /// Begins a transaction that writes, after waiting for this process's turn on SQLite.
    pub async fn begin_write(&self) -> Result<WriteTransaction, DbErr> {
        let writing = self.writing().await;
        let tx = self.conn.begin().await?;
        Ok(WriteTransaction { tx, _writing: writing })
    }

    /// [`Db::begin_write`] for a request that answers `OVERLOADED` rather than wait long
    /// (bookings, holds, cancels): on SQLite, set up by [`Db::with_request_wait`], it waits
    /// for its turn at the gate at most that wait ([`StoreError::Busy`] after it), and its
    /// statements wait for the file's lock at most that long too (`SQLITE_BUSY`, also
    /// [`StoreError::is_busy`]). A waiter that gives up leaves the gate's queue without
    /// disturbing its order. Elsewhere it is [`Db::begin_write`].
    pub async fn begin_request_write(&self) -> Result<WriteTransaction, StoreError> {
        let (Some(gate), Some((requests, wait))) = (&self.gate, &self.requests) else {
            return Ok(self.begin_write().await?);
        };
        let turn =
            tokio::time::timeout(*wait, Arc::clone(gate).lock_owned()).await.map_err(|_| StoreError::Busy(*wait))?;
        let tx = requests.begin().await?;
        Ok(WriteTransaction { tx, _writing: Writing { _turn: Some(turn) } })
    }
}

impl WriteTransaction {
    /// Commits, then lets the next writer in.
    pub async fn commit(self) -> Result<(), DbErr> {
        self.tx.commit().await
    }

    /// Rolls back, then lets the next writer in.
    pub async fn rollback(self) -> Result<(), DbErr> {
        self.tx.rollback().await
    }
}

impl WriteTransaction {
    /// The transaction beneath, for hooks typed on sea-orm's own transaction.
    pub fn transaction(&self) -> &DatabaseTransaction {
        &self.tx
    }
}

#[async_trait::async_trait]
impl ConnectionTrait for WriteTransaction {
    fn get_database_backend(&self) -> DbBackend {
        self.tx.get_database_backend()
    }

    async fn execute_raw(&self, stmt: Statement) -> Result<ExecResult, DbErr> {
        self.tx.execute_raw(stmt).await
    }

    async fn execute_unprepared(&self, sql: &str) -> Result<ExecResult, DbErr> {
        self.tx.execute_unprepared(sql).await
    }

    async fn query_one_raw(&self, stmt: Statement) -> Result<Option<QueryResult>, DbErr> {
        self.tx.query_one_raw(stmt).await
    }

    async fn query_all_raw(&self, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
        self.tx.query_all_raw(stmt).await
    }

    fn support_returning(&self) -> bool {
        self.tx.support_returning()
    }

    fn is_mock_connection(&self) -> bool {
        self.tx.is_mock_connection()
    }
}

#[cfg(test)]
mod tests {
    use std::{sync::Arc, time::Duration};

    use sea_orm::{ConnectionTrait, DbErr, Statement, TransactionTrait};
    use tokio::sync::Barrier;

    use crate::db::{DatabaseTarget, Db, PoolSettings, StoreError};

    /// Two pools on one SQLite file (two instances of one process), as the tests run them.
    async fn two_pools(dir: &std::path::Path) -> Result<(Db, Db), StoreError> {
        let target = DatabaseTarget::Sqlite(dir.join("gate.sqlite3"));
        let settings = PoolSettings {
            max_connections: 8,
            acquire_timeout: Duration::from_secs(30),
            statement_timeout: Duration::from_secs(30),
            hot_connections: 0,
        };
        let a = Db::connect(&target, &settings).await?;
        let b = Db::connect(&target, &settings).await?;
        a.conn().execute_unprepared("CREATE TABLE counter (n INTEGER NOT NULL)").await?;
        a.conn().execute_unprepared("INSERT INTO counter VALUES (0)").await?;
        Ok((a, b))
    }

    /// A transaction that reads before it writes: the shape SQLite cannot wait for (its snapshot
    /// is stale once another connection wrote), so without the gate it fails at once with
    /// `SQLITE_BUSY` as soon as two such transactions overlap.
    async fn read_then_write(db: &Db) -> Result<(), DbErr> {
        let sql = |s: &str| Statement::from_string(db.backend(), s.to_owned());
        let tx = db.begin_write().await?;
        let row = tx.query_one_raw(sql("SELECT n FROM counter")).await?;
        let n: i64 = row.map_or(Ok(0), |r| r.try_get("", "n"))?;
        tokio::task::yield_now().await;
        tx.execute_raw(sql(&format!("UPDATE counter SET n = {}", n + 1))).await?;
        tx.commit().await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn sqlite_writers_of_two_pools_wait_their_turn() -> Result<(), Box<dyn std::error::Error>> {
        const TASKS: usize = 64;
        let dir = tempfile::tempdir()?;
        let (a, b) = two_pools(dir.path()).await?;
        let barrier = Arc::new(Barrier::new(TASKS));
        let mut tasks = Vec::new();
        for i in 0..TASKS {
            let (db, barrier) = (if i % 2 == 0 { a.clone() } else { b.clone() }, Arc::clone(&barrier));
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                read_then_write(&db).await
            }));
        }
        for t in tasks {
            t.await??;
        }
        let row = a.conn().query_one_raw(Statement::from_string(a.backend(), "SELECT n FROM counter")).await?;
        let n: i64 = row.map_or(Ok(0), |r| r.try_get("", "n"))?;
        assert_eq!(n, TASKS as i64, "no increment was lost");
        Ok(())
    }

    #[tokio::test]
    async fn a_request_write_gives_up_on_a_locked_file_within_its_wait() -> Result<(), Box<dyn std::error::Error>> {
        use sqlx::{Connection, Executor};
        let dir = tempfile::tempdir()?;
        let (a, _) = two_pools(dir.path()).await?;
        let a = a.with_request_wait(Duration::from_millis(200));
        let update = Statement::from_string(a.backend(), "UPDATE counter SET n = n + 1");
        // Another process holds the file's write lock: the request's statement is refused busy.
        let options = sqlx::sqlite::SqliteConnectOptions::new().filename(dir.path().join("gate.sqlite3"));
        let mut other = sqlx::SqliteConnection::connect_with(&options).await?;
        other.execute("BEGIN IMMEDIATE").await?;
        let tx = a.begin_request_write().await?;
        let Err(refused) = tx.execute_raw(update.clone()).await else {
            return Err("a write went through another process's lock".into());
        };
        assert!(StoreError::from(refused).is_busy());
        tx.rollback().await?;
        // A writer of this process that may wait longer holds the gate: the request gives up on
        // its turn.
        let background = a.writing().await;
        assert!(matches!(a.begin_request_write().await, Err(StoreError::Busy(_))));
        drop(background);
        // The lock gone, requests write again.
        other.execute("ROLLBACK").await?;
        let tx = a.begin_request_write().await?;
        tx.execute_raw(update).await?;
        tx.commit().await?;
        Ok(())
    }

    #[tokio::test]
    async fn a_stale_read_then_write_fails_busy_at_once_and_is_told_apart() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let (a, b) = two_pools(dir.path()).await?;
        let sql = |s: &str| Statement::from_string(a.backend(), s.to_owned());
        // A plain transaction, without the gate: it reads, another pool writes, then it writes.
        let tx = a.conn().begin().await?;
        tx.query_one_raw(sql("SELECT n FROM counter")).await?;
        b.conn().execute_raw(sql("UPDATE counter SET n = 1")).await?;
        let Err(refused) = tx.execute_raw(sql("UPDATE counter SET n = 2")).await else {
            return Err("a write on a stale snapshot went through".into());
        };
        assert!(StoreError::from(refused).is_busy(), "SQLITE_BUSY is told apart (answered OVERLOADED)");
        assert!(!StoreError::from(DbErr::Custom("other".into())).is_busy());
        Ok(())
    }
}
