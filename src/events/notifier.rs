//! Confirmations (SMS, e-mail) hang off the outbox too: the relay calls a [`Notifier`] for each
//! committed booking or cancel it publishes, so nothing is ever confirmed that rolled back.

use chrono::{DateTime, Utc};

use crate::db::entity::{appointment, outbox};

/// What happened to an appointment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotificationKind {
    /// A booking committed.
    Booked,
    /// A cancel committed.
    Cancelled,
}

/// One committed booking or cancel, as a confirmation sender needs it. The appointment id is
/// the idempotency key for providers: delivery is at least once (a relay that crashes after
/// notifying but before pruning the row notifies again).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notification {
    /// Booked or cancelled.
    pub kind: NotificationKind,
    /// The appointment (look the patient's contact up by it).
    pub appointment_id: i64,
    /// Its slot.
    pub slot_id: i64,
    /// The slot's doctor.
    pub doctor_id: i64,
    /// The slot's start.
    pub start_at: DateTime<Utc>,
}

impl Notification {
    /// The notification an outbox row stands for; `None` for kinds that notify nobody.
    pub fn from_row(row: &outbox::Model) -> Option<Self> {
        let kind = match row.kind.as_str() {
            appointment::BOOKED => NotificationKind::Booked,
            appointment::CANCELLED => NotificationKind::Cancelled,
            _ => return None,
        };
        Some(Self {
            kind,
            appointment_id: row.appointment_id,
            slot_id: row.slot_id,
            doctor_id: row.doctor_id,
            start_at: row.start_at,
        })
    }
}

/// A notifier could not deliver; the relay logs it and goes on (live availability never waits
/// for a confirmation provider).
#[derive(Debug, thiserror::Error)]
#[error("notification failed: {0}")]
pub struct NotifyError(pub String);

/// Sends confirmations of committed bookings and cancels.
#[async_trait::async_trait]
pub trait Notifier: Send + Sync + 'static {
    /// Called once per committed booking or cancel (at least once: use the appointment id to
    /// drop repeats).
    async fn notify(&self, notification: &Notification) -> Result<(), NotifyError>;
}

/// The default notifier, a stand-in until a provider is wired in: one `debug` line per
/// confirmation it would send (`RUST_LOG=clinic_booking::events::notifier=debug` shows them).
/// Not `info`: at thousands of bookings a second a line each was a tenth of the server's CPU,
/// and a real sender logs its own failures.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoggingNotifier;

#[async_trait::async_trait]
impl Notifier for LoggingNotifier {
    async fn notify(&self, n: &Notification) -> Result<(), NotifyError> {
        tracing::debug!(
            kind = ?n.kind,
            appointment = n.appointment_id,
            slot = n.slot_id,
            doctor = n.doctor_id,
            start_at = %n.start_at,
            "confirmation (logging notifier: nothing sent)"
        );
        Ok(())
    }
}
