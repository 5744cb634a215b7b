//! Live availability: committed slot changes on their way from the outbox to every
//! `slotAvailability` subscriber of every instance.
//!
//! The path of one change:
//!
//! 1. a booking or cancel writes an outbox row in its own transaction and, after the commit,
//!    rings the [`RelaySink`] (the booking service's [`CommitSink`]);
//! 2. the `relay` of that instance (or any instance's, polling) claims the row, publishes its
//!    slot change (Redis `PUBLISH {prefix}:slots`, or straight to the bus without Redis),
//!    hands its appointment event to every [`FollowUp`] (messages, webhooks) and deletes the
//!    row, the last two in one transaction;
//! 3. each instance's single Redis subscriber (`pubsub`) hands it to the in-process bus
//!    (`bus`: one broadcast topic per doctor);
//! 4. each subscription (`stream`) filters by its doctor and date, coalesces what its client
//!    has not read yet to the latest state per slot, and never sends a version it already sent.

mod backoff;
pub(crate) mod bus;
pub mod follow_up;
pub mod handoff;
pub(crate) mod pubsub;
pub(crate) mod relay;
pub mod settings;
pub(crate) mod stream;

use std::{sync::Arc, time::Duration};

use chrono::{NaiveDate, Utc};
use futures_util::Stream;
use tokio::{sync::watch, task::JoinHandle};

pub use follow_up::{FollowUp, Notification};
pub use handoff::Handoff;
pub use relay::RelaySink;
pub use settings::Settings;
pub use stream::UPCOMING_WINDOW;

pub use crate::model::{ChangeObserver, CommitSink, SlotChange};

use crate::{
    db::{doctors, Db, StoreError},
    model::doctor_day,
};

/// A failure inside the live-availability machinery; logged and retried, never shown to clients.
#[derive(Debug, thiserror::Error)]
pub enum EventsError {
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Redis failed or is unreachable.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// A change could not be encoded.
    #[error("encoding a change: {0}")]
    Encode(#[from] serde_json::Error),
    /// Redis did not answer in time.
    #[error("{0} timed out")]
    Timeout(&'static str),
}

/// How an instance's live availability is set up.
pub struct LiveSettings {
    /// Redis for pub/sub between instances; `None`: in-process only (a single process).
    pub redis: Option<redis::Client>,
    /// Prefix of the Redis channel (`{prefix}:slots`).
    pub redis_prefix: String,
    /// Longest wait for one Redis publish round trip.
    pub redis_timeout: Duration,
    /// The relay's own settings (`OUTBOX_POLL_MS`, `OUTBOX_GATHER_MS`).
    pub relay: Settings,
    /// Subscriptions reading their snapshot from the database at once.
    pub snapshot_concurrency: usize,
    /// Who records the messages and deliveries that committed appointment events call for.
    pub follow_ups: Vec<Arc<dyn FollowUp>>,
    /// Told about every change that reaches the bus, before the subscriptions are, and about
    /// this instance's own commits right after each (through the commit sink).
    pub observer: Option<Arc<dyn ChangeObserver>>,
    /// The instance's traces (a relay pass joins the traces of the changes it carries).
    pub tracing: crate::telemetry::Tracing,
}

/// The subscription side of live availability, shared by every connection of an instance.
#[derive(Clone)]
pub struct Live {
    bus: bus::Bus,
    reader: stream::SnapshotReader,
    stopping: watch::Receiver<bool>,
}

/// The relay and Redis subscriber tasks of an instance. They stop when [`LiveTasks::shutdown`]
/// runs or this value is dropped, and every open subscription ends with them.
pub struct LiveTasks {
    stop: watch::Sender<bool>,
    bus: bus::Bus,
    handles: Vec<JoinHandle<()>>,
}

impl Live {
    /// Starts the relay (and the Redis subscriber, with Redis) on `db`. Returns the handle for
    /// subscriptions, the sink the booking service rings after each commit, and the tasks.
    pub fn start(db: Db, settings: LiveSettings) -> (Self, RelaySink, LiveTasks) {
        let bus = bus::Bus::new(settings.observer.clone());
        let (stop, stopping) = watch::channel(false);
        let sink = RelaySink::new(settings.observer.clone());
        let mut handles = Vec::new();
        let publisher = match settings.redis {
            Some(client) => {
                let channel = pubsub::channel(&settings.redis_prefix);
                handles.push(tokio::spawn(pubsub::run_subscriber(
                    client.clone(),
                    channel.clone(),
                    bus.clone(),
                    stopping.clone(),
                )));
                relay::Publisher::Redis(Box::new(pubsub::RedisPublisher::new(client, channel, settings.redis_timeout)))
            }
            None => relay::Publisher::Local(bus.clone()),
        };
        let relay = relay::Relay {
            db: db.clone(),
            publisher,
            follow_ups: settings.follow_ups,
            settings: settings.relay,
            tracing: settings.tracing,
        };
        handles.push(tokio::spawn(relay.run(sink.clone(), stopping.clone())));
        let reader = stream::SnapshotReader::new(db, settings.snapshot_concurrency);
        (Self { bus: bus.clone(), reader, stopping }, sink, LiveTasks { stop, bus, handles })
    }

    /// `slotAvailability`: the current state of the doctor's slots of `date` (in the doctor's
    /// zone) or, without a date, of the slots starting in the next [`UPCOMING_WINDOW`]; then
    /// each committed change of them. `None` for an unknown doctor.
    pub async fn slot_availability(
        &self,
        doctor_id: i64,
        date: Option<NaiveDate>,
    ) -> Result<Option<impl Stream<Item = SlotChange> + Send + 'static>, StoreError> {
        let Some(doctor) = doctors::find(self.reader.db().conn(), doctor_id).await? else {
            return Ok(None);
        };
        let range = match date {
            Some(date) => doctor_day(doctor.id, &doctor.timezone, date).map_err(StoreError::Inconsistent)?,
            None => stream::upcoming(doctor.id, Utc::now()),
        };
        // Listen before reading the snapshot: nothing falls between the two.
        let listener = self.bus.listen(doctor.id);
        Ok(Some(stream::open(stream::Watch { range }, listener, self.reader.clone()).await?))
    }

    /// Resolves when the instance starts stopping (WebSocket connections then close).
    pub async fn stopped(&self) {
        // An error means the tasks are gone: stopped as well.
        stopped(&mut self.stopping.clone()).await;
    }
}

/// Resolves once `stop` says true or its sender is gone (the guard `wait_for` returns is dropped
/// here: held across an await it would make the task `!Send`).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await.map(drop);
}

impl LiveTasks {
    /// Stops the relay and the subscriber, waits for them (briefly), and ends the subscriptions.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        self.bus.close();
        for mut handle in std::mem::take(&mut self.handles) {
            if tokio::time::timeout(Duration::from_secs(5), &mut handle).await.is_err() {
                tracing::warn!("a live-availability task did not stop in time; aborting it");
                handle.abort();
            }
        }
    }
}

impl Drop for LiveTasks {
    fn drop(&mut self) {
        // `send_replace` works without receivers too.
        self.stop.send_replace(true);
        self.bus.close();
    }
}
