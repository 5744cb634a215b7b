//! Concurrent retries of one request answered by one attempt.
//!
//! A client that times out and retries, or a partner's queue that redelivers, can send the same
//! booking (same caller, key and input) many times at once. Only the first of them, the
//! leader, goes through the guards and the database; the others wait for its answer and get
//! it as a replay. So concurrent retries cost one rate-limit count and one transaction, and
//! none of them is refused for the others' sake. Across instances the database still decides:
//! each instance's leader meets the unique key, and the later ones replay.
//!
//! A leader that never finishes (its request was cancelled) drops its flight unanswered; its
//! followers then take their own turn.

use std::{
    collections::HashMap,
    hash::Hash,
    sync::{Arc, Mutex, PoisonError},
};

use tokio::sync::watch;

/// The flights in progress, by request.
pub struct Flights<K, V> {
    open: Arc<Mutex<HashMap<K, watch::Receiver<Option<V>>>>>,
}

impl<K, V> Default for Flights<K, V> {
    fn default() -> Self {
        Self { open: Arc::default() }
    }
}

/// What a request does: lead the flight, or wait for the leader.
pub enum Flight<K: Hash + Eq, V> {
    /// No flight for this request: answer it, then [`Leader::land`].
    Lead(Leader<K, V>),
    /// A flight is in progress: its answer, or `None` when the leader gave up.
    Follow(watch::Receiver<Option<V>>),
}

/// The request answering for the others.
pub struct Leader<K: Hash + Eq, V> {
    key: Option<K>,
    answer: watch::Sender<Option<V>>,
    open: Arc<Mutex<HashMap<K, watch::Receiver<Option<V>>>>>,
}

impl<K: Hash + Eq + Clone, V: Clone> Flights<K, V> {
    /// Joins the flight of `key`, or opens it.
    pub fn join(&self, key: K) -> Flight<K, V> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(rx) = open.get(&key) {
            return Flight::Follow(rx.clone());
        }
        let (answer, rx) = watch::channel(None);
        open.insert(key.clone(), rx);
        Flight::Lead(Leader { key: Some(key), answer, open: Arc::clone(&self.open) })
    }

    /// Flights in progress (for tests and metrics).
    pub fn in_progress(&self) -> usize {
        self.open.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

/// Waits for the leader's answer; `None` when it gave up without one.
pub async fn answer<V: Clone>(mut rx: watch::Receiver<Option<V>>) -> Option<V> {
    match rx.wait_for(Option::is_some).await {
        Ok(v) => v.clone(),
        Err(_) => None,
    }
}

impl<K: Hash + Eq, V> Leader<K, V> {
    /// Closes the flight with `value` for the followers (`None`: they take their own turn).
    pub fn land(mut self, value: Option<V>) {
        self.close();
        if let Some(v) = value {
            self.answer.send_replace(Some(v));
        }
    }

    fn close(&mut self) {
        if let Some(key) = self.key.take() {
            // Closed before answering: a request that joins from now on leads a new flight
            // instead of reading this one's answer.
            self.open.lock().unwrap_or_else(PoisonError::into_inner).remove(&key);
        }
    }
}

impl<K: Hash + Eq, V> Drop for Leader<K, V> {
    fn drop(&mut self) {
        // Dropped unanswered (a cancelled request): dropping the sender wakes the followers.
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn followers_get_the_leaders_answer_and_a_dropped_leader_frees_them() {
        let flights: Flights<&str, u32> = Flights::default();
        let Flight::Lead(leader) = flights.join("k") else { panic!("the first request leads") };
        let Flight::Follow(rx) = flights.join("k") else { panic!("the second follows") };
        assert!(matches!(flights.join("other"), Flight::Lead(_)), "another request flies alone");
        leader.land(Some(7));
        assert_eq!(answer(rx).await, Some(7));
        assert_eq!(flights.in_progress(), 0);

        let Flight::Lead(leader) = flights.join("k") else { panic!("a landed flight is gone") };
        let Flight::Follow(rx) = flights.join("k") else { panic!("follows") };
        drop(leader);
        assert_eq!(answer(rx).await, None, "a leader that gave up frees its followers");
        assert!(matches!(flights.join("k"), Flight::Lead(_)));
    }
}
