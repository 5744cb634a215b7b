//! The bulkhead: booking and cancel attempts may hold at most N database connections at once,
//! so the rest of the pool stays free for slot reads and other pages during a burst. An
//! attempt that cannot get in within the queue timeout is answered `OVERLOADED` (retryable),
//! never left to pile up on the pool.

use std::{
    sync::{
        atomic::{AtomicI64, Ordering},
        Arc,
    },
    time::Duration,
};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Bounded concurrency with a queue timeout.
pub struct Bulkhead {
    permits: Arc<Semaphore>,
    size: usize,
    queue_timeout: Duration,
    waiting: AtomicI64,
}

/// A place inside the bulkhead, given back when dropped.
pub struct Entered {
    _permit: OwnedSemaphorePermit,
}

/// The bulkhead was full for the whole queue timeout.
#[derive(Debug, thiserror::Error)]
#[error("booking attempts saturated for {0:?}")]
pub struct Saturated(pub Duration);

impl Bulkhead {
    /// `concurrency` attempts at once, each waiting at most `queue_timeout` for its turn.
    pub fn new(concurrency: u32, queue_timeout: Duration) -> Self {
        let permits = usize::try_from(concurrency).unwrap_or(usize::MAX).clamp(1, Semaphore::MAX_PERMITS);
        Self { permits: Arc::new(Semaphore::new(permits)), size: permits, queue_timeout, waiting: AtomicI64::new(0) }
    }

    /// Waits for a place, at most the queue timeout.
    pub async fn enter(&self) -> Result<Entered, Saturated> {
        // The fast path takes no timer and touches no gauge.
        if let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned() {
            return Ok(Entered { _permit: permit });
        }
        let waiting = self.waiting.fetch_add(1, Ordering::Relaxed) + 1;
        metrics::gauge!("booking_bulkhead_waiting").set(waiting as f64);
        let got = tokio::time::timeout(self.queue_timeout, Arc::clone(&self.permits).acquire_owned()).await;
        let waiting = self.waiting.fetch_sub(1, Ordering::Relaxed) - 1;
        metrics::gauge!("booking_bulkhead_waiting").set(waiting as f64);
        match got {
            Ok(Ok(permit)) => Ok(Entered { _permit: permit }),
            // The semaphore is never closed; a closed one means no entry either.
            Ok(Err(_)) | Err(_) => {
                metrics::counter!("booking_bulkhead_rejected_total").increment(1);
                Err(Saturated(self.queue_timeout))
            }
        }
    }

    /// Places taken right now (for `/metrics`).
    pub fn in_use(&self) -> usize {
        self.size.saturating_sub(self.permits.available_permits())
    }

    /// Attempts waiting for a place right now (for `/metrics`).
    pub fn waiting(&self) -> i64 {
        self.waiting.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn saturated_after_the_queue_timeout() {
        let bulkhead = Bulkhead::new(1, Duration::from_millis(20));
        let first = bulkhead.enter().await;
        assert!(first.is_ok());
        assert!(bulkhead.enter().await.is_err());
        drop(first);
        assert!(bulkhead.enter().await.is_ok());
    }
}
