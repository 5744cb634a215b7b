//! The outbox relay: publishes the slot changes (and published schedules) of the outbox rows
//! written by committed changes, records the follow-up work of their appointment events, and
//! prunes them.
//!
//! Every instance runs one. It is woken by its own commits (no polling delay on the hot path)
//! and polls as a fallback, so rows of a crashed instance, or rows left while Redis was down,
//! still go out. On PostgreSQL a pass claims and deletes rows (`FOR UPDATE SKIP LOCKED`) in a
//! transaction it commits only after publishing them: instances never publish one row at the
//! same time, and a failed publish rolls back and leaves the rows for the next attempt.
//! Delivery is at least once; subscribers drop repeats by `version`.

use std::{sync::Arc, time::Duration};

use tokio::sync::{watch, Notify};

use super::{
    backoff::Backoff,
    bus::Bus,
    follow_up::{FollowUp, Notification},
    pubsub::RedisPublisher,
    ChangeObserver, CommitSink, EventsError, SlotChange,
};
use tracing::Instrument;

use crate::{
    db::{
        entity::outbox as outbox_row,
        outbox::{self, CLAIM_BATCH},
        Db,
    },
    telemetry::{traces::TraceParent, Tracing},
};

/// First and longest wait after a failed pass (Redis or the database down).
const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// The commit sink of the booking service: tells this instance's change observers (the caches
/// made of reads) right after each commit, and wakes the relay, which publishes the change to
/// every instance.
#[derive(Clone, Default)]
pub struct RelaySink {
    wake: Arc<Notify>,
    observer: Option<Arc<dyn ChangeObserver>>,
}

impl RelaySink {
    /// A sink that tells `observer` (the relay takes a clone of its bell).
    pub fn new(observer: Option<Arc<dyn ChangeObserver>>) -> Self {
        Self { wake: Arc::default(), observer }
    }
}

impl CommitSink for RelaySink {
    fn committed(&self, change: SlotChange) {
        // The observers hear of the change again from the bus, which costs them a repeat of
        // what they did; without this, they would hear of it only after the relay's pass, and
        // a client reading right after its own write could be answered from before it.
        if let Some(observer) = &self.observer {
            observer.changed(&change);
        }
        // The change itself travels through the outbox row; this only saves the poll delay.
        // `notify_one` stores a permit, so a commit during a pass triggers another pass.
        self.wake.notify_one();
    }

    fn published(&self, doctor_id: i64) {
        if let Some(observer) = &self.observer {
            observer.published(doctor_id);
        }
        self.wake.notify_one();
    }
}

/// Where the relay sends changes.
pub(super) enum Publisher {
    /// Straight to this instance's bus (no Redis: a single process).
    Local(Bus),
    /// To Redis, whence every instance's subscriber picks them up.
    Redis(Box<RedisPublisher>),
}

impl Publisher {
    /// Sends one pass: its slot changes, and the doctors whose schedules gained slots.
    async fn publish(&mut self, changes: Vec<SlotChange>, published: Vec<i64>) -> Result<(), EventsError> {
        match self {
            Self::Local(bus) => {
                // One process: the instance that published has told its own caches already.
                drop(published);
                changes.into_iter().for_each(|c| bus.publish(c));
                Ok(())
            }
            Self::Redis(redis) => redis.publish(&changes, &published).await,
        }
    }
}

/// One instance's relay.
pub(super) struct Relay {
    pub(super) db: Db,
    pub(super) publisher: Publisher,
    /// Who records the messages and deliveries the events call for.
    pub(super) follow_ups: Vec<Arc<dyn FollowUp>>,
    /// Its poll, and how long a pass waits after a commit rang, so that it carries the changes
    /// of the commits that follow it closely.
    pub(super) settings: super::Settings,
    /// The instance's traces.
    pub(super) tracing: Tracing,
}

impl Relay {
    /// Runs until `stop` fires: a pass per wake-up or poll tick, retrying failures with backoff.
    pub(super) async fn run(mut self, sink: RelaySink, mut stop: watch::Receiver<bool>) {
        let mut backoff = Backoff::new(RETRY_MIN, RETRY_MAX);
        loop {
            let wait = match self.drain().await {
                Ok(()) => {
                    backoff.reset();
                    self.settings.poll_interval
                }
                Err(error) => {
                    tracing::warn!(%error, "outbox relay pass failed; rows stay for the next attempt");
                    metrics::counter!("outbox_relay_failures_total").increment(1);
                    backoff.next_delay()
                }
            };
            tokio::select! {
                () = sink.wake.notified() => tokio::time::sleep(self.settings.gather).await,
                () = tokio::time::sleep(wait) => {}
                () = super::stopped(&mut stop) => return,
            }
        }
    }

    /// Passes until the outbox is empty (or what is left is locked by other instances).
    async fn drain(&mut self) -> Result<(), EventsError> {
        // Each pass bounded by `DB_UNAVAILABLE_TIMEOUT_MS`: a pass whose commit waits for a
        // synchronous standby that went away is cut, and the rows wait for the next pass.
        let db = self.db.clone();
        while db.bounded(self.pass()).await? == CLAIM_BATCH as usize {}
        Ok(())
    }

    /// Claims, publishes, records the follow-up work of and prunes one batch; returns how many
    /// rows it took. A failure at any step drops the claim: its rows wait for the next pass.
    async fn pass(&mut self) -> Result<usize, EventsError> {
        let Some(claimed) = outbox::claim(&self.db, CLAIM_BATCH).await? else {
            return Ok(0);
        };
        // The rest of the pass joins the traces of the changes it carries: a child of the one
        // when the rows come from one, else linked to each.
        let span = tracing::info_span!(
            "outbox_relay",
            rows = claimed.rows.len(),
            otel.name = "outbox relay",
            otel.kind = "consumer",
        );
        let parents = claimed.rows.iter().filter_map(|r| r.trace_context.as_deref().and_then(TraceParent::parse));
        self.tracing.adopt_all(&span, parents);
        self.publish_and_record(claimed).instrument(span).await
    }

    /// Publishes the claimed rows, records their follow-up work and prunes them.
    async fn publish_and_record(&mut self, mut claimed: outbox::Claimed) -> Result<usize, EventsError> {
        // Live availability first: it does not wait for the follow-up work.
        let changes = claimed.rows.iter().filter_map(outbox_row::Model::slot_change).collect();
        let published = claimed.rows.iter().filter_map(outbox_row::Model::published_doctor).collect();
        self.publisher.publish(changes, published).await?;
        let events: Vec<Notification> = claimed.rows.iter().filter_map(Notification::from_row).collect();
        let recorded = !events.is_empty() && !self.follow_ups.is_empty();
        if recorded {
            let tx = claimed.transaction().await?;
            for follow_up in &self.follow_ups {
                follow_up.record(tx, &events).await?;
            }
        }
        let taken = claimed.rows.len();
        claimed.commit().await?;
        if recorded {
            self.follow_ups.iter().for_each(|f| f.committed());
        }
        metrics::counter!("outbox_published_total").increment(taken as u64);
        Ok(taken)
    }
}
