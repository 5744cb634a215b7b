//! Recording messages: the [`FollowUp`] the relay calls, in the transaction that deletes the
//! events' outbox rows, so a message exists exactly when its change committed and is recorded
//! once (a retried pass meets the unique index on (outbox row, channel, purpose)). While this
//! instance's worker has room, the messages due now are recorded leased to it and handed over
//! (see [`Handoff`]).

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use chrono::{DateTime, Utc};
use sea_orm::DatabaseTransaction;
use tokio::sync::Notify;

use super::{
    facts::{Channel, Facts, PURPOSE_EVENT, PURPOSE_REMINDER},
    worker::LEASE,
};
use crate::{
    db::{
        entity::{appointment, patient_message},
        messages::{self, EventSubject, NewMessage},
        micros, StoreError,
    },
    events::{FollowUp, Handoff, Notification},
    model::AppointmentEvent,
};

/// Records one message per channel on file for every appointment event, and schedules
/// reminders; wakes this instance's message worker once the relay's transaction committed.
pub struct MessageFollowUp {
    /// `REMINDER_BEFORE_SECS`; zero: none.
    reminder_before: Duration,
    /// The worker's bell.
    wake: Arc<Notify>,
    /// Messages recorded leased to the worker, on their way to it.
    handoff: Arc<Handoff<patient_message::Model>>,
    /// Whether the last pass recorded messages due now that it could not hand over.
    overflowed: AtomicBool,
}

impl MessageFollowUp {
    /// A follow-up scheduling reminders `reminder_before` ahead, handing what it leases to the
    /// worker through `handoff` and ringing `wake` after commits.
    pub fn new(reminder_before: Duration, wake: Arc<Notify>, handoff: Arc<Handoff<patient_message::Model>>) -> Self {
        Self { reminder_before, wake, handoff, overflowed: AtomicBool::new(false) }
    }
}

#[async_trait::async_trait]
impl FollowUp for MessageFollowUp {
    async fn record(&self, tx: &DatabaseTransaction, events: &[Notification]) -> Result<(), StoreError> {
        // Whatever a pass that rolled back staged is never handed over.
        self.handoff.stage(Vec::new());
        self.overflowed.store(false, Ordering::Release);
        let mut ids: Vec<i64> = events.iter().map(|n| n.appointment_id).collect();
        ids.sort_unstable();
        ids.dedup();
        let subjects: HashMap<i64, EventSubject> =
            messages::event_subjects(tx, &ids).await?.into_iter().map(|s| (s.id, s)).collect();
        if subjects.is_empty() {
            return Ok(());
        }
        let now = micros(Utc::now());
        let mut rows = Vec::new();
        for n in events {
            if let Some(subject) = subjects.get(&n.appointment_id) {
                rows.extend(messages_for(n, subject, self.reminder_before, now)?);
            }
        }
        // The messages due now, as many as the worker has room for, go to it leased; reminders
        // and the rest wait in the queue for any worker's claim.
        let (mut leased, mut queued): (Vec<NewMessage>, Vec<NewMessage>) =
            rows.into_iter().partition(|m| m.purpose == PURPOSE_EVENT);
        let overflow = leased.split_off(self.handoff.room().min(leased.len()));
        self.overflowed.store(!overflow.is_empty(), Ordering::Release);
        queued.extend(overflow);
        messages::record(tx, &queued, now).await?;
        if !leased.is_empty() {
            let lease = micros(now + chrono::Duration::from_std(LEASE).unwrap_or_default());
            self.handoff.stage(messages::record_leased(tx, &leased, now, lease).await?);
        }
        Ok(())
    }

    fn committed(&self) {
        // The handed-over messages ring the worker through the hand-off; the bell sends it to
        // the database, where the others wait.
        self.handoff.commit();
        if self.overflowed.swap(false, Ordering::AcqRel) {
            self.wake.notify_one();
        }
    }
}

/// The messages `n` calls for: one per channel on file and, for a booking that will still be
/// ahead when the reminder is due, a reminder per channel.
fn messages_for(
    n: &Notification,
    subject: &EventSubject,
    reminder_before: Duration,
    now: DateTime<Utc>,
) -> Result<Vec<NewMessage>, StoreError> {
    if !n.event.tells_patient() {
        return Ok(Vec::new());
    }
    let facts = serde_json::to_string(&Facts::of(n.event, subject, n.state.as_ref(), n.committed_at))
        .map_err(|e| StoreError::Inconsistent(format!("message facts: {e}")))?;
    let reminder_at = reminder_due(n.event, subject, reminder_before, now);
    let channels = [(Channel::Email, &subject.email), (Channel::Sms, &subject.phone)];
    let mut rows = Vec::new();
    for (channel, recipient) in channels {
        let Some(recipient) = recipient else { continue };
        let message = |purpose, due_at, committed_at| NewMessage {
            outbox_id: n.outbox_id,
            purpose,
            event: n.event.as_str(),
            appointment_id: subject.id,
            patient_id: subject.patient_id,
            channel: channel.as_str(),
            recipient: recipient.clone(),
            locale: subject.locale.clone(),
            facts: facts.clone(),
            due_at,
            committed_at,
            trace_context: n.trace.map(|t| t.to_string()),
        };
        rows.push(message(PURPOSE_EVENT, now, n.committed_at));
        if let Some(due) = reminder_at {
            rows.push(message(PURPOSE_REMINDER, due, due));
        }
    }
    Ok(rows)
}

/// When the reminder of the appointment is due, if the event calls for one: the event made
/// or kept a booking (booked, confirmed, rescheduled), the appointment is still `BOOKED`, and
/// the reminder time (`start − before`) is still ahead. One reminder per appointment and
/// channel is kept (a unique index), whichever events ask for it.
pub fn reminder_due(
    event: AppointmentEvent,
    subject: &EventSubject,
    before: Duration,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let asks = matches!(event, AppointmentEvent::Booked | AppointmentEvent::Confirmed | AppointmentEvent::Rescheduled);
    if before.is_zero() || !asks || subject.status != appointment::BOOKED {
        return None;
    }
    let due = subject.start_at - chrono::Duration::from_std(before).ok()?;
    (due > now).then_some(micros(due))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject(status: &str, start_in_secs: i64) -> EventSubject {
        let now = Utc::now();
        EventSubject {
            id: 7,
            patient_id: 77,
            status: status.into(),
            start_at: now + chrono::Duration::seconds(start_in_secs),
            end_at: now + chrono::Duration::seconds(start_in_secs + 900),
            expires_at: None,
            cancelled_by: None,
            rescheduled_from: None,
            doctor_name: "Dr Ada".into(),
            doctor_timezone: "UTC".into(),
            email: Some("ada@example.org".into()),
            phone: Some("+33612345678".into()),
            locale: None,
            prev_start_at: None,
            prev_end_at: None,
            prev_cancelled_by: None,
            prev_doctor_name: None,
            prev_doctor_timezone: None,
        }
    }

    #[test]
    fn reminders_only_for_bookings_still_ahead() {
        let day = Duration::from_secs(86_400);
        let now = Utc::now();
        let far = subject("BOOKED", 3 * 86_400);
        assert!(reminder_due(AppointmentEvent::Booked, &far, day, now).is_some());
        assert!(reminder_due(AppointmentEvent::Confirmed, &far, day, now).is_some());
        assert!(reminder_due(AppointmentEvent::Rescheduled, &far, day, now).is_some());
        assert!(reminder_due(AppointmentEvent::Held, &subject("HELD", 3 * 86_400), day, now).is_none());
        assert!(reminder_due(AppointmentEvent::Cancelled, &far, day, now).is_none());
        assert!(reminder_due(AppointmentEvent::Booked, &far, Duration::ZERO, now).is_none());
        // Booked later than a day before: the reminder time has passed already.
        assert!(reminder_due(AppointmentEvent::Booked, &subject("BOOKED", 3600), day, now).is_none());
        // Cancelled before the relay recorded the booking: nothing to remind of.
        assert!(reminder_due(AppointmentEvent::Booked, &subject("CANCELLED", 3 * 86_400), day, now).is_none());
    }

    #[test]
    fn one_message_per_channel_on_file() -> Result<(), StoreError> {
        let now = Utc::now();
        let n = Notification {
            outbox_id: 3,
            event: AppointmentEvent::Booked,
            appointment_id: 7,
            state: None,
            committed_at: now,
            trace: None,
        };
        let both = messages_for(&n, &subject("BOOKED", 3 * 86_400), Duration::from_secs(86_400), now)?;
        let kinds: Vec<_> = both.iter().map(|m| (m.channel, m.purpose)).collect();
        assert_eq!(kinds, [("EMAIL", "EVENT"), ("EMAIL", "REMINDER"), ("SMS", "EVENT"), ("SMS", "REMINDER")]);
        let mut email_only = subject("BOOKED", 3600);
        email_only.phone = None;
        let one = messages_for(&n, &email_only, Duration::from_secs(86_400), now)?;
        assert_eq!(one.len(), 1);
        assert_eq!((one[0].recipient.as_str(), one[0].outbox_id), ("ada@example.org", 3));
        Ok(())
    }
}
