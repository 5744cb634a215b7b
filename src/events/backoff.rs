//! Exponential backoff with jitter, for retrying Redis and the database.

use std::time::Duration;

use rand::Rng;

/// Delays that double from `min` to `max`, each shortened by up to a quarter at random so
/// instances that lost Redis together do not all come back in the same millisecond.
#[derive(Clone, Debug)]
pub(super) struct Backoff {
    min: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    /// Starts at `min`.
    pub(super) fn new(min: Duration, max: Duration) -> Self {
        Self { min, max, next: min }
    }

    /// Back to `min` after a success.
    pub(super) fn reset(&mut self) {
        self.next = self.min;
    }

    /// The next delay.
    pub(super) fn next_delay(&mut self) -> Duration {
        let base = self.next;
        self.next = (self.next * 2).min(self.max);
        let jitter = rand::thread_rng().gen_range(0.0..0.25);
        base.mul_f64(1.0 - jitter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(400));
        let delays: Vec<_> = (0..4).map(|_| b.next_delay().as_millis()).collect();
        assert!((75..=100).contains(&delays[0]), "{delays:?}");
        assert!((150..=200).contains(&delays[1]), "{delays:?}");
        assert!((300..=400).contains(&delays[2]) && (300..=400).contains(&delays[3]), "{delays:?}");
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(100));
    }
}
