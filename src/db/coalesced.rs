//! The reads of the hot paths, coalesced on PostgreSQL: the lookups of attempts on known-full
//! slots, and the slot lists the cache did not have. [`CoalescedReads`] answers both on either
//! database; callers do not choose.
//!
//! During a burst thousands of attempts per second hit slots known to be full, and each still
//! needs one indexed read (its key, its patient's seat); thousands of slot lists per second
//! miss the cache. On PostgreSQL, requests that arrive while a read of their kind is in flight
//! are answered together by the next one, in one statement: the batch grows with the load by
//! itself (no timer, so a lone request waits for nothing), and the reads use one connection
//! each instead of one per request. SQLite reads each one through the pool.

use std::{
    future::Future,
    sync::{Arc, OnceLock},
};

use chrono::{DateTime, Utc};
use sea_orm::DbBackend;
use tokio::sync::{mpsc, oneshot};

use super::{
    appointments::{self, Conflicts, KeyOrSeat, KeyOrSeatFound},
    entity::time_slot,
    slots, Db, StoreError,
};
use crate::model::DayRange;

/// The hot reads of one service: coalesced on PostgreSQL (each batcher started on first use),
/// read one by one through the pool on SQLite. Cheap to clone; clones share the batchers.
#[derive(Clone)]
pub struct CoalescedReads {
    db: Db,
    lookups: Arc<OnceLock<LookupBatcher>>,
    lists: Arc<OnceLock<ListBatcher>>,
}

impl CoalescedReads {
    /// The hot reads on `db`.
    pub fn new(db: Db) -> Self {
        Self { db, lookups: Arc::default(), lists: Arc::default() }
    }

    /// Whether the reads are coalesced (PostgreSQL).
    fn coalesced(&self) -> bool {
        self.db.backend() == DbBackend::Postgres
    }

    /// Whether each read takes a connection of the pool (SQLite), so that a caller bounding
    /// its use of the pool must count it. Coalesced reads share one connection per kind and
    /// take none of the pool's, however many wait.
    pub fn take_pool_connections(&self) -> bool {
        !self.coalesced()
    }

    /// The caller's appointment with the key (on any slot), how the patient's active
    /// appointments stand against the slot, and the slot as it is now: one read without locks.
    pub async fn key_or_seat(
        &self,
        booked_by: &str,
        key: &str,
        slot_id: i64,
        patient_id: i64,
    ) -> Result<KeyOrSeatFound, StoreError> {
        if self.coalesced() {
            let batcher = self.lookups.get_or_init(|| lookup_batcher(self.db.clone()));
            let lookup = KeyOrSeat { booked_by: booked_by.to_owned(), key: key.to_owned(), slot_id, patient_id };
            return batcher.ask(lookup).await;
        }
        let conn = self.db.conn();
        let Some(slot) = slots::find(conn, slot_id).await? else {
            let by_key = appointments::find_by_key(conn, booked_by, key).await?;
            return Ok(KeyOrSeatFound { by_key, conflicts: Conflicts::default(), slot: None });
        };
        let (by_key, conflicts) = appointments::key_or_seat(conn, booked_by, key, &slot, patient_id).await?;
        Ok(KeyOrSeatFound { by_key, conflicts, slot: Some(slot) })
    }

    /// The slots of `range` that can still be booked, by start: those open, with a seat, and
    /// starting after `now` (coalesced: after the moment the shared statement runs).
    pub async fn available(&self, range: DayRange, now: DateTime<Utc>) -> Result<Vec<time_slot::Model>, StoreError> {
        if self.coalesced() {
            return self.lists.get_or_init(|| list_batcher(self.db.clone())).ask(range).await;
        }
        slots::available(self.db.conn(), range, now).await
    }
}

/// Most requests answered by one statement.
const MAX_BATCH: usize = 128;
/// Requests queued before senders wait (back-pressure; the bulkhead bounds it anyway).
const QUEUE: usize = 4096;

/// Coalesces the known-full lookups of booking attempts: each answer is the caller's
/// appointment with the key, how the patient's appointments stand against the slot, and the
/// slot as it is now (unlocked: the known-full mark is only a hint).
type LookupBatcher = Batcher<KeyOrSeat, KeyOrSeatFound>;
/// Coalesces the slot lists the cache did not have.
type ListBatcher = Batcher<DayRange, Vec<time_slot::Model>>;

/// Starts the batched known-full lookup on `db` (inside the Tokio runtime).
fn lookup_batcher(db: Db) -> LookupBatcher {
    Batcher::start(
        "known-full lookup",
        db,
        |db, lookups| async move { appointments::key_or_seats_pg(&db, &lookups).await },
    )
}

/// Starts the batched slot-list read on `db` (inside the Tokio runtime).
fn list_batcher(db: Db) -> ListBatcher {
    Batcher::start("slot list", db, |db, ranges| async move {
        slots::available_in_ranges_pg(&db, &ranges, Utc::now()).await
    })
}

struct Job<Q, A> {
    query: Q,
    reply: oneshot::Sender<Result<A, Arc<StoreError>>>,
}

/// A queue in front of one batched read, and the task that drains it: each round takes what
/// is queued (up to [`MAX_BATCH`]) and answers it with one call of the read.
struct Batcher<Q, A> {
    jobs: mpsc::Sender<Job<Q, A>>,
    what: &'static str,
}

impl<Q: Send + 'static, A: Send + 'static> Batcher<Q, A> {
    /// Starts the draining task; `read` answers a batch with one answer per query, in order.
    fn start<F, Fut>(what: &'static str, db: Db, read: F) -> Self
    where
        F: Fn(Db, Vec<Q>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<Vec<A>, StoreError>> + Send + 'static,
    {
        let (jobs, rx) = mpsc::channel(QUEUE);
        tokio::spawn(drain(db, rx, read));
        Self { jobs, what }
    }

    /// Answers one query, with whatever else is queued.
    async fn ask(&self, query: Q) -> Result<A, StoreError> {
        let (reply, answer) = oneshot::channel();
        let gone = || StoreError::Inconsistent(format!("the {} task has stopped", self.what));
        self.jobs.send(Job { query, reply }).await.map_err(|_| gone())?;
        match answer.await {
            Ok(Ok(found)) => Ok(found),
            Ok(Err(e)) => Err(StoreError::Inconsistent(format!("batched {} failed: {e}", self.what))),
            Err(_) => Err(gone()),
        }
    }
}

async fn drain<Q, A, F, Fut>(db: Db, mut rx: mpsc::Receiver<Job<Q, A>>, read: F)
where
    F: Fn(Db, Vec<Q>) -> Fut,
    Fut: Future<Output = Result<Vec<A>, StoreError>>,
{
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let (queries, replies): (Vec<Q>, Vec<_>) = batch.drain(..).map(|j| (j.query, j.reply)).unzip();
        match read(db.clone(), queries).await {
            Ok(answers) => {
                for (reply, answer) in replies.into_iter().zip(answers) {
                    let _ = reply.send(Ok(answer));
                }
            }
            Err(e) => {
                let e = Arc::new(e);
                for reply in replies {
                    let _ = reply.send(Err(Arc::clone(&e)));
                }
            }
        }
    }
}
