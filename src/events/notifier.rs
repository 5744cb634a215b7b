//! Confirmations (SMS, e-mail) hang off the outbox too: the relay calls a [`Notifier`] for each
//! committed booking or cancel it publishes, so nothing is ever confirmed that rolled back.

use crate::{db::entity::outbox, model::AppointmentEvent};

/// One committed appointment event, as a sender of messages needs it. Delivery is at least
/// once (a relay that crashes after notifying but before pruning the row notifies again): the
/// outbox row id tells repeats apart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notification {
    /// The outbox row it came from.
    pub outbox_id: i64,
    /// What happened.
    pub event: AppointmentEvent,
    /// The appointment (look the patient's contact up by it).
    pub appointment_id: i64,
}

impl Notification {
    /// The notification an outbox row stands for; `None` for a row that only changes a slot.
    pub fn from_row(row: &outbox::Model) -> Option<Self> {
        let (event, appointment_id) = row.event()?;
        Some(Self { outbox_id: row.id, event, appointment_id })
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
            event = n.event.as_str(),
            appointment = n.appointment_id,
            "confirmation (logging notifier: nothing sent)"
        );
        Ok(())
    }
}
