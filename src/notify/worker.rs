//! The message worker of an instance: claims due messages, sends them, records each attempt.
//!
//! Claim and lease: one statement claims a batch, counts one more attempt for each message
//! and gives it a lease (`locked_until`, also its `next_attempt_at`), locking `SKIP LOCKED` on
//! PostgreSQL so workers of several instances take disjoint messages. An attempt records its
//! outcome only while the row still carries its lease. Delivery is at least once:
//!
//! - a crash (or a kill) in the middle of an attempt leaves the message leased; it is due again
//!   when the lease ends ([`LEASE`]) and is then sent again, even if the first attempt had
//!   reached the server: that is the one case of a repeat, and the repeat carries the same
//!   `Message-ID`;
//! - a clean stop (`Application::run_until_stopped` returning) sends nothing twice: the worker
//!   stops claiming, lets the attempts already talking to a server finish and records them,
//!   and hands back the messages of its batch it had not started (their attempt uncounted),
//!   so the next instance takes them at once;
//! - a failed attempt is retried after a delay doubling from one second, with jitter, capped at
//!   `NOTIFY_RETRY_MAX_SECS`; after `NOTIFY_MAX_ATTEMPTS` attempts (an SMTP 5xx answer
//!   counts as a failed attempt like any other) it is kept as `FAILED`; a message that cannot
//!   be rendered fails at once.
//!
//! The worker is woken by the relay right after it recorded messages, and polls
//! (`NOTIFY_POLL_MS`) for retries, reminders and what other instances recorded. The messages
//! the relay recorded leased to it (see [`Handoff`]) come first, without a claim; they are
//! settled, released and, after a crash, claimed again exactly like a claimed batch.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use rand::Rng;
use tokio::sync::{watch, Notify};
use tracing::Instrument;

use super::{
    facts::{Channel, Kind},
    render::{self, Draft, RenderError, Sender},
    transport::{EmailTransport, SendError, SmsTransport, SMTP_TIMEOUT},
};
use crate::{
    db::{
        appointments,
        entity::{appointment, patient_message},
        messages::{self, Settle},
        micros, Db, StoreError,
    },
    events::Handoff,
};

/// How long a claimed message is reserved for its attempt: longer than two SMTP exchanges
/// (each place of the batch sends at most two messages) with their timeouts.
pub const LEASE: Duration = Duration::from_secs(120);
/// How often the queue gauges are refreshed.
const GAUGES_EVERY: Duration = Duration::from_secs(5);
/// The first retry delay (doubling from there).
const RETRY_BASE: Duration = Duration::from_secs(1);
/// How long a clean stop waits for attempts in flight.
pub(super) const STOP_GRACE: Duration = Duration::from_secs(SMTP_TIMEOUT.as_secs() + 5);

/// What a worker needs.
pub(super) struct Worker {
    pub(super) db: Db,
    pub(super) email: EmailTransport,
    pub(super) sms: SmsTransport,
    pub(super) sender: Sender,
    pub(super) max_attempts: u32,
    pub(super) retry_max: Duration,
    pub(super) poll: Duration,
    pub(super) concurrency: usize,
    pub(super) wake: Arc<Notify>,
    /// What the relay recorded leased to this worker.
    pub(super) handoff: Arc<Handoff<patient_message::Model>>,
    /// The instance's traces.
    pub(super) tracing: crate::telemetry::Tracing,
}

/// What one pass took.
struct Pass {
    /// Messages attempted.
    taken: usize,
    /// Whether it claimed from the database (and so saw what was due there).
    claimed: bool,
}

/// How one attempt ended.
enum Delivery {
    Sent,
    Skipped(String),
}

/// Why one attempt did not send.
#[derive(Debug, thiserror::Error)]
enum AttemptError {
    #[error(transparent)]
    Send(#[from] SendError),
    #[error(transparent)]
    Render(#[from] RenderError),
}

impl Worker {
    /// Runs until `stop` fires (see the module doc for what a stop does to a batch in flight),
    /// then gives back what was handed over and not started.
    pub(super) async fn run(self, stop: watch::Receiver<bool>) {
        self.work(stop).await;
        let unstarted: Vec<(i64, DateTime<Utc>, Settle)> = self
            .handoff
            .close()
            .into_iter()
            .filter_map(|m| Some((m.id, m.locked_until?, Settle::Released { at: micros(Utc::now()) })))
            .collect();
        self.settle(&unstarted).await;
    }

    async fn work(&self, mut stop: watch::Receiver<bool>) {
        let mut failures = 0u32;
        let mut gauges_at: Option<Instant> = None;
        // When to look at the database next: at once when the bell rang (the relay recorded
        // more than it could hand over), else at the poll, for retries, reminders and what other
        // instances recorded. What is handed over needs no look.
        let mut claim_at = Instant::now();
        loop {
            if *stop.borrow() {
                return;
            }
            if gauges_at.is_none_or(|t| t.elapsed() >= GAUGES_EVERY) {
                self.refresh_gauges().await;
                gauges_at = Some(Instant::now());
            }
            match self.pass(&stop, Instant::now() >= claim_at).await {
                Ok(Pass { taken, .. }) if taken == self.batch() => {
                    failures = 0;
                    continue;
                }
                Ok(Pass { claimed, .. }) => {
                    failures = 0;
                    if claimed {
                        claim_at = Instant::now() + self.poll;
                    }
                }
                Err(error) => {
                    failures = failures.saturating_add(1);
                    tracing::warn!(%error, "message worker pass failed; retrying");
                    claim_at =
                        Instant::now() + Duration::from_millis(100u64 << failures.min(6)).min(Duration::from_secs(5));
                }
            }
            tokio::select! {
                () = self.wake.notified() => claim_at = Instant::now(),
                () = self.handoff.ready() => {}
                () = tokio::time::sleep_until(claim_at.into()) => {}
                () = stopped(&mut stop) => return,
            }
        }
    }

    /// Messages claimed at once: twice what is sent at once, so the next sends are ready.
    pub(super) fn batch(&self) -> usize {
        self.concurrency.saturating_mul(2)
    }

    /// Takes what was handed over and, when `claim` says so and there is room left, claims
    /// more; attempts each message and records the outcomes.
    async fn pass(&self, stop: &watch::Receiver<bool>, claim: bool) -> Result<Pass, StoreError> {
        let fresh = Utc::now() + chrono::Duration::from_std(LEASE / 2).unwrap_or_default();
        let mut batch = self.handoff.take(self.batch(), |m| m.locked_until.is_some_and(|lease| lease > fresh));
        let room = self.batch().saturating_sub(batch.len());
        let claimed = claim && room > 0;
        if claimed {
            let now = micros(Utc::now());
            let lease = micros(now + chrono::Duration::from_std(LEASE).unwrap_or_default());
            batch.extend(messages::claim(&self.db, room, now, lease).await?);
        }
        let taken = batch.len();
        if taken == 0 {
            return Ok(Pass { taken, claimed });
        }
        let reminded: Vec<i64> =
            batch.iter().filter(|m| m.purpose == super::facts::PURPOSE_REMINDER).map(|m| m.appointment_id).collect();
        let appointments: HashMap<i64, appointment::Model> = if reminded.is_empty() {
            HashMap::new()
        } else {
            appointments::find_many(self.db.conn(), &reminded).await?.into_iter().map(|a| (a.id, a)).collect()
        };
        let appointments = &appointments;
        let outcomes: Vec<(i64, DateTime<Utc>, Settle)> = futures_util::stream::iter(batch)
            // Every claimed or handed-over row carries its lease; one without (none is) would
            // only be settled by nobody and sent again when due.
            .filter_map(|m| std::future::ready(m.locked_until.map(|lease| (m, lease))))
            .map(|(m, lease)| async move {
                let (id, settle) = self.attempt(m, appointments, stop).await;
                (id, lease, settle)
            })
            .buffer_unordered(self.concurrency)
            .collect()
            .await;
        self.settle(&outcomes).await;
        Ok(Pass { taken, claimed })
    }

    /// Records the outcomes, retrying briefly: a message sent but not recorded as sent would be
    /// sent again when its lease ends.
    async fn settle(&self, outcomes: &[(i64, DateTime<Utc>, Settle)]) {
        if outcomes.is_empty() {
            return;
        }
        let mut delay = Duration::from_millis(200);
        for attempt in 1..=5 {
            match messages::settle(self.db.conn(), outcomes).await {
                Ok(()) => return,
                Err(error) if attempt < 5 => {
                    tracing::warn!(%error, "recording message outcomes failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                }
                Err(error) => {
                    tracing::error!(%error, "recording message outcomes failed; their leases will run out and \
                                             the messages be attempted again");
                }
            }
        }
    }

    /// One attempt, in its own span; returns the outcome to record.
    async fn attempt(
        &self,
        m: patient_message::Model,
        appointments: &HashMap<i64, appointment::Model>,
        stop: &watch::Receiver<bool>,
    ) -> (i64, Settle) {
        if *stop.borrow() {
            // Stopping: not started, so not sent; the next instance takes it at once.
            return (m.id, Settle::Released { at: micros(Utc::now()) });
        }
        let channel = Channel::parse(&m.channel).unwrap_or(Channel::Email);
        let span = tracing::info_span!(
            "notify_attempt",
            message = m.id,
            channel = channel.label(),
            attempt = m.attempts,
            otel.name = %format_args!("message send {}", channel.label()),
            otel.kind = "producer",
        );
        // A span of the trace of the change that called for the message.
        let parent = m.trace_context.as_deref().and_then(crate::telemetry::traces::TraceParent::parse);
        self.tracing.adopt(&span, parent.map(crate::telemetry::traces::TraceParent::span_context));
        async {
            let started = Instant::now();
            let result = self.deliver(&m, channel, appointments).await;
            metrics::histogram!("notify_attempt_seconds", "channel" => channel.label())
                .record(started.elapsed().as_secs_f64());
            let now = micros(Utc::now());
            let (settle, outcome) = match result {
                Ok(Delivery::Sent) => {
                    let lag = (now - m.committed_at).as_seconds_f64().max(0.0);
                    metrics::histogram!("notify_message_lag_seconds", "channel" => channel.label()).record(lag);
                    tracing::debug!(lag_seconds = lag, "message sent");
                    (Settle::Sent { at: now }, "sent")
                }
                Ok(Delivery::Skipped(reason)) => {
                    tracing::debug!(%reason, "message skipped");
                    (Settle::Skipped { reason }, "skipped")
                }
                Err(AttemptError::Send(SendError(error)))
                    if u32::try_from(m.attempts).unwrap_or(u32::MAX) < self.max_attempts =>
                {
                    let delay = retry_delay(m.attempts, self.retry_max);
                    tracing::info!(%error, retry_in_ms = delay.as_millis() as u64, "message attempt failed; will retry");
                    let at = micros(now + chrono::Duration::from_std(delay).unwrap_or_default());
                    (Settle::Retry { at, error }, "retried")
                }
                Err(error) => {
                    tracing::warn!(%error, attempts = m.attempts, "message given up; kept as failed");
                    (Settle::Failed { error: error.to_string() }, "failed")
                }
            };
            metrics::counter!("notify_messages_total", "channel" => channel.label(), "outcome" => outcome).increment(1);
            (m.id, settle)
        }
        .instrument(span)
        .await
    }

    /// Renders and sends `m`, or skips a reminder that no longer applies.
    async fn deliver(
        &self,
        m: &patient_message::Model,
        channel: Channel,
        appointments: &HashMap<i64, appointment::Model>,
    ) -> Result<Delivery, AttemptError> {
        let kind = Kind::of(&m.purpose, &m.event)
            .ok_or_else(|| RenderError::Facts(format!("unknown message kind {}/{}", m.purpose, m.event)))?;
        let facts = render::facts(&m.facts)?;
        if kind == Kind::Reminder {
            let now = Utc::now();
            match appointments.get(&m.appointment_id) {
                Some(a) if a.status != appointment::BOOKED => {
                    return Ok(Delivery::Skipped(format!("the appointment is {} now", a.status)));
                }
                Some(a) if a.start_at != facts.start_at => {
                    return Ok(Delivery::Skipped("the appointment moved".into()));
                }
                Some(a) if a.start_at <= now => {
                    return Ok(Delivery::Skipped("the appointment has started".into()));
                }
                Some(_) => {}
                None => return Ok(Delivery::Skipped("the appointment is gone".into())),
            }
        }
        let draft = Draft { id: m.id, kind, recipient: &m.recipient, locale: m.locale.as_deref(), facts: &facts };
        match channel {
            Channel::Email => {
                let message = render::email_message(&self.sender, &draft, m.committed_at)?;
                self.email.send(m.id, &message).await?;
            }
            Channel::Sms => {
                let body = render::sms(&draft)?;
                self.sms.send(m.id, &m.recipient, &body).await?;
            }
        }
        Ok(Delivery::Sent)
    }

    /// `notify_queue_depth` and `notify_queue_oldest_due_seconds`: what is due and not taken.
    async fn refresh_gauges(&self) {
        match messages::depth(self.db.conn(), micros(Utc::now())).await {
            Ok(depth) => {
                metrics::gauge!("notify_queue_depth").set(depth.due as f64);
                metrics::gauge!("notify_queue_oldest_due_seconds").set(depth.oldest_due_secs);
            }
            Err(error) => tracing::debug!(%error, "cannot read the message queue's depth"),
        }
    }
}

/// Resolves once `stop` says true or its sender is gone (the guard `wait_for` returns is
/// dropped here, not held across an await).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await.map(drop);
}

/// The wait after the `attempts`-th failed attempt: 1 s, 2 s, 4 s, … capped at `max`, each
/// drawn at random between half and all of it, so messages that failed together (a server
/// outage) do not all come back at the same moment.
pub fn retry_delay(attempts: i32, max: Duration) -> Duration {
    let exponent = u32::try_from(attempts.saturating_sub(1)).unwrap_or(0).min(30);
    let full = RETRY_BASE.saturating_mul(1 << exponent).min(max);
    full.mul_f64(rand::thread_rng().gen_range(0.5..=1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_exponentially_with_jitter_up_to_the_cap() {
        let max = Duration::from_secs(300);
        for (attempts, full) in [(1, 1), (2, 2), (3, 4), (6, 32), (9, 256), (10, 300), (40, 300)] {
            let d = retry_delay(attempts, max);
            let full = Duration::from_secs(full);
            assert!(d >= full / 2 && d <= full, "attempt {attempts}: {d:?}");
        }
        assert!(retry_delay(5, Duration::from_secs(1)) <= Duration::from_secs(1));
    }
}
