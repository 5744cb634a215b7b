//! Telling people: patients' contact details, and the emails and SMS that every committed
//! appointment event sends them, durably and at least once.
//!
//! The path of one message:
//!
//! 1. a change commits with its outbox row (`crate::events`);
//! 2. the relay, in the transaction that deletes the row, calls [`MessageFollowUp`]
//!    (`record.rs`), which reads the appointment, its doctor and the patient's contact details
//!    and inserts one `patient_message` row per channel on file (plus a reminder, for a
//!    booking) with the facts to render it from (`facts.rs`); nothing is recorded for a change
//!    that rolled back, since it wrote no outbox row;
//! 3. once that transaction committed, the relay rings this instance's worker (`worker.rs`),
//!    which claims due messages under a lease, renders them (`render.rs`, `texts.rs`, `ics.rs`)
//!    and sends them (`transport.rs`): SMTP or files for email, an HTTP gateway or files for
//!    SMS; failures are retried with backoff, and every attempt is recorded.
//!
//! The live-availability path never waits for any of this: the relay publishes slot changes
//! before it records messages, and sending happens in another task.

pub mod contact;
pub mod facts;
pub mod ics;
mod record;
pub mod render;
pub mod settings;
pub mod smtp;
pub mod texts;
pub mod transport;
mod worker;

use std::sync::Arc;

use tokio::{sync::watch, task::JoinHandle};

pub use contact::{Contact, ContactInput, ContactService, Field};
pub use facts::{Channel, Facts, Kind};
pub use record::{reminder_due, MessageFollowUp};
pub use settings::Settings;
pub use worker::{retry_delay, LEASE};

use crate::{db::Db, events::Handoff};
use transport::{EmailTransport, SmsTransport};

/// Where an instance's messages go, and who they say they are from.
pub struct Outlets {
    email: EmailTransport,
    sms: SmsTransport,
    sender: render::Sender,
}

impl Outlets {
    /// The transports `settings` names (`SMTP_URL`, `SMS_URL`), or files under `data_dir`.
    pub fn new(settings: &Settings, data_dir: &std::path::Path) -> Result<Self, String> {
        Ok(Self {
            email: EmailTransport::new(settings.smtp_url.as_ref(), data_dir, settings.concurrency)?,
            sms: SmsTransport::new(settings.sms.as_ref(), settings.sms_from.as_deref(), data_dir)?,
            sender: render::Sender::new(settings.mail_from.clone(), settings.sms_from.clone()),
        })
    }

    /// Says at start-up where messages go. Files stand in for a mail server or an SMS
    /// gateway that is not configured; outside single-process dev mode that is said as a
    /// warning, because then nobody receives them.
    pub fn announce(&self, single_process: bool) {
        for (what, variable, files, target) in [
            ("emails", settings::SMTP_URL, matches!(self.email, EmailTransport::Files(_)), self.email.describe()),
            ("SMS", settings::SMS_URL, matches!(self.sms, SmsTransport::Files { .. }), self.sms.describe()),
        ] {
            if !files {
                tracing::info!("{what} to patients go to {target}");
            } else if single_process {
                tracing::info!("{variable} is not set: {what} to patients are written as {target} (dev mode)");
            } else {
                tracing::warn!(
                    "{variable} is not set: {what} to patients are NOT delivered; each instance writes those it \
                     sends as {target}"
                );
            }
        }
    }
}

/// The message worker of an instance. It stops when [`NotifyTasks::shutdown`] runs or this
/// value is dropped.
pub struct NotifyTasks {
    stop: watch::Sender<bool>,
    handle: Option<JoinHandle<()>>,
}

/// Starts the worker on `db`, sending through `outlets`, each send a span of the trace of the
/// change that called for it (`tracing`, the instance's); returns the follow-up the relay
/// records messages with.
pub fn start(
    db: Db,
    outlets: Outlets,
    settings: &Settings,
    tracing: crate::telemetry::Tracing,
) -> (Arc<MessageFollowUp>, NotifyTasks) {
    let wake = Arc::new(tokio::sync::Notify::new());
    let room = settings.concurrency.max(1).saturating_mul(crate::events::handoff::ROOM_PER_PLACE);
    let handoff = Arc::new(Handoff::new(room));
    let follow_up = Arc::new(MessageFollowUp::new(settings.reminder_before, Arc::clone(&wake), Arc::clone(&handoff)));
    let (stop, stopping) = watch::channel(false);
    let worker = worker::Worker {
        db,
        email: outlets.email,
        sms: outlets.sms,
        sender: outlets.sender,
        max_attempts: settings.max_attempts,
        retry_max: settings.retry_max,
        poll: settings.poll_interval,
        concurrency: settings.concurrency,
        wake,
        handoff,
        tracing,
    };
    let handle = tokio::spawn(worker.run(stopping));
    (follow_up, NotifyTasks { stop, handle: Some(handle) })
}

impl NotifyTasks {
    /// Stops the worker: no new claims, the attempts in flight finish and are recorded (for
    /// at most [`worker::STOP_GRACE`]), the rest of the batch is handed back.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(mut handle) = self.handle.take() {
            if tokio::time::timeout(worker::STOP_GRACE, &mut handle).await.is_err() {
                tracing::warn!(
                    "the message worker did not stop in time; messages it was sending will be retried \
                                when their lease ends"
                );
                handle.abort();
            }
        }
    }
}

impl Drop for NotifyTasks {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}
