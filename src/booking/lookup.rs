//! Coalesced reads on the hot paths (PostgreSQL): the lookups of attempts on known-full slots,
//! and the slot lists the cache did not have.
//!
//! During a burst thousands of attempts per second hit slots known to be full, and each still
//! needs one indexed read (its key, its patient's seat: see `book.rs`); thousands of slot lists
//! per second miss the cache. Requests that arrive while a read of their kind is in flight are
//! answered together by the next one, in one statement: the batch grows with the load by itself
//! (no timer, so a lone request waits for nothing), and the reads use one connection each
//! instead of one per request.

use std::{future::Future, sync::Arc};

use chrono::Utc;
use tokio::sync::{mpsc, oneshot};

use crate::{
    db::{
        appointments::{self, KeyOrSeat, KeyOrSeatFound},
        entity::time_slot,
        slots, Db, StoreError,
    },
    model::DayRange,
};

/// Most requests answered by one statement.
const MAX_BATCH: usize = 128;
/// Requests queued before senders wait (back-pressure; the bulkhead bounds it anyway).
const QUEUE: usize = 4096;

/// Coalesces the known-full lookups of booking attempts: each answer is the caller's
/// appointment with the key, how the patient's appointments stand against the slot, and the
/// slot as it is now (unlocked: the known-full mark is only a hint).
pub(super) type LookupBatcher = Batcher<KeyOrSeat, KeyOrSeatFound>;
/// Coalesces the slot lists the cache did not have.
pub(super) type ListBatcher = Batcher<DayRange, Vec<time_slot::Model>>;

/// Starts the batched known-full lookup on `db` (inside the Tokio runtime).
pub(super) fn lookup_batcher(db: Db) -> LookupBatcher {
    Batcher::start(
        "known-full lookup",
        db,
        |db, lookups| async move { appointments::key_or_seats_pg(&db, &lookups).await },
    )
}

/// Starts the batched slot-list read on `db` (inside the Tokio runtime).
pub(super) fn list_batcher(db: Db) -> ListBatcher {
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
pub(super) struct Batcher<Q, A> {
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
    pub(super) async fn ask(&self, query: Q) -> Result<A, StoreError> {
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
