//! From a recorded message to what is sent: the email (plain text, HTML and the iCalendar
//! attachments, as the full RFC 5322 message lettre builds) or the SMS text. Deterministic
//! given the row: the texts come from its facts, the `Message-ID` from its id.

use std::time::SystemTime;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use lettre::message::{
    header::{ContentType, HeaderName, HeaderValue},
    Attachment, Mailbox, MultiPart,
};

use super::{
    facts::{Facts, Kind, FACTS_VERSION},
    ics::{self, Method},
    texts::{self, Texts, Words},
};
use crate::model::{parse_timezone, AppointmentEvent};

/// Who the messages come from.
#[derive(Clone, Debug)]
pub struct Sender {
    /// `MAIL_FROM`.
    pub mailbox: Mailbox,
    /// Its domain: names `Message-ID`s and calendar `UID`s.
    pub domain: String,
    /// `SMS_FROM`, if set.
    pub sms_from: Option<String>,
}

impl Sender {
    /// The sender of `MAIL_FROM` (and `SMS_FROM`).
    pub fn new(mailbox: Mailbox, sms_from: Option<String>) -> Self {
        let domain = mailbox.email.domain().to_owned();
        Self { mailbox, domain, sms_from }
    }
}

/// A message to render.
#[derive(Clone, Debug)]
pub struct Draft<'a> {
    /// Its row id.
    pub id: i64,
    /// What it is about.
    pub kind: Kind,
    /// The address or number.
    pub recipient: &'a str,
    /// The patient's locale.
    pub locale: Option<&'a str>,
    /// Its facts.
    pub facts: &'a Facts,
}

/// Why a message cannot be rendered: retrying would not help, it is kept as failed.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The stored facts are not readable by this version.
    #[error("unreadable facts: {0}")]
    Facts(String),
    /// The recipient or sender is not an address lettre takes.
    #[error("bad address: {0}")]
    Address(String),
    /// lettre refused to build the message.
    #[error("cannot build the email: {0}")]
    Build(String),
}

/// The parts of an email before MIME.
#[derive(Clone, Debug)]
pub struct Email {
    /// The subject line.
    pub subject: String,
    /// The plain-text body.
    pub text: String,
    /// The HTML body.
    pub html: String,
    /// The calendar objects to attach.
    pub calendars: Vec<Calendar>,
}

/// One iCalendar attachment.
#[derive(Clone, Debug)]
pub struct Calendar {
    /// Its method (also in its MIME type).
    pub method: Method,
    /// Its file name.
    pub filename: String,
    /// The `VCALENDAR` text.
    pub content: String,
}

/// Reads the stored facts of a message.
pub fn facts(raw: &str) -> Result<Facts, RenderError> {
    let facts: Facts = serde_json::from_str(raw).map_err(|e| RenderError::Facts(e.to_string()))?;
    if facts.v != FACTS_VERSION {
        return Err(RenderError::Facts(format!("version {} is not known", facts.v)));
    }
    Ok(facts)
}

fn zone(name: &str) -> Result<Tz, RenderError> {
    parse_timezone(name).map_err(RenderError::Facts)
}

fn words<'a>(t: &dyn Texts, f: &'a Facts) -> Result<Words<'a>, RenderError> {
    let tz = zone(&f.timezone)?;
    let previous = match &f.previous {
        Some(p) => Some((t.when(p.start_at, p.end_at, zone(&p.timezone)?), p)),
        None => None,
    };
    Ok(Words {
        doctor: &f.doctor,
        when: t.when(f.start_at, f.end_at, tz),
        when_short: t.when_short(f.start_at, tz),
        until: f.expires_at.map(|e| t.instant(e, tz)),
        by: f.by(),
        previous_when: previous.as_ref().map(|(w, _)| w.clone()),
        previous_doctor: previous.and_then(|(_, p)| (p.doctor != f.doctor).then_some(p.doctor.as_str())),
        reference: f.appointment_id,
    })
}

/// The email's parts.
pub fn email(sender: &Sender, d: &Draft<'_>) -> Result<Email, RenderError> {
    let t = texts::for_locale(d.locale);
    let w = words(t, d.facts)?;
    let paragraphs = t.paragraphs(d.kind, &w);
    let mut text = format!("{}\n\n", t.greeting());
    for p in &paragraphs {
        text.push_str(p);
        text.push_str("\n\n");
    }
    text.push_str(t.signature());
    text.push('\n');
    let mut html = String::from(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"></head>\n\
         <body style=\"font-family: sans-serif; line-height: 1.5\">\n",
    );
    html.push_str(&format!("<p>{}</p>\n", escape(t.greeting())));
    for p in &paragraphs {
        html.push_str(&format!("<p>{}</p>\n", escape(p)));
    }
    html.push_str(&format!("<p style=\"color: #666\">{}</p>\n</body></html>\n", escape(t.signature())));
    Ok(Email { subject: t.subject(d.kind, &w), text, html, calendars: calendars(sender, t, d) })
}

/// The calendar objects a message carries: the appointment's event (`REQUEST` while it
/// stands, `CANCEL` when it goes) and, for a reschedule, the `CANCEL` of the old one.
fn calendars(sender: &Sender, t: &dyn Texts, d: &Draft<'_>) -> Vec<Calendar> {
    let Kind::Event(event) = d.kind else {
        return Vec::new();
    };
    let f = d.facts;
    let organizer = sender.mailbox.name.as_deref().unwrap_or("clinic-booking");
    let organizer_address = sender.mailbox.email.to_string();
    let summary = t.calendar_summary(&f.doctor);
    let (method, status) = match event {
        AppointmentEvent::Cancelled | AppointmentEvent::Expired => (Method::Cancel, "CANCELLED"),
        AppointmentEvent::Held | AppointmentEvent::Offered => (Method::Request, "TENTATIVE"),
        AppointmentEvent::Rescheduled if f.expires_at.is_some() => (Method::Request, "TENTATIVE"),
        AppointmentEvent::Booked
        | AppointmentEvent::Confirmed
        | AppointmentEvent::Rescheduled
        | AppointmentEvent::Arrived
        | AppointmentEvent::Fulfilled
        | AppointmentEvent::NoShow => (Method::Request, "CONFIRMED"),
    };
    let this = ics::Event {
        uid: ics::uid(f.appointment_id, &sender.domain),
        sequence: ics::sequence(event),
        stamp: f.at,
        start: f.start_at,
        end: f.end_at,
        summary: &summary,
        description: None,
        status,
        organizer: (organizer, &organizer_address),
        attendee: d.recipient,
    };
    let name = |method: Method, id: i64| match method {
        Method::Request => format!("appointment-{id}.ics"),
        Method::Cancel => format!("appointment-{id}-cancel.ics"),
    };
    let mut out =
        vec![Calendar { method, filename: name(method, f.appointment_id), content: ics::calendar(method, &this) }];
    if let (AppointmentEvent::Rescheduled, Some(p)) = (event, &f.previous) {
        let old_summary = t.calendar_summary(&p.doctor);
        let old = ics::Event {
            uid: ics::uid(p.appointment_id, &sender.domain),
            sequence: ics::CANCEL_SEQUENCE,
            start: p.start_at,
            end: p.end_at,
            summary: &old_summary,
            status: "CANCELLED",
            ..this
        };
        out.push(Calendar {
            method: Method::Cancel,
            filename: name(Method::Cancel, p.appointment_id),
            content: ics::calendar(Method::Cancel, &old),
        });
    }
    out
}

/// The full email: `multipart/mixed` of `multipart/alternative` (plain text, HTML) and the
/// `text/calendar` attachments, with a `Message-ID` stable per message row.
pub fn email_message(sender: &Sender, d: &Draft<'_>, date: DateTime<Utc>) -> Result<lettre::Message, RenderError> {
    let parts = email(sender, d)?;
    let to: Mailbox = d.recipient.parse().map_err(|e| RenderError::Address(format!("{}: {e}", d.recipient)))?;
    let mut body = MultiPart::mixed().multipart(MultiPart::alternative_plain_html(parts.text, parts.html));
    for c in parts.calendars {
        let mime = format!("text/calendar; method={}; charset=UTF-8", c.method.as_str());
        let content_type = ContentType::parse(&mime).map_err(|e| RenderError::Build(e.to_string()))?;
        body = body.singlepart(Attachment::new(c.filename).body(c.content, content_type));
    }
    lettre::Message::builder()
        .from(sender.mailbox.clone())
        .to(to)
        .subject(parts.subject)
        .date(SystemTime::from(date))
        .message_id(Some(message_id(d.id, &sender.domain)))
        // RFC 3834: an automatic message; vacation responders should not answer it.
        .raw_header(HeaderValue::new(HeaderName::new_from_ascii_str("Auto-Submitted"), "auto-generated".into()))
        .multipart(body)
        .map_err(|e| RenderError::Build(e.to_string()))
}

/// The `Message-ID` of a message row: the same on every attempt, so a retried message is
/// recognisable as the same one.
pub fn message_id(id: i64, domain: &str) -> String {
    format!("<message-{id}@{domain}>")
}

/// The SMS text.
pub fn sms(d: &Draft<'_>) -> Result<String, RenderError> {
    let t = texts::for_locale(d.locale);
    Ok(t.sms(d.kind, &words(t, d.facts)?))
}

/// Text made safe inside HTML elements and attributes.
fn escape(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for c in raw.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::facts::Previous;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).map(|d| d.with_timezone(&Utc)).unwrap_or_default()
    }

    fn sender() -> Result<Sender, Box<dyn std::error::Error>> {
        Ok(Sender::new("Clinic <no-reply@clinic.example>".parse()?, Some("+15005550006".into())))
    }

    fn facts(event: AppointmentEvent) -> Facts {
        let hold = matches!(event, AppointmentEvent::Held | AppointmentEvent::Offered | AppointmentEvent::Expired);
        Facts {
            v: FACTS_VERSION,
            appointment_id: 42,
            doctor: "Dr Ada <Lovelace> & Co".into(),
            timezone: "Europe/Paris".into(),
            start_at: t("2030-01-10T08:00:00Z"),
            end_at: t("2030-01-10T08:30:00Z"),
            expires_at: hold.then(|| t("2030-01-09T10:10:00Z")),
            by: (event == AppointmentEvent::Cancelled).then(|| "CLINIC".into()),
            previous: (event == AppointmentEvent::Rescheduled).then(|| Previous {
                appointment_id: 41,
                doctor: "Dr Ada <Lovelace> & Co".into(),
                timezone: "Europe/Paris".into(),
                start_at: t("2030-01-08T15:00:00Z"),
                end_at: t("2030-01-08T15:30:00Z"),
            }),
            at: t("2030-01-09T10:00:00Z"),
        }
    }

    fn draft<'a>(kind: Kind, f: &'a Facts) -> Draft<'a> {
        Draft { id: 7, kind, recipient: "ada@example.org", locale: Some("en"), facts: f }
    }

    /// Every kind renders an email whose calendar parts have the method, UID and SEQUENCE the
    /// contract asks for, and an SMS; the texts say what happened and when, in the doctor's zone.
    #[test]
    fn every_event_kind_renders() -> TestResult {
        use AppointmentEvent::*;
        let s = sender()?;
        // (kind, subject starts, the body says, calendars as (method, appointment, SEQUENCE))
        type Case<'a> = (Kind, &'a str, &'a str, &'a [(&'a str, i64, u32)]);
        let cases: [Case<'_>; 8] = [
            (Kind::Event(Booked), "Appointment booked", "is booked", &[("REQUEST", 42, 0)]),
            (Kind::Event(Held), "Seat held", "held for you until Wednesday 9 January 2030, 11:10", &[("REQUEST", 42, 0)]),
            (Kind::Event(Confirmed), "Appointment confirmed", "is confirmed", &[("REQUEST", 42, 1)]),
            (Kind::Event(Cancelled), "Appointment cancelled", "was cancelled by the clinic", &[("CANCEL", 42, 2)]),
            (Kind::Event(Expired), "Hold expired", "was released", &[("CANCEL", 42, 2)]),
            (
                Kind::Event(Rescheduled),
                "Appointment moved",
                "The earlier time, Tuesday 8 January 2030, 16:00–16:30 (Europe/Paris), is cancelled",
                &[("REQUEST", 42, 0), ("CANCEL", 41, 2)],
            ),
            (
                Kind::Event(Offered),
                "A seat was freed",
                "A seat was freed with Dr Ada <Lovelace> & Co and is held for you until Wednesday 9 January 2030, 11:10",
                &[("REQUEST", 42, 0)],
            ),
            (Kind::Reminder, "Reminder", "A reminder of your appointment", &[]),
        ];
        for (kind, subject, sentence, calendars) in cases {
            let event = match kind {
                Kind::Event(e) => e,
                Kind::Reminder => Booked,
            };
            let f = facts(event);
            let e = email(&s, &draft(kind, &f))?;
            assert!(e.subject.starts_with(subject), "{kind:?}: {}", e.subject);
            assert!(e.subject.contains("Thu 10 Jan 09:00 (Europe/Paris)"), "{kind:?}: {}", e.subject);
            assert!(e.text.contains(sentence), "{kind:?}: {}", e.text);
            assert!(e.text.contains("Thursday 10 January 2030, 09:00–09:30 (Europe/Paris)"), "{kind:?}");
            assert!(e.text.contains("Reference: appointment 42"), "{kind:?}");
            assert!(e.html.contains("Dr Ada &lt;Lovelace&gt; &amp; Co") && !e.html.contains("<Lovelace>"), "{kind:?}");
            assert_eq!(e.calendars.len(), calendars.len(), "{kind:?}");
            for (c, (method, id, seq)) in e.calendars.iter().zip(calendars.iter()) {
                assert_eq!(c.method.as_str(), *method, "{kind:?}");
                assert!(c.content.contains(&format!("\r\nMETHOD:{method}\r\n")), "{kind:?}");
                assert!(c.content.contains(&format!("\r\nUID:appointment-{id}@clinic.example\r\n")), "{kind:?}");
                assert!(c.content.contains(&format!("\r\nSEQUENCE:{seq}\r\n")), "{kind:?}");
                assert!(c.content.contains("\r\nDTSTAMP:20300109T100000Z\r\n"), "{kind:?}");
                assert!(c.content.contains("ATTENDEE;ROLE=REQ-PARTICIPANT;RSVP=FALSE:mailto:ada@example.org"));
            }
            let text = sms(&draft(kind, &f))?;
            assert!(text.contains("Thu 10 Jan 09:00 (Europe/Paris)") && text.ends_with("Ref 42"), "{kind:?}: {text}");
        }
        Ok(())
    }

    #[test]
    fn cancellations_say_who_cancelled() -> TestResult {
        let s = sender()?;
        for (by, says) in
            [("PATIENT", "at your request"), ("PARTNER", "by the service that booked it"), ("CLINIC", "by the clinic")]
        {
            let mut f = facts(AppointmentEvent::Cancelled);
            f.by = Some(by.into());
            let e = email(&s, &draft(Kind::Event(AppointmentEvent::Cancelled), &f))?;
            assert!(e.text.contains(says), "{by}: {}", e.text);
            assert!(sms(&draft(Kind::Event(AppointmentEvent::Cancelled), &f))?.contains(says));
        }
        Ok(())
    }

    #[test]
    fn the_full_message_is_multipart_with_a_stable_message_id() -> TestResult {
        let s = sender()?;
        let f = facts(AppointmentEvent::Booked);
        let message = email_message(&s, &draft(Kind::Event(AppointmentEvent::Booked), &f), f.at)?;
        let raw = String::from_utf8(message.formatted())?;
        for needle in [
            "From: Clinic <no-reply@clinic.example>",
            "To: ada@example.org",
            "Message-ID: <message-7@clinic.example>",
            "Auto-Submitted: auto-generated",
            "Date: Wed, 09 Jan 2030 10:00:00 +0000",
            "multipart/mixed",
            "multipart/alternative",
            "text/plain",
            "text/html",
            "text/calendar; method=REQUEST",
            "filename=\"appointment-42.ics\"",
        ] {
            assert!(raw.contains(needle), "{needle} in\n{raw}");
        }
        let again =
            String::from_utf8(email_message(&s, &draft(Kind::Event(AppointmentEvent::Booked), &f), f.at)?.formatted())?;
        assert!(again.contains("Message-ID: <message-7@clinic.example>"));
        assert!(email_message(&s, &Draft { recipient: "not an address", ..draft(Kind::Reminder, &f) }, f.at).is_err());
        Ok(())
    }

    #[test]
    fn unknown_facts_are_refused() {
        assert!(facts_of("{}").is_err());
        assert!(facts_of(r#"{"v":99,"appointment_id":1,"doctor":"x","timezone":"UTC","start_at":"2030-01-01T00:00:00Z","end_at":"2030-01-01T00:15:00Z","at":"2030-01-01T00:00:00Z"}"#).is_err());
        assert!(facts_of(r#"{"v":1,"appointment_id":1,"doctor":"x","timezone":"UTC","start_at":"2030-01-01T00:00:00Z","end_at":"2030-01-01T00:15:00Z","at":"2030-01-01T00:00:00Z"}"#).is_ok());
    }

    fn facts_of(raw: &str) -> Result<Facts, RenderError> {
        super::facts(raw)
    }
}
