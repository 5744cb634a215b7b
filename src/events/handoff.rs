//! Work a follow-up recorded already leased to this instance's worker, handed over in memory so
//! that the worker sends it without claiming it from the database first.
//!
//! The relay records a pass's messages and deliveries in the transaction that deletes their
//! outbox rows. While this instance's worker has room, a follow-up writes them leased to it
//! (the lease a claim would have given them) and stages them here; once that transaction has
//! committed they are queued for the worker, which sends them at once. What does not fit is
//! recorded due, for any instance's worker to claim, and so are retries, reminders and what
//! another instance recorded. A claim was an `UPDATE` of every row it took (under load, a
//! third of the database time the queues cost); a handed-over row is written twice in all:
//! recorded, then settled.
//!
//! Nothing handed over can be lost: a pass that rolls back stages nothing that is ever sent
//! (the next pass replaces it), and a crash loses only the memory: the rows come due again when
//! their lease ends, exactly as a claimed batch's do.

use std::{
    collections::VecDeque,
    sync::{Mutex, MutexGuard, PoisonError},
};

use tokio::sync::Notify;

/// How much a hand-over holds per attempt its worker makes at once: with the default 32 at
/// once, more than two relay passes bring under load (a pass takes at most 200 outbox rows, and
/// an event makes a message per channel or a delivery per endpoint), so a busy instance hands
/// most of its work over instead of queueing it. What a worker has not started within half
/// its lease is left to the lease (see [`Handoff::take`]).
pub const ROOM_PER_PLACE: usize = 16;

/// The hand-over between one follow-up and its worker.
#[derive(Debug)]
pub struct Handoff<T> {
    state: Mutex<State<T>>,
    capacity: usize,
    /// Rung when items are queued. Apart from the worker's own bell, which means "look at the
    /// database", so that a worker fed from here does not claim (and find nothing) each time.
    bell: Notify,
}

#[derive(Debug)]
struct State<T> {
    /// Recorded by a pass whose transaction has not committed yet.
    staged: Vec<T>,
    /// Committed, waiting for the worker.
    queued: VecDeque<T>,
    /// The worker stopped: nothing more is handed over.
    closed: bool,
}

impl<T> Handoff<T> {
    /// A hand-over holding at most `capacity` items for the worker.
    pub fn new(capacity: usize) -> Self {
        let state = Mutex::new(State { staged: Vec::new(), queued: VecDeque::new(), closed: false });
        Self { state, capacity, bell: Notify::new() }
    }

    fn state(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many items a pass may record leased now (none once the worker stopped).
    pub fn room(&self) -> usize {
        let state = self.state();
        if state.closed {
            0
        } else {
            self.capacity.saturating_sub(state.queued.len())
        }
    }

    /// Stages what a pass recorded leased, replacing whatever a pass that rolled back staged.
    pub fn stage(&self, items: Vec<T>) {
        self.state().staged = items;
    }

    /// Queues what was staged, now that its pass committed; returns whether anything was.
    /// After [`Handoff::close`] the staged items are dropped: their leases end and they are
    /// claimed then.
    pub fn commit(&self) -> bool {
        let mut state = self.state();
        let staged = std::mem::take(&mut state.staged);
        if state.closed || staged.is_empty() {
            return false;
        }
        state.queued.extend(staged);
        drop(state);
        self.bell.notify_one();
        true
    }

    /// Resolves when items were queued since the last time it resolved.
    pub async fn ready(&self) {
        self.bell.notified().await;
    }

    /// Up to `n` queued items, oldest first, of those `usable` accepts. The others are dropped:
    /// a worker far behind (a mail server timing out) must not start an attempt whose lease
    /// could end before it does, when another worker may claim the row again; each is claimed
    /// after its lease like any other.
    pub fn take(&self, n: usize, usable: impl Fn(&T) -> bool) -> Vec<T> {
        let mut state = self.state();
        let mut taken = Vec::with_capacity(n.min(state.queued.len()));
        while taken.len() < n {
            let Some(item) = state.queued.pop_front() else { break };
            if usable(&item) {
                taken.push(item);
            } else {
                metrics::counter!("handoff_expired_total").increment(1);
            }
        }
        taken
    }

    /// Stops the hand-over; returns what was queued and not taken, for the worker to give back.
    pub fn close(&self) -> Vec<T> {
        let mut state = self.state();
        state.closed = true;
        state.staged.clear();
        state.queued.drain(..).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_committed_reaches_the_worker() {
        let handoff = Handoff::new(3);
        assert_eq!(handoff.room(), 3);
        handoff.stage(vec![1, 2]);
        // The pass rolled back; the next one replaces what it staged.
        handoff.stage(vec![3]);
        assert!(handoff.commit());
        assert!(!handoff.commit(), "a commit queues what was staged once");
        assert_eq!(handoff.room(), 2);
        handoff.stage(vec![4, 5]);
        assert!(handoff.commit());
        assert_eq!(handoff.room(), 0);
        assert_eq!(handoff.take(2, |_| true), [3, 4]);
        assert_eq!(handoff.take(5, |_| true), [5]);
        assert!(handoff.take(1, |_| true).is_empty());
    }

    #[test]
    fn a_closed_handoff_takes_nothing_and_gives_back_the_rest() {
        let handoff = Handoff::new(4);
        handoff.stage(vec![1, 2]);
        handoff.commit();
        handoff.stage(vec![3]);
        assert_eq!(handoff.close(), [1, 2]);
        assert_eq!(handoff.room(), 0);
        assert!(!handoff.commit(), "staged before the close: left to its lease");
        assert!(handoff.take(3, |_| true).is_empty());
    }

    #[test]
    fn items_whose_lease_is_too_short_are_left_to_it() {
        let handoff = Handoff::new(8);
        handoff.stage(vec![1, 2, 3, 4, 5]);
        handoff.commit();
        assert_eq!(handoff.take(2, |i| i % 2 == 1), [1, 3]);
        assert_eq!(handoff.take(5, |i| i % 2 == 1), [5], "4 is dropped on the way");
        assert_eq!(handoff.room(), 8);
    }
}
