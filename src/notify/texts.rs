//! Every sentence a patient reads, in one place. English only today: [`for_locale`] is where
//! another language would be picked by the patient's locale.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use super::facts::Kind;
use crate::model::{AppointmentEvent, CancelledBy};

/// The words of one message, already formatted for the patient (times in the doctor's zone).
#[derive(Clone, Debug)]
pub struct Words<'a> {
    /// The doctor.
    pub doctor: &'a str,
    /// The appointment's time, e.g. "Thursday 10 January 2030, 09:00–09:15 (Europe/Paris)".
    pub when: String,
    /// The same, short (for SMS), e.g. "Thu 10 Jan 09:00 (Europe/Paris)".
    pub when_short: String,
    /// Until when a hold keeps the seat.
    pub until: Option<String>,
    /// Who cancelled or moved it.
    pub by: Option<CancelledBy>,
    /// The time a reschedule replaced.
    pub previous_when: Option<String>,
    /// The doctor of the time a reschedule replaced, when another one.
    pub previous_doctor: Option<&'a str>,
    /// The appointment's reference.
    pub reference: i64,
}

/// The sentences of a language.
pub trait Texts: Sync {
    /// The email's subject.
    fn subject(&self, kind: Kind, w: &Words<'_>) -> String;
    /// The body's paragraphs, between greeting and signature.
    fn paragraphs(&self, kind: Kind, w: &Words<'_>) -> Vec<String>;
    /// The whole SMS.
    fn sms(&self, kind: Kind, w: &Words<'_>) -> String;
    /// The first line of an email.
    fn greeting(&self) -> &'static str;
    /// The last line of an email.
    fn signature(&self) -> &'static str;
    /// The calendar event's one-line summary.
    fn calendar_summary(&self, doctor: &str) -> String;
    /// A time range in `tz`.
    fn when(&self, start: DateTime<Utc>, end: DateTime<Utc>, tz: Tz) -> String;
    /// A time range in `tz`, short.
    fn when_short(&self, start: DateTime<Utc>, tz: Tz) -> String;
    /// An instant in `tz`.
    fn instant(&self, t: DateTime<Utc>, tz: Tz) -> String;
}

/// The texts for a patient's locale (English whatever it is, for now).
pub fn for_locale(_locale: Option<&str>) -> &'static dyn Texts {
    &English
}

/// English.
pub struct English;

impl English {
    fn by(by: Option<CancelledBy>) -> &'static str {
        match by {
            Some(CancelledBy::Patient) => " at your request",
            Some(CancelledBy::Partner) => " by the service that booked it for you",
            Some(CancelledBy::Clinic) => " by the clinic",
            None => "",
        }
    }

    fn until(w: &Words<'_>) -> String {
        w.until.as_deref().map(|u| format!(" until {u}")).unwrap_or_default()
    }
}

impl Texts for English {
    fn subject(&self, kind: Kind, w: &Words<'_>) -> String {
        let what = match kind {
            Kind::Event(AppointmentEvent::Booked) => "Appointment booked",
            Kind::Event(AppointmentEvent::Held) => "Seat held for you",
            Kind::Event(AppointmentEvent::Confirmed) => "Appointment confirmed",
            Kind::Event(AppointmentEvent::Cancelled) => "Appointment cancelled",
            Kind::Event(AppointmentEvent::Expired) => "Hold expired",
            Kind::Event(AppointmentEvent::Rescheduled) => "Appointment moved",
            Kind::Event(AppointmentEvent::Offered) => "A seat was freed for you",
            // The desk's events are not told to patients (`AppointmentEvent::tells_patient`).
            Kind::Event(AppointmentEvent::Arrived) => "Checked in",
            Kind::Event(AppointmentEvent::Fulfilled) => "Visit completed",
            Kind::Event(AppointmentEvent::NoShow) => "Missed appointment",
            Kind::Reminder => "Reminder",
        };
        format!("{what}: {}, {}", w.doctor, w.when_short)
    }

    fn paragraphs(&self, kind: Kind, w: &Words<'_>) -> Vec<String> {
        let doctor = w.doctor;
        let until = Self::until(w);
        let first = match kind {
            Kind::Event(AppointmentEvent::Booked) => format!("Your appointment with {doctor} is booked."),
            Kind::Event(AppointmentEvent::Held) => {
                format!("A seat with {doctor} is held for you{until}. Confirm it before then to keep it.")
            }
            Kind::Event(AppointmentEvent::Confirmed) => format!("Your appointment with {doctor} is confirmed."),
            Kind::Event(AppointmentEvent::Cancelled) => {
                format!("Your appointment with {doctor} was cancelled{}.", Self::by(w.by))
            }
            Kind::Event(AppointmentEvent::Expired) => format!(
                "The seat held for you with {doctor} was released: it was not confirmed in time{}.",
                w.until.as_deref().map(|u| format!(" (by {u})")).unwrap_or_default()
            ),
            Kind::Event(AppointmentEvent::Rescheduled) => {
                let moved = format!("Your appointment with {doctor} was moved{}.", Self::by(w.by));
                match (&w.previous_when, w.previous_doctor) {
                    (Some(old), Some(other)) => {
                        format!("{moved} The earlier appointment with {other}, {old}, is cancelled.")
                    }
                    (Some(old), None) => format!("{moved} The earlier time, {old}, is cancelled."),
                    _ => moved,
                }
            }
            Kind::Event(AppointmentEvent::Offered) => format!(
                "A seat was freed with {doctor} and is held for you{until}. Confirm it before then to keep it; \
                 otherwise it goes to the next person waiting."
            ),
            Kind::Event(AppointmentEvent::Arrived) => format!("You checked in for your appointment with {doctor}."),
            Kind::Event(AppointmentEvent::Fulfilled) => format!("Your appointment with {doctor} is completed."),
            Kind::Event(AppointmentEvent::NoShow) => format!("You missed your appointment with {doctor}."),
            Kind::Reminder => format!("A reminder of your appointment with {doctor}."),
        };
        let mut out = vec![first, format!("When: {}", w.when)];
        if matches!(kind, Kind::Event(AppointmentEvent::Rescheduled)) && w.until.is_some() {
            out.push(format!("It is held for you{until}: confirm it to keep it."));
        }
        out.push(format!("Reference: appointment {}", w.reference));
        let calendar = match kind {
            Kind::Event(AppointmentEvent::Cancelled | AppointmentEvent::Expired) => {
                Some("The attached calendar file removes it from your calendar.")
            }
            Kind::Event(AppointmentEvent::Rescheduled) => Some("The attached calendar files move it in your calendar."),
            Kind::Reminder => None,
            Kind::Event(_) => Some("The attached calendar file adds it to your calendar."),
        };
        out.extend(calendar.map(str::to_owned));
        out
    }

    fn sms(&self, kind: Kind, w: &Words<'_>) -> String {
        let doctor = w.doctor;
        let when = &w.when_short;
        let until = Self::until(w);
        let r = w.reference;
        match kind {
            Kind::Event(AppointmentEvent::Booked) => format!("Booked: {doctor}, {when}. Ref {r}"),
            Kind::Event(AppointmentEvent::Held) => {
                format!("Held for you{until}: {doctor}, {when}. Confirm to keep it. Ref {r}")
            }
            Kind::Event(AppointmentEvent::Confirmed) => format!("Confirmed: {doctor}, {when}. Ref {r}"),
            Kind::Event(AppointmentEvent::Cancelled) => {
                format!("Cancelled{}: {doctor}, {when}. Ref {r}", Self::by(w.by))
            }
            Kind::Event(AppointmentEvent::Expired) => format!("Hold expired, seat released: {doctor}, {when}. Ref {r}"),
            Kind::Event(AppointmentEvent::Rescheduled) => match &w.previous_when {
                Some(old) => format!("Moved: {doctor}, now {when} (was {old}). Ref {r}"),
                None => format!("Moved: {doctor}, now {when}. Ref {r}"),
            },
            Kind::Event(AppointmentEvent::Offered) => {
                format!("A seat was freed and is held for you{until}: {doctor}, {when}. Confirm to keep it. Ref {r}")
            }
            Kind::Event(AppointmentEvent::Arrived) => format!("Checked in: {doctor}, {when}. Ref {r}"),
            Kind::Event(AppointmentEvent::Fulfilled) => format!("Completed: {doctor}, {when}. Ref {r}"),
            Kind::Event(AppointmentEvent::NoShow) => format!("Missed: {doctor}, {when}. Ref {r}"),
            Kind::Reminder => format!("Reminder: {doctor}, {when}. Ref {r}"),
        }
    }

    fn greeting(&self) -> &'static str {
        "Hello,"
    }

    fn signature(&self) -> &'static str {
        "— clinic-booking (this address does not read replies)"
    }

    fn calendar_summary(&self, doctor: &str) -> String {
        format!("Appointment with {doctor}")
    }

    fn when(&self, start: DateTime<Utc>, end: DateTime<Utc>, tz: Tz) -> String {
        let (s, e) = (start.with_timezone(&tz), end.with_timezone(&tz));
        let end = if s.date_naive() == e.date_naive() {
            e.format("%H:%M").to_string()
        } else {
            e.format("%A %-d %B %Y, %H:%M").to_string()
        };
        format!("{}–{end} ({tz})", s.format("%A %-d %B %Y, %H:%M"))
    }

    fn when_short(&self, start: DateTime<Utc>, tz: Tz) -> String {
        format!("{} ({tz})", start.with_timezone(&tz).format("%a %-d %b %H:%M"))
    }

    fn instant(&self, t: DateTime<Utc>, tz: Tz) -> String {
        format!("{} ({tz})", t.with_timezone(&tz).format("%A %-d %B %Y, %H:%M"))
    }
}
