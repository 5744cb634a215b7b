//! The in-process bus: one broadcast per doctor, created when the doctor's first subscription
//! opens and dropped with its last. It carries committed changes, and "re-read the database"
//! when changes may have been missed.
//!
//! A topic per doctor (rather than one channel for the whole instance) means a change wakes only
//! the subscriptions that can use it; with thousands of widgets open on different doctors the
//! others stay asleep.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex, MutexGuard, PoisonError,
    },
    time::Instant,
};

use tokio::sync::broadcast;

use super::{ChangeObserver, SlotChange};

/// Notes a doctor's topic keeps for subscriptions that have not read them yet. A subscription
/// that falls further behind re-reads its slots from the database instead (see `stream`), so a
/// slow client costs no more memory than this.
pub(super) const TOPIC_CAPACITY: usize = 256;

/// What travels on a doctor's topic.
#[derive(Clone, Debug)]
pub(super) enum Note {
    /// A committed change of one of the doctor's slots.
    Change(Arc<SlotChange>),
    /// Changes may have been missed (Redis came back at this moment): re-read the slots from
    /// the database, with a read that begins after it.
    Reread(Instant),
}

/// The in-process bus of one instance (cheap to clone).
#[derive(Clone)]
pub(super) struct Bus {
    inner: Arc<Inner>,
}

type Topics = HashMap<i64, broadcast::Sender<Note>>;

struct Inner {
    topics: Mutex<Topics>,
    closed: AtomicBool,
    observer: Option<Arc<dyn ChangeObserver>>,
}

/// One subscription's view of the bus: its doctor's topic. Dropping it drops the topic when it
/// was the last listener. The topic ends (`RecvError::Closed`) when the instance stops.
pub(super) struct Listener {
    pub(super) notes: broadcast::Receiver<Note>,
    doctor_id: i64,
    bus: Bus,
}

impl Bus {
    /// An open bus with no topics, telling `observer` about every change and resync.
    pub(super) fn new(observer: Option<Arc<dyn ChangeObserver>>) -> Self {
        let inner = Inner { topics: Mutex::new(HashMap::new()), closed: AtomicBool::new(false), observer };
        Self { inner: Arc::new(inner) }
    }

    fn topics(&self) -> MutexGuard<'_, Topics> {
        // The map stays consistent even if a holder panicked: every operation is one call.
        self.inner.topics.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Listens to `doctor_id`'s topic from now on.
    pub(super) fn listen(&self, doctor_id: i64) -> Listener {
        let mut topics = self.topics();
        let notes = if self.inner.closed.load(Ordering::Acquire) {
            // Closed: a receiver whose sender is gone, so the subscription ends at once.
            broadcast::channel(1).0.subscribe()
        } else {
            topics.entry(doctor_id).or_insert_with(|| broadcast::channel(TOPIC_CAPACITY).0).subscribe()
        };
        Listener { notes, doctor_id, bus: self.clone() }
    }

    /// Hands a committed change to the subscriptions of its doctor on this instance.
    pub(super) fn publish(&self, change: SlotChange) {
        if let Some(observer) = &self.inner.observer {
            observer.changed(&change);
        }
        let topics = self.topics();
        if let Some(topic) = topics.get(&change.doctor_id) {
            // An error only means nobody listens any more.
            let _ = topic.send(Note::Change(Arc::new(change)));
        }
    }

    /// Tells the observer that the doctor's schedule gained slots. Subscriptions hear nothing:
    /// no slot changed.
    pub(super) fn published(&self, doctor_id: i64) {
        if let Some(observer) = &self.inner.observer {
            observer.published(doctor_id);
        }
    }

    /// Tells every subscription to re-read its slots from the database.
    pub(super) fn resync(&self) {
        if let Some(observer) = &self.inner.observer {
            observer.may_have_missed_changes();
        }
        let now = Instant::now();
        for topic in self.topics().values() {
            let _ = topic.send(Note::Reread(now));
        }
    }

    /// Ends every subscription (the instance is stopping).
    pub(super) fn close(&self) {
        let mut topics = self.topics();
        self.inner.closed.store(true, Ordering::Release);
        topics.clear();
    }

    /// Doctors with at least one open subscription here.
    #[cfg(test)]
    pub(super) fn topic_count(&self) -> usize {
        self.topics().len()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let mut topics = self.bus.topics();
        // Under the lock nobody can subscribe meanwhile; a count of one is this listener.
        if topics.get(&self.doctor_id).is_some_and(|t| t.receiver_count() <= 1) {
            topics.remove(&self.doctor_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    fn change(doctor_id: i64, version: i64) -> SlotChange {
        SlotChange { slot_id: 1, doctor_id, start_at: Utc::now(), capacity: 1, booked_count: 1, version, closed: false }
    }

    #[tokio::test]
    async fn topics_live_as_long_as_their_listeners() -> Result<(), broadcast::error::RecvError> {
        let bus = Bus::new(None);
        let mut a = bus.listen(7);
        let b = bus.listen(7);
        let mut other = bus.listen(8);
        assert_eq!(bus.topic_count(), 2);
        bus.publish(change(7, 1));
        assert!(matches!(a.notes.recv().await?, Note::Change(c) if c.version == 1));
        assert!(other.notes.try_recv().is_err(), "another doctor's change woke this listener");
        bus.resync();
        assert!(matches!(other.notes.recv().await?, Note::Reread(_)));
        drop(b);
        assert_eq!(bus.topic_count(), 2);
        drop(a);
        assert_eq!(bus.topic_count(), 1);
        bus.close();
        assert_eq!(bus.topic_count(), 0);
        assert!(matches!(other.notes.recv().await, Err(broadcast::error::RecvError::Closed)));
        assert!(matches!(bus.listen(9).notes.recv().await, Err(broadcast::error::RecvError::Closed)));
        Ok(())
    }
}
