//! What a webhook says: the event types partners subscribe to, and the JSON body of one event.
//!
//! The body is made once, when the delivery is recorded, and stored: every attempt and every
//! redelivery sends the same bytes with the same `webhook-id`.

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::{
    db::{appointments::AppointmentRecord, entity::appointment},
    model::AppointmentEvent,
};

/// The event types of the API (`WebhookEventType`), written on the wire in lower case with a
/// dot (`appointment.booked`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    /// A seat was booked.
    Booked,
    /// A seat was held until `expiresAt` (also a waitlist offer).
    Held,
    /// A hold became a booking.
    Confirmed,
    /// An appointment was cancelled (`cancelledBy` says by whom).
    Cancelled,
    /// A hold ran out.
    Expired,
    /// The appointment replaces the one it was `rescheduledFrom`.
    Rescheduled,
    /// The patient checked in at the desk (`arrivedAt`).
    Arrived,
    /// The patient was seen (`completedAt`).
    Fulfilled,
    /// The patient did not come.
    NoShow,
}

impl EventType {
    /// Every type, in the order of the API's enum.
    pub const ALL: [Self; 9] = [
        Self::Booked,
        Self::Held,
        Self::Confirmed,
        Self::Cancelled,
        Self::Expired,
        Self::Rescheduled,
        Self::Arrived,
        Self::Fulfilled,
        Self::NoShow,
    ];

    /// The type as written in the body's `type` and stored.
    pub fn wire(self) -> &'static str {
        match self {
            Self::Booked => "appointment.booked",
            Self::Held => "appointment.held",
            Self::Confirmed => "appointment.confirmed",
            Self::Cancelled => "appointment.cancelled",
            Self::Expired => "appointment.expired",
            Self::Rescheduled => "appointment.rescheduled",
            Self::Arrived => "appointment.arrived",
            Self::Fulfilled => "appointment.fulfilled",
            Self::NoShow => "appointment.noshow",
        }
    }

    /// The type a stored word names.
    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.wire() == raw)
    }

    /// The type partners see for an appointment event. A waitlist offer makes a hold for the
    /// patient, so it reads as `appointment.held`.
    pub fn of(event: AppointmentEvent) -> Self {
        match event {
            AppointmentEvent::Booked => Self::Booked,
            AppointmentEvent::Held | AppointmentEvent::Offered => Self::Held,
            AppointmentEvent::Confirmed => Self::Confirmed,
            AppointmentEvent::Cancelled => Self::Cancelled,
            AppointmentEvent::Expired => Self::Expired,
            AppointmentEvent::Rescheduled => Self::Rescheduled,
            AppointmentEvent::Arrived => Self::Arrived,
            AppointmentEvent::Fulfilled => Self::Fulfilled,
            AppointmentEvent::NoShow => Self::NoShow,
        }
    }
}

/// An endpoint's filter as stored: `None` for every type (types added later included).
pub fn store_filter(types: Option<&[EventType]>) -> Option<String> {
    let types = types.filter(|t| !t.is_empty())?;
    // In the API's order, each once.
    let words: Vec<&str> = EventType::ALL.into_iter().filter(|t| types.contains(t)).map(EventType::wire).collect();
    Some(words.join(","))
}

/// The types a stored filter lets through.
pub fn read_filter(stored: Option<&str>) -> Vec<EventType> {
    match stored {
        None => EventType::ALL.to_vec(),
        Some(words) => words.split(',').filter_map(EventType::parse).collect(),
    }
}

/// Whether a stored filter lets `kind` through.
pub fn filter_accepts(stored: Option<&str>, kind: EventType) -> bool {
    stored.is_none_or(|words| words.split(',').any(|w| w == kind.wire()))
}

/// The body of one event.
#[derive(Serialize)]
struct Envelope<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    timestamp: String,
    data: Data<'a>,
}

#[derive(Serialize)]
struct Data<'a> {
    appointment: AppointmentBody<'a>,
}

/// The appointment as the GraphQL API shows it: ids as decimal strings, times in RFC 3339 as
/// the API renders them, absent values as `null` (the shape never varies).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AppointmentBody<'a> {
    id: String,
    slot_id: String,
    doctor_id: String,
    patient_id: String,
    status: &'a str,
    start_at: String,
    end_at: String,
    created_at: String,
    cancelled_at: Option<String>,
    expires_at: Option<String>,
    cancelled_by: Option<&'a str>,
    rescheduled_from: Option<String>,
    rescheduled_to: Option<String>,
    arrived_at: Option<String>,
    completed_at: Option<String>,
}

/// RFC 3339 exactly as the GraphQL `DateTime` scalar writes it.
fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339()
}

/// The JSON body of an event about `record` (as the event left it), which committed at `at`.
pub fn body(kind: EventType, record: &AppointmentRecord, at: DateTime<Utc>) -> String {
    let a: &appointment::Model = &record.appointment;
    let envelope = Envelope {
        kind: kind.wire(),
        timestamp: time(at),
        data: Data {
            appointment: AppointmentBody {
                id: a.id.to_string(),
                slot_id: a.slot_id.to_string(),
                doctor_id: record.doctor_id.to_string(),
                patient_id: a.patient_id.to_string(),
                status: &a.status,
                start_at: time(a.start_at),
                end_at: time(a.end_at),
                created_at: time(a.created_at),
                cancelled_at: a.cancelled_at.map(time),
                expires_at: a.expires_at.map(time),
                cancelled_by: a.cancelled_by.as_deref(),
                rescheduled_from: a.rescheduled_from.map(|id| id.to_string()),
                rescheduled_to: a.rescheduled_to.map(|id| id.to_string()),
                arrived_at: a.arrived_at.map(time),
                completed_at: a.completed_at.map(time),
            },
        },
    };
    // Strings and options of strings only: serialising cannot fail.
    serde_json::to_string(&envelope).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use serde_json::{json, Value};

    use super::*;

    fn at(h: u32, m: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2030, 1, 10, h, m, 0).unwrap()
    }

    fn record(status: &str) -> AppointmentRecord {
        AppointmentRecord {
            appointment: appointment::Model {
                id: 41,
                slot_id: 7,
                patient_id: 77,
                status: status.into(),
                booked_by: "partner:acme".into(),
                idempotency_key: "k".into(),
                request_hash: "h".into(),
                created_at: at(8, 0),
                cancelled_at: None,
                start_at: at(9, 0),
                end_at: at(9, 30),
                slot_count: 2,
                expires_at: None,
                cancelled_by: None,
                rescheduled_from: None,
                rescheduled_to: None,
                first_booked_by: None,
                arrived_at: None,
                completed_at: None,
            },
            doctor_id: 3,
        }
    }

    fn parsed(kind: EventType, r: &AppointmentRecord) -> Value {
        serde_json::from_str(&body(
            kind,
            r,
            Utc.with_ymd_and_hms(2030, 1, 9, 12, 0, 0).unwrap() + chrono::Duration::milliseconds(250),
        ))
        .unwrap()
    }

    fn appointment(overrides: Value) -> Value {
        let mut base = json!({
            "id": "41", "slotId": "7", "doctorId": "3", "patientId": "77", "status": "BOOKED",
            "startAt": "2030-01-10T09:00:00+00:00", "endAt": "2030-01-10T09:30:00+00:00",
            "createdAt": "2030-01-10T08:00:00+00:00", "cancelledAt": null, "expiresAt": null,
            "cancelledBy": null, "rescheduledFrom": null, "rescheduledTo": null,
            "arrivedAt": null, "completedAt": null,
        });
        for (k, v) in overrides.as_object().unwrap() {
            base[k] = v.clone();
        }
        base
    }

    #[test]
    fn the_envelope_and_a_booking() {
        let text = body(EventType::Booked, &record("BOOKED"), at(8, 0));
        // Field order is fixed, so the bytes are too.
        assert!(text.starts_with(r#"{"type":"appointment.booked","timestamp":"2030-01-10T08:00:00+00:00","data":{"appointment":{"id":"41","slotId":"7""#), "{text}");
        let v = parsed(EventType::Booked, &record("BOOKED"));
        assert_eq!(v["timestamp"], "2030-01-09T12:00:00.250+00:00");
        assert_eq!(
            v,
            json!({ "type": "appointment.booked", "timestamp": v["timestamp"], "data": { "appointment": appointment(json!({})) } })
        );
    }

    #[test]
    fn every_event_type_has_its_body() {
        // held (and a waitlist offer): the hold's expiry.
        let mut held = record("HELD");
        held.appointment.expires_at = Some(at(8, 10));
        for event in [AppointmentEvent::Held, AppointmentEvent::Offered] {
            let v = parsed(EventType::of(event), &held);
            assert_eq!(v["type"], "appointment.held");
            assert_eq!(
                v["data"]["appointment"],
                appointment(json!({ "status": "HELD", "expiresAt": "2030-01-10T08:10:00+00:00" }))
            );
        }
        // confirmed: booked again, no expiry.
        let v = parsed(EventType::of(AppointmentEvent::Confirmed), &record("BOOKED"));
        assert_eq!(
            (v["type"].as_str(), &v["data"]["appointment"]),
            (Some("appointment.confirmed"), &appointment(json!({})))
        );
        // cancelled: when and by whom.
        let mut cancelled = record("CANCELLED");
        cancelled.appointment.cancelled_at = Some(at(8, 30));
        cancelled.appointment.cancelled_by = Some("PARTNER".into());
        let v = parsed(EventType::of(AppointmentEvent::Cancelled), &cancelled);
        assert_eq!(v["type"], "appointment.cancelled");
        assert_eq!(
            v["data"]["appointment"],
            appointment(
                json!({ "status": "CANCELLED", "cancelledAt": "2030-01-10T08:30:00+00:00", "cancelledBy": "PARTNER" })
            )
        );
        // expired: keeps the expiry it ran out at.
        let mut expired = record("EXPIRED");
        expired.appointment.expires_at = Some(at(8, 10));
        let v = parsed(EventType::of(AppointmentEvent::Expired), &expired);
        assert_eq!(v["type"], "appointment.expired");
        assert_eq!(
            v["data"]["appointment"],
            appointment(json!({ "status": "EXPIRED", "expiresAt": "2030-01-10T08:10:00+00:00" }))
        );
        // rescheduled: the new appointment, linked to the one it replaces.
        let mut moved = record("BOOKED");
        moved.appointment.rescheduled_from = Some(40);
        let v = parsed(EventType::of(AppointmentEvent::Rescheduled), &moved);
        assert_eq!(v["type"], "appointment.rescheduled");
        assert_eq!(v["data"]["appointment"], appointment(json!({ "rescheduledFrom": "40" })));
        // …and the old one, should it be sent, points forward.
        let mut old = record("CANCELLED");
        old.appointment.rescheduled_to = Some(42);
        old.appointment.cancelled_at = Some(at(8, 30));
        old.appointment.cancelled_by = Some("PATIENT".into());
        assert_eq!(parsed(EventType::Cancelled, &old)["data"]["appointment"]["rescheduledTo"], "42");
    }

    #[test]
    fn every_appointment_event_maps_to_a_type() {
        let wires: Vec<&str> = AppointmentEvent::ALL.into_iter().map(|e| EventType::of(e).wire()).collect();
        assert_eq!(
            wires,
            [
                "appointment.booked",
                "appointment.held",
                "appointment.confirmed",
                "appointment.cancelled",
                "appointment.expired",
                "appointment.rescheduled",
                "appointment.held",
                "appointment.arrived",
                "appointment.fulfilled",
                "appointment.noshow"
            ]
        );
        for t in EventType::ALL {
            assert_eq!(EventType::parse(t.wire()), Some(t));
        }
    }

    #[test]
    fn filters() {
        assert_eq!(store_filter(None), None);
        assert_eq!(store_filter(Some(&[])), None);
        let stored = store_filter(Some(&[EventType::Cancelled, EventType::Booked, EventType::Cancelled]));
        assert_eq!(stored.as_deref(), Some("appointment.booked,appointment.cancelled"));
        assert_eq!(read_filter(stored.as_deref()), [EventType::Booked, EventType::Cancelled]);
        assert_eq!(read_filter(None), EventType::ALL);
        assert!(filter_accepts(stored.as_deref(), EventType::Booked));
        assert!(!filter_accepts(stored.as_deref(), EventType::Held));
        assert!(filter_accepts(None, EventType::Expired));
    }
}
