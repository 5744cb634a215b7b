//! What a message says, as recorded with it: the facts of the event, frozen when the relay
//! recorded the message, from which the email and the SMS are rendered deterministically
//! (the same row renders the same text on every attempt and every instance).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{
    db::messages::EventSubject,
    model::{AppointmentEvent, AppointmentState, CancelledBy},
};

/// Version of [`Facts`]' JSON; a renderer reads the versions it knows.
pub const FACTS_VERSION: u8 = 1;

/// The facts of one message (stored as JSON in `patient_message.facts`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Facts {
    /// [`FACTS_VERSION`].
    pub v: u8,
    /// The appointment.
    pub appointment_id: i64,
    /// Its doctor's name.
    pub doctor: String,
    /// Its doctor's IANA zone: times are shown in it.
    pub timezone: String,
    /// Its start.
    pub start_at: DateTime<Utc>,
    /// Its end.
    pub end_at: DateTime<Utc>,
    /// Until when a hold keeps its seat (holds, offers, expiries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    /// Who cancelled it (`PATIENT`, `PARTNER`, `CLINIC`), for a cancel; who moved it, for a
    /// reschedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// The appointment a reschedule replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<Previous>,
    /// When the event committed: the calendar's `DTSTAMP` and the email's `Date`.
    pub at: DateTime<Utc>,
}

/// The appointment a reschedule replaced (now cancelled).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Previous {
    /// Its id (its calendar event gets the `CANCEL`).
    pub appointment_id: i64,
    /// Its doctor's name.
    pub doctor: String,
    /// Its doctor's zone.
    pub timezone: String,
    /// Its start.
    pub start_at: DateTime<Utc>,
    /// Its end.
    pub end_at: DateTime<Utc>,
}

impl Facts {
    /// The facts of `event` about `subject`, committed at `at`, leaving the appointment in
    /// `state` (when the outbox row recorded it; `subject` is read later, and a later change
    /// may have moved it on since).
    pub fn of(
        event: AppointmentEvent,
        subject: &EventSubject,
        state: Option<&AppointmentState>,
        at: DateTime<Utc>,
    ) -> Self {
        let previous = match (event, subject.rescheduled_from, subject.prev_start_at, subject.prev_end_at) {
            (AppointmentEvent::Rescheduled, Some(id), Some(start_at), Some(end_at)) => Some(Previous {
                appointment_id: id,
                doctor: subject.prev_doctor_name.clone().unwrap_or_else(|| subject.doctor_name.clone()),
                timezone: subject.prev_doctor_timezone.clone().unwrap_or_else(|| subject.doctor_timezone.clone()),
                start_at,
                end_at,
            }),
            _ => None,
        };
        let (expires_at, cancelled_by) = match state {
            Some(state) => (state.expires_at, state.cancelled_by.map(|c| c.as_str().to_owned())),
            None => (subject.expires_at, subject.cancelled_by.clone()),
        };
        let by = match event {
            AppointmentEvent::Cancelled => cancelled_by,
            AppointmentEvent::Rescheduled => subject.prev_cancelled_by.clone(),
            _ => None,
        };
        Self {
            v: FACTS_VERSION,
            appointment_id: subject.id,
            doctor: subject.doctor_name.clone(),
            timezone: subject.doctor_timezone.clone(),
            start_at: subject.start_at,
            end_at: subject.end_at,
            expires_at,
            by,
            previous,
            at,
        }
    }

    /// Who cancelled or moved the appointment, when known.
    pub fn by(&self) -> Option<CancelledBy> {
        self.by.as_deref().and_then(CancelledBy::parse)
    }
}

/// What a message is about: the event, or the reminder before the appointment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// The event itself.
    Event(AppointmentEvent),
    /// The reminder before a booked appointment.
    Reminder,
}

/// The stored `purpose` of a message about the event itself.
pub const PURPOSE_EVENT: &str = "EVENT";
/// The stored `purpose` of a reminder.
pub const PURPOSE_REMINDER: &str = "REMINDER";

/// The channel a message goes through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Channel {
    /// An email.
    Email,
    /// A text message.
    Sms,
}

impl Channel {
    /// The stored word.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Email => "EMAIL",
            Self::Sms => "SMS",
        }
    }

    /// The label in metrics.
    pub fn label(self) -> &'static str {
        match self {
            Self::Email => "email",
            Self::Sms => "sms",
        }
    }

    /// The channel a stored word names.
    pub fn parse(raw: &str) -> Option<Self> {
        [Self::Email, Self::Sms].into_iter().find(|c| c.as_str() == raw)
    }
}

impl Kind {
    /// The kind of a stored message (`None` for words this version does not know).
    pub fn of(purpose: &str, event: &str) -> Option<Self> {
        match purpose {
            PURPOSE_REMINDER => Some(Self::Reminder),
            PURPOSE_EVENT => AppointmentEvent::parse(event).map(Self::Event),
            _ => None,
        }
    }
}
