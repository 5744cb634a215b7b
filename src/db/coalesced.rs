//! The reads of the hot paths, coalesced on PostgreSQL: the lookups of attempts on known-full
//! slots, and the slot lists the cache did not have. [`CoalescedReads`] answers both on either
//! database; callers do not choose.
//!
//! During a burst thousands of attempts per second hit slots known to be full, and each still
//! needs one indexed read (its key, its patient's seat); thousands of slot lists per second
//! miss the cache. On PostgreSQL, requests that arrive while a read of their kind is in flight
//! are answered together by the next one, in one statement: the batch grows with the load by
//! itself (no timer, so a lone request waits for nothing), and the reads use a few connections
//! instead of one per request. SQLite reads each one through the pool.
//!
//! **How many statements of a kind run at once.** One statement in flight per kind made one
//! database backend, one core of the database, serve every slot list the caches missed: on a
//! machine with many cores the misses queued behind it however idle the other cores were. Each
//! kind now runs up to one statement per core of this machine ([`in_flight`]); while all are
//! running, requests gather for the next, so batches still grow with the load.

use std::{
    future::Future,
    num::NonZeroUsize,
    sync::{Arc, OnceLock},
};

use chrono::{DateTime, Utc};
use sea_orm::DbBackend;
use tokio::sync::{mpsc, oneshot, Semaphore};

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

/// Statements of one kind running at once: one per core of this machine, so that the misses
/// of a many-core instance use as many database backends, and on two cores no more than two.
fn in_flight() -> usize {
    std::thread::available_parallelism().map_or(1, NonZeroUsize::get)
}

/// Coalesces the known-full lookups of booking attempts: each answer is the caller's
/// appointment with the key, how the patient's appointments stand against the slot, and the
/// slot as it is now (unlocked: the known-full mark is only a hint).
type LookupBatcher = Batcher<KeyOrSeat, KeyOrSeatFound>;
/// Coalesces the slot lists the cache did not have.
type ListBatcher = Batcher<DayRange, Vec<time_slot::Model>>;

/// Starts the batched known-full lookup on `db` (inside the Tokio runtime).
fn lookup_batcher(db: Db) -> LookupBatcher {
    Batcher::start("known-full lookup", db, in_flight(), |db, lookups| async move {
        appointments::key_or_seats_pg(&db, &lookups).await
    })
}

/// Starts the batched slot-list read on `db` (inside the Tokio runtime).
fn list_batcher(db: Db) -> ListBatcher {
    Batcher::start("slot list", db, in_flight(), |db, ranges| async move {
        slots::available_in_ranges_pg(&db, &ranges, Utc::now()).await
    })
}

struct Job<Q, A> {
    query: Q,
    reply: oneshot::Sender<Result<A, Arc<StoreError>>>,
}

/// A queue in front of one batched read, and the task that drains it: each round takes what
/// is queued (up to [`MAX_BATCH`]) and answers it with one call of the read, with up to
/// `in_flight` rounds running at once.
struct Batcher<Q, A> {
    jobs: mpsc::Sender<Job<Q, A>>,
    what: &'static str,
}

impl<Q: Send + 'static, A: Send + 'static> Batcher<Q, A> {
    /// Starts the draining task; `read` answers a batch with one answer per query, in order.
    fn start<C, F, Fut>(what: &'static str, db: C, in_flight: usize, read: F) -> Self
    where
        C: Clone + Send + 'static,
        F: Fn(C, Vec<Q>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<Vec<A>, StoreError>> + Send + 'static,
    {
        let (jobs, rx) = mpsc::channel(QUEUE);
        tokio::spawn(drain(db, rx, in_flight.max(1), read));
        Self { jobs, what }
    }

    /// Answers one query, with whatever else is queued.
    async fn ask(&self, query: Q) -> Result<A, StoreError> {
        let (reply, answer) = oneshot::channel();
        let gone = || StoreError::Inconsistent(format!("the {} task has stopped", self.what));
        self.jobs.send(Job { query, reply }).await.map_err(|_| gone())?;
        match answer.await {
            Ok(Ok(found)) => Ok(found),
            // The failure as it was, so that its class (unavailable, overloaded, …) survives.
            Ok(Err(e)) => Err(StoreError::Shared(e)),
            Err(_) => Err(gone()),
        }
    }
}

/// Takes a free round first and only then what is queued: while every round is running,
/// requests gather in the queue and the next round answers them together.
async fn drain<C, Q, A, F, Fut>(db: C, mut rx: mpsc::Receiver<Job<Q, A>>, in_flight: usize, read: F)
where
    C: Clone,
    Q: Send + 'static,
    A: Send + 'static,
    F: Fn(C, Vec<Q>) -> Fut,
    Fut: Future<Output = Result<Vec<A>, StoreError>> + Send + 'static,
{
    let rounds = Arc::new(Semaphore::new(in_flight));
    loop {
        let Ok(round) = Arc::clone(&rounds).acquire_owned().await else { return };
        let mut batch = Vec::with_capacity(MAX_BATCH);
        if rx.recv_many(&mut batch, MAX_BATCH).await == 0 {
            return;
        }
        let (queries, replies): (Vec<Q>, Vec<_>) = batch.into_iter().map(|j| (j.query, j.reply)).unzip();
        let answers = read(db.clone(), queries);
        tokio::spawn(async move {
            let _round = round;
            match answers.await {
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
        });
    }
}

#[cfg(test)]
mod tests {
    use std::{
        sync::{Mutex, PoisonError},
        time::Duration,
    };

    use super::*;

    /// The batches a read was called with, and a gate that holds every read until opened.
    #[derive(Clone)]
    struct Probe {
        batches: Arc<Mutex<Vec<Vec<u32>>>>,
        gate: Arc<Semaphore>,
    }

    impl Probe {
        fn batches(&self) -> Vec<Vec<u32>> {
            self.batches.lock().unwrap_or_else(PoisonError::into_inner).clone()
        }

        async fn seen(&self, n: usize) {
            while self.batches().len() < n {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }

    #[tokio::test]
    async fn rounds_run_side_by_side_and_requests_gather_while_all_run() -> Result<(), Box<dyn std::error::Error>> {
        let probe = Probe { batches: Arc::default(), gate: Arc::new(Semaphore::new(0)) };
        let batcher = Arc::new(Batcher::start("test", probe.clone(), 2, |probe: Probe, batch: Vec<u32>| async move {
            probe.batches.lock().unwrap_or_else(PoisonError::into_inner).push(batch.clone());
            let _open = probe.gate.acquire().await;
            Ok(batch.into_iter().map(|q| q * 2).collect())
        }));
        let ask = |q: u32| {
            let batcher = Arc::clone(&batcher);
            tokio::spawn(async move { batcher.ask(q).await })
        };
        // Two lone requests each start a round of their own: neither waits for the other.
        let mut asked = vec![ask(1)];
        probe.seen(1).await;
        asked.push(ask(2));
        probe.seen(2).await;
        // Both rounds are running: these three gather and the next round answers them together.
        asked.extend([3, 4, 5].map(ask));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(probe.batches().len(), 2, "no third round while two run");
        probe.gate.add_permits(100);
        let mut answers = Vec::new();
        for handle in asked {
            answers.push(handle.await??);
        }
        assert_eq!(answers, [2, 4, 6, 8, 10]);
        assert_eq!(probe.batches(), [vec![1], vec![2], vec![3, 4, 5]]);
        Ok(())
    }
}
