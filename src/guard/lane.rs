//! The booking lane: a Tokio runtime of its own for the operations that move seats (book,
//! hold, confirm, cancel, reschedule), and for the Redis connection and the coalesced lookups
//! they wait on.
//!
//! Under a saturating read load every worker of the main runtime always has a ready task: each
//! time a booking's future is woken (its Redis answer, its batched lookup, its statement) it
//! queues behind all of them again, and a booking waits five or six such turns where a cached
//! read waits one. On a runtime of its own, with threads that are idle most of the time, a
//! booking's wake-ups are served at once (the operating system favours threads that sleep), so
//! it waits for the main runtime only to read its request and to write its answer, as a read
//! does. `lane_wait_seconds{lane}` measures the turn a task waits before it runs.
//!
//! Off by default (`BOOKING_LANE_THREADS=0`): on the project's two cores its threads compete
//! with the main runtime's for the same cores, and every alternating run made bookings slower
//! with it (the 50:1 mix's booking p99 25–35 ms against 11–15 ms without; the opening with
//! 5,000 reads/s 39–73 ms against 22–30 ms). It is for machines with cores to spare.

use std::{
    future::Future,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use tokio::runtime::{Handle, Runtime};
use tracing::Instrument;

/// A runtime that is shut down without waiting when its last handle goes (dropping a runtime
/// inside async code would panic).
struct Owned(Mutex<Option<Runtime>>);

impl Drop for Owned {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.lock().unwrap_or_else(PoisonError::into_inner).take() {
            runtime.shutdown_background();
        }
    }
}

/// Where a kind of work runs: its own runtime, or the caller's.
#[derive(Clone)]
pub struct Lane {
    name: &'static str,
    handle: Option<Handle>,
    _runtime: Option<Arc<Owned>>,
}

impl std::fmt::Debug for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lane").field("name", &self.name).field("dedicated", &self.handle.is_some()).finish()
    }
}

/// The lane's task ended without an answer (it panicked, or the runtime is stopping).
#[derive(Debug, thiserror::Error)]
#[error("the {0} lane dropped a task")]
pub struct LaneGone(pub &'static str);

impl Lane {
    /// Work runs where it is awaited (no runtime of its own).
    pub fn inline(name: &'static str) -> Self {
        Self { name, handle: None, _runtime: None }
    }

    /// A runtime of `threads` workers named after the lane; `threads` 0 is [`Lane::inline`].
    pub fn dedicated(name: &'static str, threads: usize) -> std::io::Result<Self> {
        if threads == 0 {
            return Ok(Self::inline(name));
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name(format!("{name}-lane"))
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        probe(name, handle.clone());
        Ok(Self { name, handle: Some(handle), _runtime: Some(Arc::new(Owned(Mutex::new(Some(runtime))))) })
    }

    /// Runs `work` on the lane and waits for it.
    pub async fn run<F>(&self, work: F) -> Result<F::Output, LaneGone>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let Some(handle) = &self.handle else {
            return Ok(work.await);
        };
        handle.spawn(work.in_current_span()).await.map_err(|_| LaneGone(self.name))
    }

    /// Starts `work` on the lane (or on the current runtime, inline) and lets it run.
    pub fn spawn<F>(&self, work: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match &self.handle {
            Some(handle) => handle.spawn(work),
            None => tokio::spawn(work),
        }
    }
}

/// How often a runtime's turn is measured.
const PROBE_EVERY: Duration = Duration::from_millis(50);

/// Measures, on `handle`'s runtime, how late a task that asked to run at an instant actually
/// runs: its queueing, in `lane_wait_seconds{lane}`.
pub fn probe(name: &'static str, handle: Handle) {
    handle.spawn(async move {
        loop {
            let due = Instant::now() + PROBE_EVERY;
            tokio::time::sleep_until(due.into()).await;
            let late = Instant::now().saturating_duration_since(due);
            metrics::histogram!("lane_wait_seconds", "lane" => name).record(late.as_secs_f64());
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn work_runs_on_the_lane_and_answers() -> Result<(), Box<dyn std::error::Error>> {
        let lane = Lane::dedicated("test", 1)?;
        let name = lane.run(async { std::thread::current().name().map(str::to_owned) }).await?;
        assert_eq!(name.as_deref(), Some("test-lane"));
        let inline = Lane::inline("inline").run(async { 7 }).await?;
        assert_eq!(inline, 7);
        let gone = lane.run(async { panic!("a bug") }).await;
        assert!(matches!(gone, Err(LaneGone("test"))), "a panicking task answers LaneGone");
        Ok(())
    }
}
