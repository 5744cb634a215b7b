//! Redis pub/sub between instances: the relay PUBLISHes the changes of each pass on
//! `{prefix}:slots`, and every instance holds ONE subscriber connection that feeds its
//! in-process [`Bus`].
//!
//! A message is a JSON array of changes, in commit order: one message per relay pass, so the
//! cost per change of Redis and of every subscriber falls as load rises. The doctors whose
//! schedules a pass published follow in a message of their own, `{"published": [ids]}`: rare,
//! and an instance that predates it ignores just that message. A message holding one change
//! object (what earlier versions sent) is still understood, for a rolling upgrade.
//!
//! The subscriber is supervised: when the connection drops (or stops answering pings) it
//! reconnects with backoff, resubscribes, and then tells every local subscription to re-read its
//! slots from the database, because changes published while it was away are gone for it.

use std::time::Duration;

use futures_util::StreamExt;
use redis::{aio::MultiplexedConnection, AsyncConnectionConfig, Client};
use tokio::sync::watch;

use super::{backoff::Backoff, bus::Bus, EventsError, SlotChange};

/// How often the subscriber pings Redis to notice a connection that died silently.
const PING_EVERY: Duration = Duration::from_secs(5);
/// First and longest wait between reconnection attempts.
const RECONNECT_MIN: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(2);

/// The channel every instance of a deployment shares. The prefix is part of it because pub/sub
/// channels are global to a Redis server, across its logical databases.
pub(super) fn channel(prefix: &str) -> String {
    format!("{prefix}:slots")
}

/// Publishes changes to Redis over one multiplexed connection, made lazily and remade after
/// any failure.
pub(super) struct RedisPublisher {
    client: Client,
    channel: String,
    timeout: Duration,
    conn: Option<MultiplexedConnection>,
}

impl RedisPublisher {
    /// A publisher on `client`'s server, on `channel`; each round trip gives up after `timeout`.
    pub(super) fn new(client: Client, channel: String, timeout: Duration) -> Self {
        Self { client, channel, timeout, conn: None }
    }

    /// Publishes `changes`, in order, as one message, then the doctors whose schedules gained
    /// slots, if any, as another.
    pub(super) async fn publish(&mut self, changes: &[SlotChange], published: &[i64]) -> Result<(), EventsError> {
        self.send(serde_json::to_vec(changes)?).await?;
        if !published.is_empty() {
            self.send(serde_json::to_vec(&Published { published })?).await?;
        }
        Ok(())
    }

    async fn send(&mut self, payload: Vec<u8>) -> Result<(), EventsError> {
        let mut publish = redis::cmd("PUBLISH");
        publish.arg(&self.channel).arg(payload);
        let conn = match &mut self.conn {
            Some(conn) => conn,
            None => {
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(self.timeout))
                    .set_response_timeout(Some(self.timeout));
                self.conn.insert(self.client.get_multiplexed_async_connection_with_config(&config).await?)
            }
        };
        let sent = publish.query_async::<redis::Value>(conn).await.map(drop);
        if sent.is_err() {
            // The next attempt starts on a fresh connection.
            self.conn = None;
        }
        Ok(sent?)
    }
}

/// The instance's one Redis subscriber: forwards every change on `channel` to `bus` until
/// `stop` fires, reconnecting whenever it must.
pub(super) async fn run_subscriber(client: Client, channel: String, bus: Bus, mut stop: watch::Receiver<bool>) {
    let mut backoff = Backoff::new(RECONNECT_MIN, RECONNECT_MAX);
    let mut lost_once = false;
    loop {
        let attempt = tokio::select! {
            attempt = subscribe(&client, &channel) => attempt,
            () = super::stopped(&mut stop) => return,
        };
        match attempt {
            Ok((mut sink, mut messages)) => {
                backoff.reset();
                metrics::gauge!("redis_subscriber_up").set(1.0);
                if lost_once {
                    tracing::info!(channel, "Redis subscriber is back; subscriptions re-read their slots");
                }
                // Whatever was published while this connection was not subscribed is lost to it:
                // every subscription re-reads its slots now (also on the first connection, which
                // may come after the first subscriptions of a starting instance).
                bus.resync();
                let mut ping = tokio::time::interval(PING_EVERY);
                ping.reset();
                loop {
                    tokio::select! {
                        msg = messages.next() => match msg {
                            Some(msg) => forward(&bus, msg.get_payload_bytes()),
                            None => break,
                        },
                        _ = ping.tick() => {
                            // Subscribed, Redis answers PING with `["pong", ""]`: any value will do.
                            let answered = tokio::time::timeout(PING_EVERY, sink.ping::<redis::Value>()).await;
                            if !matches!(answered, Ok(Ok(_))) {
                                break;
                            }
                        }
                        () = super::stopped(&mut stop) => return,
                    }
                }
                tracing::warn!(channel, "lost the Redis subscriber connection; reconnecting");
            }
            Err(error) => tracing::warn!(channel, %error, "cannot subscribe to Redis; retrying"),
        }
        lost_once = true;
        metrics::gauge!("redis_subscriber_up").set(0.0);
        tokio::select! {
            () = tokio::time::sleep(backoff.next_delay()) => {}
            () = super::stopped(&mut stop) => return,
        }
    }
}

async fn subscribe(
    client: &Client,
    channel: &str,
) -> Result<(redis::aio::PubSubSink, redis::aio::PubSubStream), EventsError> {
    let connect = async {
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(channel).await?;
        Ok::<_, EventsError>(pubsub.split())
    };
    tokio::time::timeout(RECONNECT_MAX * 2, connect).await.map_err(|_| EventsError::Timeout("redis subscribe"))?
}

/// The doctors whose schedules one relay pass published (sent borrowed, read owned).
#[derive(serde::Serialize, serde::Deserialize)]
struct Published<T = Vec<i64>> {
    published: T,
}

/// What one message on the channel holds.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum Message {
    /// The changes of one relay pass.
    Batch(Vec<SlotChange>),
    /// The published schedules of one relay pass.
    Published(Published),
    /// One change, as earlier versions published them.
    One(SlotChange),
}

fn forward(bus: &Bus, payload: &[u8]) {
    match serde_json::from_slice::<Message>(payload) {
        Ok(Message::Batch(changes)) => changes.into_iter().for_each(|c| bus.publish(c)),
        Ok(Message::Published(p)) => p.published.into_iter().for_each(|d| bus.published(d)),
        Ok(Message::One(change)) => bus.publish(change),
        // Another deployment's garbage on our channel must not stop the subscriber.
        Err(error) => tracing::warn!(%error, "ignored a malformed message on the slots channel"),
    }
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use tokio::sync::broadcast::error::TryRecvError;

    use super::*;
    use crate::events::bus::{Listener, Note};

    fn change(slot_id: i64, version: i64) -> SlotChange {
        SlotChange { slot_id, doctor_id: 7, start_at: Utc::now(), capacity: 2, booked_count: 1, version, closed: false }
    }

    fn versions(listener: &mut Listener) -> Vec<i64> {
        let mut seen = Vec::new();
        loop {
            match listener.notes.try_recv() {
                Ok(Note::Change(c)) => seen.push(c.version),
                Ok(Note::Reread(_)) => seen.push(-1),
                Err(TryRecvError::Empty | TryRecvError::Closed) => return seen,
                Err(TryRecvError::Lagged(_)) => seen.push(-2),
            }
        }
    }

    #[test]
    fn a_message_carries_a_pass_in_order_or_one_change() -> Result<(), serde_json::Error> {
        let bus = Bus::new(None);
        let mut listener = bus.listen(7);
        forward(&bus, &serde_json::to_vec(&[change(1, 1), change(2, 5), change(1, 2)])?);
        forward(&bus, &serde_json::to_vec(&change(3, 9))?);
        forward(&bus, b"not json");
        forward(&bus, b"[]");
        assert_eq!(versions(&mut listener), [1, 5, 2, 9]);
        Ok(())
    }

    /// Records the doctors it is told published.
    #[derive(Default)]
    struct Told(std::sync::Mutex<Vec<i64>>);

    impl crate::model::ChangeObserver for Told {
        fn changed(&self, _change: &SlotChange) {}
        fn may_have_missed_changes(&self) {}
        fn published(&self, doctor_id: i64) {
            self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(doctor_id);
        }
    }

    #[test]
    fn published_schedules_reach_the_observer_and_no_subscription() -> Result<(), serde_json::Error> {
        let observer = std::sync::Arc::new(Told::default());
        let bus = Bus::new(Some(observer.clone()));
        let mut listener = bus.listen(7);
        forward(&bus, &serde_json::to_vec(&[change(1, 3)])?);
        forward(&bus, &serde_json::to_vec(&Published { published: vec![7, 8] })?);
        forward(&bus, br#"{"published":[9]}"#);
        assert_eq!(versions(&mut listener), [3], "a published schedule is no live event");
        assert_eq!(*observer.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner), [7, 8, 9]);
        Ok(())
    }
}
