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
//! **How many statements of a kind run at once.** A new round starts at once when none is
//! running (a lone request waits for nothing). While rounds are running, the next one starts
//! only when there is work for it that the running ones cannot take: a full batch
//! ([`MAX_BATCH`]) is waiting, or the newest running round has been out longer than
//! [`PATIENCE`] (the database is slow to answer, and another backend may answer sooner); never
//! more than one per core of this machine ([`in_flight`]). Otherwise requests gather and the
//! next round answers them together.
//!
//! Why not simply one round per free core: on two cores that sent more statements with fewer
//! requests each, and the database paid for every statement. The booking burst fell from
//! 18,580 to 13,600 answers/s against the one-round-in-flight design (PostgreSQL 0.34 → up to
//! 0.58 cores; BENCHMARKS.md, issue 45), while one round in flight left the cores of a
//! many-core database idle behind a slow statement. Rounds answer in 0.2–0.6 ms on a two-core
//! machine under the burst, so with a 1 ms patience a small machine keeps one round in flight
//! and batches grow as before, while a flood that fills batches, or a slow database, brings
//! more rounds out, up to a core each.

use std::{
    future::Future,
    num::NonZeroUsize,
    sync::{Arc, OnceLock},
    time::Duration,
};

use chrono::{DateTime, Utc};
use sea_orm::DbBackend;
use tokio::{
    sync::{mpsc, oneshot},
    task::JoinSet,
    time::Instant,
};

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
/// How long the newest running round may be out before a round starts beside it for requests
/// that could not fill a batch (see the module's text).
const PATIENCE: Duration = Duration::from_millis(1);

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
    Batcher::start("known-full lookup", db, in_flight(), PATIENCE, |db, lookups| async move {
        appointments::key_or_seats_pg(&db, &lookups).await
    })
}

/// Starts the batched slot-list read on `db` (inside the Tokio runtime).
fn list_batcher(db: Db) -> ListBatcher {
    Batcher::start("slot list", db, in_flight(), PATIENCE, |db, ranges| async move {
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
    fn start<C, F, Fut>(what: &'static str, db: C, in_flight: usize, patience: Duration, read: F) -> Self
    where
        C: Clone + Send + 'static,
        F: Fn(C, Vec<Q>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<Vec<A>, StoreError>> + Send + 'static,
    {
        let (jobs, rx) = mpsc::channel(QUEUE);
        tokio::spawn(drain(db, rx, in_flight.max(1), patience, read));
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

/// Drains the queue in rounds by the module's rule: a round starts when none is running, or,
/// below `in_flight`, when a full batch waits or the newest round has been out past `patience`
/// ([`PATIENCE`]); otherwise requests gather for the next.
async fn drain<C, Q, A, F, Fut>(db: C, mut rx: mpsc::Receiver<Job<Q, A>>, in_flight: usize, patience: Duration, read: F)
where
    C: Clone,
    Q: Send + 'static,
    A: Send + 'static,
    F: Fn(C, Vec<Q>) -> Fut,
    Fut: Future<Output = Result<Vec<A>, StoreError>> + Send + 'static,
{
    let mut pending: Vec<Job<Q, A>> = Vec::with_capacity(MAX_BATCH);
    let mut running = JoinSet::new();
    // When the newest running round started.
    let mut newest = Instant::now();
    let mut open = true;
    loop {
        let room = running.len() < in_flight;
        let waited = running.is_empty() || pending.len() >= MAX_BATCH || newest.elapsed() >= patience;
        if !pending.is_empty() && room && waited {
            let take = pending.len().min(MAX_BATCH);
            let (queries, replies): (Vec<Q>, Vec<_>) = pending.drain(..take).map(|j| (j.query, j.reply)).unzip();
            running.spawn(answer(read(db.clone(), queries), replies));
            newest = Instant::now();
            continue;
        }
        if !open && pending.is_empty() && running.is_empty() {
            return;
        }
        // Past this, a request still waiting may start a round beside the running ones.
        let deadline = (!pending.is_empty() && room).then_some(newest + patience);
        tokio::select! {
            Some(_) = running.join_next(), if !running.is_empty() => {}
            received = rx.recv_many(&mut pending, MAX_BATCH), if open && pending.len() < MAX_BATCH => {
                open = received > 0;
            }
            () = tokio::time::sleep_until(deadline.unwrap_or(newest)), if deadline.is_some() => {}
        }
    }
}

/// Waits for one round's answers and hands each to its request.
async fn answer<A, Fut>(answers: Fut, replies: Vec<oneshot::Sender<Result<A, Arc<StoreError>>>>)
where
    Fut: Future<Output = Result<Vec<A>, StoreError>>,
{
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
}

#[cfg(test)]
mod tests {
    use std::sync::{Mutex, PoisonError};

    use tokio::sync::Semaphore;

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

        /// Waits until `n` rounds have started, in steps far below the patience (the paused
        /// clock moves by whole milliseconds).
        async fn seen(&self, n: usize) {
            while self.batches().len() < n {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }

    /// The tests' patience, long against the paused clock's millisecond steps.
    const TEST_PATIENCE: Duration = Duration::from_millis(50);

    fn probe() -> Probe {
        Probe { batches: Arc::default(), gate: Arc::new(Semaphore::new(0)) }
    }

    fn batcher(probe: &Probe, in_flight: usize) -> Arc<Batcher<u32, u32>> {
        Arc::new(Batcher::start(
            "test",
            probe.clone(),
            in_flight,
            TEST_PATIENCE,
            |probe: Probe, batch: Vec<u32>| async move {
                probe.batches.lock().unwrap_or_else(PoisonError::into_inner).push(batch.clone());
                let _open = probe.gate.acquire().await;
                Ok(batch.into_iter().map(|q| q * 2).collect())
            },
        ))
    }

    fn ask(batcher: &Arc<Batcher<u32, u32>>, q: u32) -> tokio::task::JoinHandle<Result<u32, StoreError>> {
        let batcher = Arc::clone(batcher);
        tokio::spawn(async move { batcher.ask(q).await })
    }

    async fn answers(
        asked: Vec<tokio::task::JoinHandle<Result<u32, StoreError>>>,
    ) -> Result<Vec<u32>, Box<dyn std::error::Error>> {
        let mut answers = Vec::new();
        for handle in asked {
            answers.push(handle.await??);
        }
        Ok(answers)
    }

    #[tokio::test(start_paused = true)]
    async fn requests_gather_behind_a_round_that_answers_within_the_patience() -> Result<(), Box<dyn std::error::Error>>
    {
        let probe = probe();
        let batcher = batcher(&probe, 4);
        // A lone request starts a round at once.
        let mut asked = vec![ask(&batcher, 1)];
        probe.seen(1).await;
        // These arrive while it runs; it answers before the patience is out: they go together.
        asked.extend([2, 3, 4].map(|q| ask(&batcher, q)));
        tokio::time::sleep(TEST_PATIENCE / 2).await;
        assert_eq!(probe.batches().len(), 1, "no second round within the patience");
        probe.gate.add_permits(1);
        probe.seen(2).await;
        probe.gate.add_permits(100);
        assert_eq!(answers(asked).await?, [2, 4, 6, 8]);
        assert_eq!(probe.batches(), [vec![1], vec![2, 3, 4]]);
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_round_or_a_full_batch_brings_more_rounds_up_to_the_limit() -> Result<(), Box<dyn std::error::Error>>
    {
        let probe = probe();
        let batcher = batcher(&probe, 2);
        let mut asked = vec![ask(&batcher, 1)];
        probe.seen(1).await;
        // The round is still out past the patience: a second starts beside it.
        asked.push(ask(&batcher, 2));
        probe.seen(2).await;
        // Two run, the limit: however long they take, the rest gather for the next round.
        asked.extend((3..=200).map(|q| ask(&batcher, q)));
        tokio::time::sleep(TEST_PATIENCE * 10).await;
        assert_eq!(probe.batches().len(), 2, "no third round while two run");
        probe.gate.add_permits(1000);
        let expected: Vec<u32> = (1..=200).map(|q| q * 2).collect();
        assert_eq!(answers(asked).await?, expected);
        let batches = probe.batches();
        assert_eq!(batches[..2], [vec![1], vec![2]]);
        // Then a full batch at once, and its rest beside it.
        assert_eq!(batches[2].len(), MAX_BATCH);
        assert_eq!(batches.iter().map(Vec::len).sum::<usize>(), 200);
        Ok(())
    }
}
