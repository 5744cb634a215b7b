//! The few lines of iCalendar (RFC 5545) an appointment invitation needs, written by hand:
//! one `VEVENT` in a `VCALENDAR` with an iTIP method (RFC 5546), CRLF line ends, lines folded
//! at 75 octets (never inside a UTF-8 character), times in UTC, text values escaped.
//!
//! A calendar client matches the events of one appointment by `UID`
//! (`appointment-<id>@<domain>`) and orders updates by `SEQUENCE`; see [`sequence`].

use chrono::{DateTime, Utc};

use crate::model::AppointmentEvent;

/// The iTIP method of a calendar object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// Add or update the event (a booking, hold, confirmation, the new time of a reschedule).
    Request,
    /// Remove it (a cancel, an expiry, the old time of a reschedule).
    Cancel,
}

impl Method {
    /// The `METHOD` value, also the `method` parameter of the MIME type.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Request => "REQUEST",
            Self::Cancel => "CANCEL",
        }
    }
}

/// One appointment as a calendar event.
#[derive(Clone, Debug)]
pub struct Event<'a> {
    /// Stable per appointment.
    pub uid: String,
    /// Increases along the appointment's life ([`sequence`]).
    pub sequence: u32,
    /// When this version of the event was made.
    pub stamp: DateTime<Utc>,
    /// Start.
    pub start: DateTime<Utc>,
    /// End.
    pub end: DateTime<Utc>,
    /// One line, e.g. "Appointment with Dr Ada".
    pub summary: &'a str,
    /// Longer text, optional.
    pub description: Option<&'a str>,
    /// `TENTATIVE` (a hold), `CONFIRMED` or `CANCELLED`.
    pub status: &'static str,
    /// The sender: (name, address).
    pub organizer: (&'a str, &'a str),
    /// The patient's address.
    pub attendee: &'a str,
}

/// The `UID` of an appointment's calendar event.
pub fn uid(appointment_id: i64, domain: &str) -> String {
    format!("appointment-{appointment_id}@{domain}")
}

/// The `SEQUENCE` of the event an appointment event sends: 0 when the appointment appears
/// (booked, held, offered, the new one of a reschedule), 1 when a hold is confirmed, 2 when it
/// goes (cancelled, expired, the old one of a reschedule). Every path of an appointment's life
/// passes these in increasing order, so a client never takes an older version for a newer one,
/// whatever order the messages arrive in.
pub fn sequence(event: AppointmentEvent) -> u32 {
    match event {
        AppointmentEvent::Booked
        | AppointmentEvent::Held
        | AppointmentEvent::Offered
        | AppointmentEvent::Rescheduled => 0,
        // The desk's events send no message; were they to, they keep the visit in place.
        AppointmentEvent::Confirmed
        | AppointmentEvent::Arrived
        | AppointmentEvent::Fulfilled
        | AppointmentEvent::NoShow => 1,
        AppointmentEvent::Cancelled | AppointmentEvent::Expired => CANCEL_SEQUENCE,
    }
}

/// The `SEQUENCE` of a cancellation.
pub const CANCEL_SEQUENCE: u32 = 2;

/// The calendar object: `VCALENDAR` with `METHOD` and one `VEVENT`, CRLF-terminated lines.
pub fn calendar(method: Method, e: &Event<'_>) -> String {
    let mut lines = vec![
        "BEGIN:VCALENDAR".to_owned(),
        "VERSION:2.0".to_owned(),
        "PRODID:-//clinic-booking//appointments//EN".to_owned(),
        "CALSCALE:GREGORIAN".to_owned(),
        format!("METHOD:{}", method.as_str()),
        "BEGIN:VEVENT".to_owned(),
        format!("UID:{}", e.uid),
        format!("SEQUENCE:{}", e.sequence),
        format!("DTSTAMP:{}", utc(e.stamp)),
        format!("DTSTART:{}", utc(e.start)),
        format!("DTEND:{}", utc(e.end)),
        format!("SUMMARY:{}", text(e.summary)),
    ];
    if let Some(d) = e.description {
        lines.push(format!("DESCRIPTION:{}", text(d)));
    }
    lines.push(format!("STATUS:{}", e.status));
    lines.push(format!("ORGANIZER;CN={}:mailto:{}", param(e.organizer.0), e.organizer.1));
    lines.push(format!("ATTENDEE;ROLE=REQ-PARTICIPANT;RSVP=FALSE:mailto:{}", e.attendee));
    lines.push("END:VEVENT".to_owned());
    lines.push("END:VCALENDAR".to_owned());
    let mut out = String::new();
    for line in lines {
        fold(&line, &mut out);
    }
    out
}

/// A UTC date-time in the basic format (`19970714T173000Z`).
fn utc(t: DateTime<Utc>) -> String {
    t.format("%Y%m%dT%H%M%SZ").to_string()
}

/// A TEXT value: backslash, semicolon, comma and line breaks escaped (RFC 5545 §3.3.11).
fn text(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for c in raw.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            ';' => out.push_str("\\;"),
            ',' => out.push_str("\\,"),
            '\n' => out.push_str("\\n"),
            '\r' => {}
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// A parameter value: quoted, without the characters a quoted value cannot hold.
fn param(raw: &str) -> String {
    let clean: String = raw.chars().filter(|c| *c != '"' && !c.is_control()).collect();
    format!("\"{clean}\"")
}

/// Appends `line` folded to lines of at most 75 octets (continuations start with a space),
/// each ended by CRLF, splitting only between characters.
fn fold(line: &str, out: &mut String) {
    const LIMIT: usize = 75;
    let mut used = 0;
    for c in line.chars() {
        if used + c.len_utf8() > LIMIT {
            out.push_str("\r\n ");
            used = 1;
        }
        out.push(c);
        used += c.len_utf8();
    }
    out.push_str("\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(summary: &str) -> Event<'_> {
        let t = |s: &str| DateTime::parse_from_rfc3339(s).map(|d| d.with_timezone(&Utc)).unwrap_or_default();
        Event {
            uid: uid(12, "clinic.example"),
            sequence: 0,
            stamp: t("2030-01-09T10:00:00Z"),
            start: t("2030-01-10T08:00:00Z"),
            end: t("2030-01-10T08:15:00Z"),
            summary,
            description: Some("Line one\nline two, with; punctuation \\ here"),
            status: "CONFIRMED",
            organizer: ("clinic \"booking\"", "no-reply@clinic.example"),
            attendee: "ada@example.org",
        }
    }

    #[test]
    fn a_request_has_the_required_properties() {
        let ics = calendar(Method::Request, &event("Appointment with Dr Ada"));
        assert!(ics.starts_with("BEGIN:VCALENDAR\r\nVERSION:2.0\r\n"));
        for line in [
            "METHOD:REQUEST",
            "UID:appointment-12@clinic.example",
            "SEQUENCE:0",
            "DTSTAMP:20300109T100000Z",
            "DTSTART:20300110T080000Z",
            "DTEND:20300110T081500Z",
            "SUMMARY:Appointment with Dr Ada",
            "DESCRIPTION:Line one\\nline two\\, with\\; punctuation \\\\ here",
            "ORGANIZER;CN=\"clinic booking\":mailto:no-reply@clinic.example",
        ] {
            assert!(ics.contains(&format!("\r\n{line}\r\n")), "{line} in {ics}");
        }
        assert!(ics.ends_with("END:VEVENT\r\nEND:VCALENDAR\r\n"));
        assert!(!ics.replace("\r\n", "").contains('\n'), "only CRLF line ends");
    }

    #[test]
    fn long_lines_fold_at_75_octets_between_characters() {
        let name = "Dr Émilie-Anne Fontaine-Delacroix de la Tour d'Auvergne, ".repeat(4);
        let ics = calendar(Method::Cancel, &event(&name));
        for line in ics.split("\r\n") {
            assert!(line.len() <= 75, "{} octets: {line:?}", line.len());
        }
        // Unfolding (dropping CRLF + one space) gives the value back.
        let unfolded = ics.replace("\r\n ", "");
        assert!(unfolded.contains(&format!("SUMMARY:{}", text(&name))));
        assert!(unfolded.contains("METHOD:CANCEL"));
    }

    #[test]
    fn sequences_increase_along_every_life() {
        use AppointmentEvent::*;
        for path in [
            [Booked, Cancelled].as_slice(),
            &[Held, Confirmed, Cancelled],
            &[Held, Expired],
            &[Offered, Confirmed, Cancelled],
            &[Rescheduled, Confirmed, Cancelled],
        ] {
            let seqs: Vec<u32> = path.iter().map(|e| sequence(*e)).collect();
            assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{path:?}: {seqs:?}");
        }
    }
}
