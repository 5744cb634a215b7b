//! Coalesced reads on the hot paths (PostgreSQL): the lookups of attempts on known-full slots,
//! and the slot lists the cache did not have.
//!
//! During a burst thousands of attempts per second hit slots known to be full, and each still
//! needs one indexed read (its key, its patient's seat: see `book.rs`); thousands of slot lists
//! per second miss the cache. Requests that arrive while a read of their kind is in flight are
//! answered together by the next one, in one statement: the batch grows with the load by itself
//! (no timer, so a lone request waits for nothing), and the reads use one connection each
//! instead of one per request.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use chrono::{DateTime, Utc};

use crate::db::{
    appointments::{self, KeyOrSeat},
    entity::{appointment, time_slot},
    slots::{self, DayRange},
    Db, StoreError,
};

/// Most attempts answered by one statement.
const MAX_BATCH: usize = 128;
/// Attempts queued before senders wait (back-pressure; the bulkhead bounds it anyway).
const QUEUE: usize = 4096;

/// The answer to one attempt: the caller's appointment with the key, whether the patient holds
/// a seat in the slot, and the slot as it is now (unlocked: the known-full mark is only a hint).
pub(super) type KeyOrSeatAnswer = (Option<appointment::Model>, bool, Option<time_slot::Model>);

struct Job {
    lookup: KeyOrSeat,
    reply: oneshot::Sender<Result<KeyOrSeatAnswer, Arc<StoreError>>>,
}

/// The queue in front of the batched read, and the task that drains it.
pub(super) struct LookupBatcher {
    jobs: mpsc::Sender<Job>,
}

impl LookupBatcher {
    /// Starts the draining task on `db` (inside the Tokio runtime).
    pub(super) fn start(db: Db) -> Self {
        let (jobs, rx) = mpsc::channel(QUEUE);
        tokio::spawn(drain(db, rx));
        Self { jobs }
    }

    /// Looks one attempt up, with whatever else is queued.
    pub(super) async fn lookup(&self, lookup: KeyOrSeat) -> Result<KeyOrSeatAnswer, StoreError> {
        let (reply, answer) = oneshot::channel();
        let gone = || StoreError::Inconsistent("the lookup task has stopped".into());
        self.jobs.send(Job { lookup, reply }).await.map_err(|_| gone())?;
        match answer.await {
            Ok(Ok(found)) => Ok(found),
            Ok(Err(e)) => Err(StoreError::Inconsistent(format!("batched lookup failed: {e}"))),
            Err(_) => Err(gone()),
        }
    }
}

async fn drain(db: Db, mut rx: mpsc::Receiver<Job>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let lookups: Vec<KeyOrSeat> = batch.iter().map(|j| j.lookup.clone()).collect();
        match appointments::key_or_seats_pg(db.conn(), &lookups).await {
            Ok(found) => {
                for (job, f) in batch.drain(..).zip(found) {
                    let _ = job.reply.send(Ok((f.by_key, f.holds_seat, f.slot)));
                }
            }
            Err(e) => {
                let e = Arc::new(e);
                for job in batch.drain(..) {
                    let _ = job.reply.send(Err(Arc::clone(&e)));
                }
            }
        }
    }
}

struct ListJob {
    range: DayRange,
    reply: oneshot::Sender<Result<Vec<time_slot::Model>, Arc<StoreError>>>,
}

/// The queue in front of the batched slot-list read, and the task that drains it.
pub(super) struct ListBatcher {
    jobs: mpsc::Sender<ListJob>,
}

impl ListBatcher {
    /// Starts the draining task on `db` (inside the Tokio runtime).
    pub(super) fn start(db: Db) -> Self {
        let (jobs, rx) = mpsc::channel(QUEUE);
        tokio::spawn(drain_lists(db, rx));
        Self { jobs }
    }

    /// The bookable slots of one doctor's day, read with whatever else is queued.
    pub(super) async fn available(&self, range: DayRange) -> Result<Vec<time_slot::Model>, StoreError> {
        let (reply, answer) = oneshot::channel();
        let gone = || StoreError::Inconsistent("the slot-list task has stopped".into());
        self.jobs.send(ListJob { range, reply }).await.map_err(|_| gone())?;
        match answer.await {
            Ok(Ok(rows)) => Ok(rows),
            Ok(Err(e)) => Err(StoreError::Inconsistent(format!("batched slot list failed: {e}"))),
            Err(_) => Err(gone()),
        }
    }
}

async fn drain_lists(db: Db, mut rx: mpsc::Receiver<ListJob>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let ranges: Vec<DayRange> = batch.iter().map(|j| j.range).collect();
        let now: DateTime<Utc> = Utc::now();
        match slots::available_in_ranges_pg(db.conn(), &ranges, now).await {
            Ok(rows) => {
                for job in batch.drain(..) {
                    let r = job.range;
                    let mine = rows
                        .iter()
                        .filter(|s| s.doctor_id == r.doctor_id && r.from <= s.start_at && s.start_at < r.to)
                        .cloned()
                        .collect();
                    let _ = job.reply.send(Ok(mine));
                }
            }
            Err(e) => {
                let e = Arc::new(e);
                for job in batch.drain(..) {
                    let _ = job.reply.send(Err(Arc::clone(&e)));
                }
            }
        }
    }
}
