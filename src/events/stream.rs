//! One `slotAvailability` subscription: the current state of every matching slot, then each
//! committed change of them, with `version` strictly increasing per slot.
//!
//! The subscription listens to its doctor's topic BEFORE reading the snapshot, so a change that
//! commits in between is not lost (it arrives as an event, or is already in the snapshot and
//! the event is dropped by version). A client that reads slowly is never waited for: what it
//! has not taken yet is coalesced to the latest state per slot (`Pending`), and when it falls
//! behind the topic's buffer it re-reads its slots from the database instead. Memory per
//! subscription is therefore bounded by the number of slots it watches.

use std::{
    collections::{BTreeMap, VecDeque},
    sync::Arc,
    time::Duration,
};

use chrono::{DateTime, Utc};
use futures_util::Stream;
use tokio::sync::{broadcast::error::RecvError, broadcast::error::TryRecvError, Semaphore};

use super::{
    backoff::Backoff,
    bus::{Listener, Note},
    SlotChange,
};
use crate::{
    booking::ServiceError,
    db::{slots, slots::DayRange, Db, StoreError},
};

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

/// Reads a subscription's slots, a few subscriptions at a time: thousands of widgets re-reading
/// at once (Redis came back) must queue here, not take the whole pool from bookings.
#[derive(Clone)]
pub(super) struct SnapshotReader {
    pub(super) db: Db,
    pub(super) permits: Arc<Semaphore>,
}

impl SnapshotReader {
    async fn read(&self, watch: &Watch) -> Result<Vec<SlotChange>, StoreError> {
        // The semaphore is never closed; a closed one would only skip the queue.
        let _permit = self.permits.acquire().await.ok();
        let rows = slots::in_ranges(self.db.conn(), &[watch.range]).await?;
        Ok(rows.iter().map(SlotChange::from_slot).collect())
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
    reread: bool,
    closed: bool,
    backoff: Backoff,
    _gauge: OpenGauge,
}

/// Opens a subscription: listens first, then reads the snapshot.
pub(super) async fn open(
    watch: Watch,
    listener: Listener,
    reader: SnapshotReader,
) -> Result<impl Stream<Item = SlotChange> + Send + 'static, ServiceError> {
    let mut sub = Subscription {
        watch,
        listener,
        reader,
        pending: Pending::default(),
        sent: BTreeMap::new(),
        reread: false,
        closed: false,
        backoff: Backoff::new(REREAD_MIN, REREAD_MAX),
        _gauge: OpenGauge::new(),
    };
    for c in sub.reader.read(&sub.watch).await? {
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
            if self.reread && !self.closed {
                self.reread_slots().await;
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
            // Fell behind the topic's buffer, or Redis came back: the database knows the rest.
            Ok(Note::Reread) | Err(RecvError::Lagged(_)) => self.reread = true,
            Err(RecvError::Closed) => self.closed = true,
        }
    }

    /// Queues `c` if it matches and is newer than what the client has.
    fn offer(&mut self, c: &SlotChange) {
        if self.watch.matches(c) && self.sent.get(&c.slot_id).is_none_or(|v| c.version > *v) {
            self.pending.offer(c.clone());
        }
    }

    /// Re-reads the watched slots; on failure waits with backoff and leaves `reread` set for
    /// the next round.
    async fn reread_slots(&mut self) {
        match self.reader.read(&self.watch).await {
            Ok(rows) => {
                self.reread = false;
                self.backoff.reset();
                rows.iter().for_each(|c| self.offer(c));
            }
            Err(error) => {
                tracing::warn!(%error, doctor = self.watch.range.doctor_id, "cannot re-read a subscription's slots");
                tokio::time::sleep(self.backoff.next_delay()).await;
            }
        }
    }
}

/// The window of a subscription without a date: slots starting from now for this long.
pub const UPCOMING_WINDOW: chrono::TimeDelta = chrono::TimeDelta::days(14);

/// The upcoming window of a doctor from `now`.
pub(super) fn upcoming(doctor_id: i64, now: DateTime<Utc>) -> DayRange {
    DayRange { doctor_id, from: now, to: now + UPCOMING_WINDOW }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(slot_id: i64, version: i64) -> SlotChange {
        SlotChange { slot_id, doctor_id: 1, start_at: Utc::now(), capacity: 3, booked_count: 1, version }
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
