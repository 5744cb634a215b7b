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
pub mod smtp;
pub mod texts;
pub mod transport;
mod worker;

use std::{sync::Arc, time::Duration};

use tokio::{sync::watch, task::JoinHandle};

pub use contact::{Contact, ContactInput, ContactService, Field};
pub use facts::{Channel, Facts, Kind};
pub use record::{reminder_due, MessageFollowUp};
pub use worker::{retry_delay, LEASE};

use crate::{config::Config, db::Db, events::Handoff};
use transport::{EmailTransport, SmsTransport};

/// How an instance tells people, from the configuration.
pub struct NotifySettings {
    email: EmailTransport,
    sms: SmsTransport,
    sender: render::Sender,
    reminder_before: Duration,
    max_attempts: u32,
    retry_max: Duration,
    poll: Duration,
    concurrency: usize,
}

impl NotifySettings {
    /// The transports and limits `config` names (`SMTP_URL`, `MAIL_FROM`, `SMS_URL`, …).
    pub fn from_config(config: &Config) -> Result<Self, String> {
        Ok(Self {
            email: EmailTransport::new(config.smtp_url.as_ref(), &config.data_dir, config.notify_concurrency)?,
            sms: SmsTransport::new(config.sms.as_ref(), config.sms_from.as_deref(), &config.data_dir)?,
            sender: render::Sender::new(config.mail_from.clone(), config.sms_from.clone()),
            reminder_before: config.reminder_before,
            max_attempts: config.notify_max_attempts,
            retry_max: config.notify_retry_max,
            poll: config.notify_poll_interval,
            concurrency: config.notify_concurrency,
        })
    }

    /// Says at start-up where messages go. Files stand in for a mail server or an SMS
    /// gateway that is not configured; outside single-process dev mode that is said as a
    /// warning, because then nobody receives them.
    pub fn announce(&self, single_process: bool) {
        for (what, variable, files, target) in [
            ("emails", "SMTP_URL", matches!(self.email, EmailTransport::Files(_)), self.email.describe()),
            ("SMS", "SMS_URL", matches!(self.sms, SmsTransport::Files { .. }), self.sms.describe()),
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

/// Starts the worker on `db`; returns the follow-up the relay records messages with.
pub fn start(db: Db, settings: NotifySettings) -> (Arc<MessageFollowUp>, NotifyTasks) {
    let wake = Arc::new(tokio::sync::Notify::new());
    let room = settings.concurrency.max(1).saturating_mul(crate::events::handoff::ROOM_PER_PLACE);
    let handoff = Arc::new(Handoff::new(room));
    let follow_up = Arc::new(MessageFollowUp::new(settings.reminder_before, Arc::clone(&wake), Arc::clone(&handoff)));
    let (stop, stopping) = watch::channel(false);
    let worker = worker::Worker {
        db,
        email: settings.email,
        sms: settings.sms,
        sender: settings.sender,
        max_attempts: settings.max_attempts,
        retry_max: settings.retry_max,
        poll: settings.poll,
        concurrency: settings.concurrency,
        wake,
        handoff,
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
