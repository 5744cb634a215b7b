//! One `slotAvailability` subscription: the current state of every matching slot, then each
//! committed change of them, with `version` strictly increasing per slot.
//!
//! The subscription listens to its doctor's topic BEFORE reading the snapshot, so a change that
//! commits in between is not lost (it arrives as an event, or is already in the snapshot and
//! the event is dropped by version). A client that reads slowly is never waited for: what it
//! has not taken yet is coalesced to the latest state per slot (`Pending`), and when it falls
//! behind the topic's buffer it re-reads its slots from the database instead. Memory per
//! subscription is therefore bounded by the number of slots it watches.
//!
//! When Redis comes back every subscription of the instance must re-read at once; those that
//! watch the same range share one query (`SnapshotReader::reread`), so twenty thousand widgets
//! on one doctor cost one read, not twenty thousand.

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use futures_util::Stream;
use tokio::sync::{
    broadcast::error::{RecvError, TryRecvError},
    OnceCell, Semaphore,
};

use super::{
    backoff::Backoff,
    bus::{Listener, Note},
    SlotChange,
};
use crate::{
    db::{slots, Db, StoreError},
    model::DayRange,
};

/// How long a finished re-read stays joinable (by subscriptions still catching up on the same
/// cause); older ones are dropped when a new one starts.
const FLIGHT_KEPT: Duration = Duration::from_secs(60);

/// First and longest wait before re-reading the database after a failed read.
const REREAD_MIN: Duration = Duration::from_millis(200);
const REREAD_MAX: Duration = Duration::from_secs(5);

/// Which slots a subscription watches: one doctor's slots starting in `[from, to)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Watch {
    pub(super) range: DayRange,
}

impl Watch {
    fn matches(&self, c: &SlotChange) -> bool {
        c.doctor_id == self.range.doctor_id && c.start_at >= self.range.from && c.start_at < self.range.to
    }
}

/// Reads subscriptions' slots, a few queries at a time: thousands of widgets reading at once
/// must queue here, not take the whole pool from bookings.
#[derive(Clone)]
pub(super) struct SnapshotReader {
    db: Db,
    permits: Arc<Semaphore>,
    flights: Arc<Mutex<HashMap<DayRange, Arc<Flight>>>>,
}

/// One re-read of a range, shared by every subscription that asked for one before it began.
struct Flight {
    began: Instant,
    rows: OnceCell<Option<Arc<Vec<SlotChange>>>>,
}

impl SnapshotReader {
    /// A reader on `db` running at most `concurrency` queries at once.
    pub(super) fn new(db: Db, concurrency: usize) -> Self {
        Self { db, permits: Arc::new(Semaphore::new(concurrency.max(1))), flights: Arc::default() }
    }

    /// The database (to look doctors up).
    pub(super) fn db(&self) -> &Db {
        &self.db
    }

    async fn read(&self, range: DayRange) -> Result<Vec<SlotChange>, StoreError> {
        // The semaphore is never closed; a closed one would only skip the queue.
        let _permit = self.permits.acquire().await.ok();
        let rows = slots::in_ranges(self.db.conn(), &[range]).await?;
        Ok(rows.iter().map(SlotChange::from).collect())
    }

    /// The slots of `range` as of some moment after `since`; `None` if the read failed (logged).
    /// A read of the same range that began after `since` (running or done) is joined instead of
    /// repeated.
    async fn reread(&self, range: DayRange, since: Instant) -> Option<Arc<Vec<SlotChange>>> {
        let flight = {
            let mut flights = self.flights.lock().unwrap_or_else(PoisonError::into_inner);
            let usable = |f: &Flight| f.began >= since && !matches!(f.rows.get(), Some(None));
            match flights.get(&range) {
                Some(f) if usable(f) => Arc::clone(f),
                _ => {
                    let now = Instant::now();
                    // Old reads serve nobody any more (every cause since then is newer).
                    flights.retain(|_, f| now.duration_since(f.began) < FLIGHT_KEPT);
                    let f = Arc::new(Flight { began: now, rows: OnceCell::new() });
                    flights.insert(range, Arc::clone(&f));
                    f
                }
            }
        };
        flight
            .rows
            .get_or_init(|| async {
                match self.read(range).await {
                    Ok(rows) => Some(Arc::new(rows)),
                    Err(error) => {
                        tracing::warn!(%error, doctor = range.doctor_id, "cannot re-read subscriptions' slots");
                        None
                    }
                }
            })
            .await
            .clone()
    }
}

/// Changes not yet sent to the client, at most one per slot (the latest), in arrival order.
/// Ordered maps: a subscription watches a few dozen slots, and an `i64` comparison is cheaper
/// than hashing on the fan-out path.
#[derive(Default)]
struct Pending {
    latest: BTreeMap<i64, SlotChange>,
    order: VecDeque<i64>,
}

impl Pending {
    fn offer(&mut self, c: SlotChange) {
        match self.latest.get_mut(&c.slot_id) {
            Some(queued) if queued.version >= c.version => {}
            Some(queued) => *queued = c,
            None => {
                self.order.push_back(c.slot_id);
                self.latest.insert(c.slot_id, c);
            }
        }
    }

    fn pop(&mut self) -> Option<SlotChange> {
        let id = self.order.pop_front()?;
        self.latest.remove(&id)
    }
}

/// Counts open subscriptions in the `subscriptions_open` gauge for as long as it lives.
struct OpenGauge;

impl OpenGauge {
    fn new() -> Self {
        metrics::gauge!("subscriptions_open").increment(1.0);
        Self
    }
}

impl Drop for OpenGauge {
    fn drop(&mut self) {
        metrics::gauge!("subscriptions_open").decrement(1.0);
    }
}

/// The state a subscription carries between two events.
struct Subscription {
    watch: Watch,
    listener: Listener,
    reader: SnapshotReader,
    pending: Pending,
    /// Highest version sent per slot.
    sent: BTreeMap<i64, i64>,
    /// Set when the slots must be re-read: by a read that begins after this moment.
    reread: Option<Instant>,
    closed: bool,
    backoff: Backoff,
    _gauge: OpenGauge,
}

/// Opens a subscription: listens first, then reads the snapshot.
pub(super) async fn open(
    watch: Watch,
    listener: Listener,
    reader: SnapshotReader,
) -> Result<impl Stream<Item = SlotChange> + Send + 'static, StoreError> {
    let mut sub = Subscription {
        watch,
        listener,
        reader,
        pending: Pending::default(),
        sent: BTreeMap::new(),
        reread: None,
        closed: false,
        backoff: Backoff::new(REREAD_MIN, REREAD_MAX),
        _gauge: OpenGauge::new(),
    };
    for c in sub.reader.read(sub.watch.range).await? {
        sub.pending.offer(c);
    }
    Ok(futures_util::stream::unfold(sub, |mut sub| async move {
        let next = sub.next().await?;
        Some((next, sub))
    }))
}

impl Subscription {
    /// The next change to send; `None` when the instance stops.
    async fn next(&mut self) -> Option<SlotChange> {
        loop {
            if let Some(since) = self.reread.filter(|_| !self.closed) {
                self.reread_slots(since).await;
                continue;
            }
            if let Some(c) = self.pending.pop() {
                self.sent.insert(c.slot_id, c.version);
                return Some(c);
            }
            if self.closed {
                return None;
            }
            let received = self.listener.notes.recv().await;
            self.on_note(received);
            self.take_ready();
        }
    }

    /// Moves whatever else already arrived into `pending` (coalescing per slot) without waiting:
    /// a client that was slow to read gets the latest state of each slot, not the history.
    fn take_ready(&mut self) {
        while !self.closed {
            let received = match self.listener.notes.try_recv() {
                Ok(note) => Ok(note),
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Lagged(n)) => Err(RecvError::Lagged(n)),
                Err(TryRecvError::Closed) => Err(RecvError::Closed),
            };
            self.on_note(received);
        }
    }

    fn on_note(&mut self, received: Result<Note, RecvError>) {
        match received {
            Ok(Note::Change(c)) => self.offer(&c),
            // Redis came back, or this subscription fell behind the topic's buffer: the
            // database knows the rest, as of any moment after the cause.
            Ok(Note::Reread(since)) => self.reread_after(since),
            Err(RecvError::Lagged(_)) => self.reread_after(Instant::now()),
            Err(RecvError::Closed) => self.closed = true,
        }
    }

    /// Queues `c` if it matches and is newer than what the client has.
    fn offer(&mut self, c: &SlotChange) {
        if self.watch.matches(c) && self.sent.get(&c.slot_id).is_none_or(|v| c.version > *v) {
            self.pending.offer(c.clone());
        }
    }

    fn reread_after(&mut self, since: Instant) {
        self.reread = Some(self.reread.map_or(since, |s| s.max(since)));
    }

    /// Re-reads the watched slots; on failure waits with backoff and leaves `reread` set for
    /// the next round.
    async fn reread_slots(&mut self, since: Instant) {
        match self.reader.reread(self.watch.range, since).await {
            Some(rows) => {
                // Causes noted meanwhile are still queued on the topic; they ask again.
                self.reread = None;
                self.backoff.reset();
                rows.iter().for_each(|c| self.offer(c));
            }
            None => tokio::time::sleep(self.backoff.next_delay()).await,
        }
    }
}

/// The window of a subscription without a date: slots starting from the current minute for
/// this long.
pub const UPCOMING_WINDOW: TimeDelta = TimeDelta::days(14);

/// The upcoming window of a doctor at `now`. It starts at the minute, not the microsecond, so
/// the widgets opened within a minute watch the same range and share their re-reads.
pub(super) fn upcoming(doctor_id: i64, now: DateTime<Utc>) -> DayRange {
    let from = now.duration_trunc(TimeDelta::minutes(1)).unwrap_or(now);
    DayRange { doctor_id, from, to: from + UPCOMING_WINDOW }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(slot_id: i64, version: i64) -> SlotChange {
        SlotChange { slot_id, doctor_id: 1, start_at: Utc::now(), capacity: 3, booked_count: 1, version, closed: false }
    }

    #[tokio::test]
    async fn rereads_of_one_range_share_a_query() -> Result<(), Box<dyn std::error::Error>> {
        use crate::db::{doctors, slots::NewSlot, DatabaseTarget, PoolSettings};
        let dir = tempfile::tempdir()?;
        let settings = PoolSettings {
            max_connections: 4,
            acquire_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(5),
            hot_connections: 0,
        };
        let db = Db::connect(&DatabaseTarget::Sqlite(dir.path().join("t.sqlite3")), &settings).await?;
        db.migrate().await?;
        let doctor = doctors::insert(db.conn(), "Dr", None, "UTC").await?;
        let start = Utc::now().duration_trunc(TimeDelta::hours(1))? + TimeDelta::days(1);
        let slot = NewSlot { start_at: start, end_at: start + TimeDelta::minutes(15) };
        slots::insert_skipping_existing(db.conn(), doctor.id, 1, &[slot]).await?;

        let reader = SnapshotReader::new(db.clone(), 2);
        let range = upcoming(doctor.id, Utc::now());
        let since = Instant::now();
        let before = db.statements_executed();
        let reads = (0..50).map(|_| {
            let reader = reader.clone();
            tokio::spawn(async move { reader.reread(range, since).await.map(|rows| rows.len()) })
        });
        for read in futures_util::future::join_all(reads).await {
            assert_eq!(read?, Some(1));
        }
        assert_eq!(db.statements_executed() - before, 1, "fifty re-reads, one query");
        // A cause after that read needs a read of its own.
        assert_eq!(reader.reread(range, Instant::now()).await.map(|rows| rows.len()), Some(1));
        assert_eq!(db.statements_executed() - before, 2);
        Ok(())
    }

    #[test]
    fn pending_keeps_the_latest_state_per_slot_in_arrival_order() {
        let mut p = Pending::default();
        for (slot, version) in [(1, 1), (2, 1), (1, 3), (1, 2), (2, 2)] {
            p.offer(change(slot, version));
        }
        assert_eq!(p.pop().map(|c| (c.slot_id, c.version)), Some((1, 3)));
        assert_eq!(p.pop().map(|c| (c.slot_id, c.version)), Some((2, 2)));
        assert!(p.pop().is_none());
    }
}
