//! From the service's rows to FHIR resources: one doctor is a `Practitioner`, a
//! `PractitionerRole` and a `Schedule` (all three with the doctor's id); a slot is a `Slot`; an
//! appointment is an `Appointment`; the clinic is one `Location`.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use super::resources::{
    Address, Appointment, AppointmentParticipant, CodeableConcept, Coding, ContactPoint, Extension, HumanName,
    Location, Period, Practitioner, PractitionerRole, Reference, Schedule, Slot,
};
use super::settings::LocationSettings;
use crate::{
    db::entity::{appointment, doctor},
    model::{AppointmentStatus, CancelledBy},
};

/// The id of the clinic's one `Location`.
pub const LOCATION_ID: &str = "clinic";
/// SMART Scheduling Links: seats left in a slot.
pub const SLOT_CAPACITY_URL: &str = "http://fhir-registry.smarthealthit.org/StructureDefinition/slot-capacity";
/// SMART Scheduling Links: where a person books the slot.
pub const BOOKING_DEEP_LINK_URL: &str = "http://fhir-registry.smarthealthit.org/StructureDefinition/booking-deep-link";
/// R5's `Appointment.cancellationDate`, carried in R4 by its cross-version extension.
pub const CANCELLATION_DATE_URL: &str =
    "http://hl7.org/fhir/5.0/StructureDefinition/extension-Appointment.cancellationDate";
/// The code system of `Appointment.cancelationReason`.
const CANCELLATION_REASON_SYSTEM: &str = "http://terminology.hl7.org/CodeSystem/appointment-cancellation-reason";

/// What the mapping needs besides the rows: the settings that shape the resources.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapSettings {
    /// `PUBLIC_BOOKING_URL`: the template of `booking-deep-link`.
    pub booking_url: Option<String>,
    /// The clinic.
    pub location: LocationSettings,
}

/// An instant as FHIR `instant`: milliseconds and the offset of `tz` at that moment (`Z` when
/// it is zero), e.g. `2026-12-01T09:00:00.000+01:00`.
pub fn instant(t: DateTime<Utc>, tz: Tz) -> String {
    use chrono::{Datelike, Timelike};
    use std::fmt::Write;
    // By hand: chrono's `format` reads its pattern on every call, and the feed writes two of
    // these per slot, millions of them.
    let local = t.with_timezone(&tz);
    let offset = chrono::Offset::fix(local.offset()).local_minus_utc();
    let mut out = String::with_capacity(29);
    let _ = write!(
        out,
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}",
        local.year(),
        local.month(),
        local.day(),
        local.hour(),
        local.minute(),
        local.second(),
        local.nanosecond() / 1_000_000 % 1000
    );
    if offset == 0 {
        out.push('Z');
    } else {
        let sign = if offset < 0 { '-' } else { '+' };
        let abs = offset.unsigned_abs();
        let _ = write!(out, "{sign}{:02}:{:02}", abs / 3600, abs / 60 % 60);
    }
    out
}

/// The doctor's zone (UTC for a name the database should never hold).
pub fn zone(doctor: &doctor::Model) -> Tz {
    doctor.timezone.parse().unwrap_or(chrono_tz::UTC)
}

/// The FHIR status of a slot: `free` while a seat is left, `busy` when full, `busy-unavailable`
/// when closed.
pub fn slot_status(capacity: i32, booked: i32, closed: bool) -> &'static str {
    if closed {
        "busy-unavailable"
    } else if booked < capacity {
        "free"
    } else {
        "busy"
    }
}

/// The booking page of one slot: `{slot}` in the template is replaced by its id, otherwise
/// `slot={id}` is added to the template's query.
pub fn deep_link(template: &str, slot_id: i64) -> String {
    if template.contains("{slot}") {
        return template.replace("{slot}", &slot_id.to_string());
    }
    let sep = if !template.contains('?') {
        "?"
    } else if template.ends_with('?') || template.ends_with('&') {
        ""
    } else {
        "&"
    };
    format!("{template}{sep}slot={slot_id}")
}

/// The facts of a slot a `Slot` is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotFacts {
    /// Its id.
    pub id: i64,
    /// Its doctor.
    pub doctor_id: i64,
    /// Start.
    pub start_at: DateTime<Utc>,
    /// End.
    pub end_at: DateTime<Utc>,
    /// Seats.
    pub capacity: i32,
    /// Seats taken.
    pub booked: i32,
    /// Closed by the clinic.
    pub closed: bool,
}

impl From<&crate::db::entity::time_slot::Model> for SlotFacts {
    fn from(s: &crate::db::entity::time_slot::Model) -> Self {
        Self {
            id: s.id,
            doctor_id: s.doctor_id,
            start_at: s.start_at,
            end_at: s.end_at,
            capacity: s.capacity,
            booked: s.booked_count,
            closed: s.closed_at.is_some(),
        }
    }
}

/// A `Slot`, in the doctor's zone `tz`.
pub fn slot(s: &SlotFacts, tz: Tz, settings: &MapSettings) -> Slot {
    let left = if s.closed { 0 } else { (s.capacity - s.booked).max(0) };
    let mut extension =
        vec![Extension { url: SLOT_CAPACITY_URL.into(), value_integer: Some(i64::from(left)), ..Extension::default() }];
    if let Some(template) = &settings.booking_url {
        extension.push(Extension {
            url: BOOKING_DEEP_LINK_URL.into(),
            value_url: Some(deep_link(template, s.id)),
            ..Extension::default()
        });
    }
    Slot {
        id: s.id.to_string(),
        extension,
        schedule: Reference::to("Schedule", s.doctor_id),
        status: slot_status(s.capacity, s.booked, s.closed).into(),
        start: instant(s.start_at, tz),
        end: instant(s.end_at, tz),
    }
}

/// The doctor as a person.
pub fn practitioner(d: &doctor::Model) -> Practitioner {
    Practitioner { id: d.id.to_string(), active: Some(true), name: vec![HumanName { text: Some(d.name.clone()) }] }
}

/// The doctor in the clinic, with its specialty.
pub fn practitioner_role(d: &doctor::Model, settings: &MapSettings) -> PractitionerRole {
    PractitionerRole {
        id: d.id.to_string(),
        active: Some(true),
        practitioner: Some(Reference::to("Practitioner", d.id).with_display(&d.name)),
        specialty: d.specialty.iter().map(CodeableConcept::text).collect(),
        location: vec![location_reference(settings)],
    }
}

/// The doctor's calendar. Its one actor is the `PractitionerRole` (the contract's shape); the
/// clinic's `Location` is the role's `location`, so aggregators still find where it is.
/// `scheduled_through` (the doctor's horizon, when it has working hours) gives its
/// `planningHorizon`: from the start of today to the end of that day, in the doctor's zone.
pub fn schedule(d: &doctor::Model, scheduled_through: Option<chrono::NaiveDate>) -> Schedule {
    let service = d.specialty.clone().unwrap_or_else(|| "Appointment".into());
    let tz = zone(d);
    let planning_horizon = scheduled_through.map(|through| {
        let today = chrono::Utc::now().with_timezone(&tz).date_naive();
        Period {
            start: instant(crate::model::day_bounds(tz, today).0, tz),
            end: instant(crate::model::day_bounds(tz, through).1, tz),
        }
    });
    Schedule {
        id: d.id.to_string(),
        active: Some(true),
        service_type: vec![CodeableConcept::text(service)],
        actor: vec![Reference::to("PractitionerRole", d.id).with_display(&d.name)],
        planning_horizon,
    }
}

fn location_reference(settings: &MapSettings) -> Reference {
    Reference::to("Location", LOCATION_ID).with_display(&settings.location.name)
}

/// The clinic.
pub fn location(settings: &MapSettings) -> Location {
    let l = &settings.location;
    Location {
        id: LOCATION_ID.into(),
        status: Some("active".into()),
        name: Some(l.name.clone()),
        telecom: l
            .phone
            .iter()
            .map(|p| ContactPoint { system: Some("phone".into()), value: Some(p.clone()), use_: Some("work".into()) })
            .collect(),
        address: l.address.as_ref().map(|a| Address {
            line: a.lines.clone(),
            city: Some(a.city.clone()),
            state: Some(a.state.clone()),
            postal_code: Some(a.postal_code.clone()),
        }),
    }
}

/// An appointment in the doctor `doctor_id`'s zone `tz`, with its slots by start.
pub fn appointment(a: &appointment::Model, doctor_id: i64, tz: Tz, slot_ids: &[i64]) -> Appointment {
    let status = a.status();
    let fhir_status = match status {
        AppointmentStatus::Held => "pending",
        AppointmentStatus::Booked => "booked",
        AppointmentStatus::Cancelled | AppointmentStatus::Expired => "cancelled",
        AppointmentStatus::Arrived => "arrived",
        AppointmentStatus::Fulfilled => "fulfilled",
        AppointmentStatus::NoShow => "noshow",
    };
    let cancelled = matches!(status, AppointmentStatus::Cancelled | AppointmentStatus::Expired);
    let mut extension = Vec::new();
    if let (true, Some(at)) = (cancelled, a.cancelled_at) {
        extension.push(Extension {
            url: CANCELLATION_DATE_URL.into(),
            value_date_time: Some(instant(at, tz)),
            ..Extension::default()
        });
    }
    let patient_status = if status == AppointmentStatus::Held { "tentative" } else { "accepted" };
    let slots: Vec<i64> = if slot_ids.is_empty() { vec![a.slot_id] } else { slot_ids.to_vec() };
    Appointment {
        id: a.id.to_string(),
        extension,
        status: fhir_status.into(),
        cancelation_reason: cancelled.then(|| cancellation_reason(a, status)),
        start: Some(instant(a.start_at, tz)),
        end: Some(instant(a.end_at, tz)),
        minutes_duration: Some((a.end_at - a.start_at).num_minutes()).filter(|m| *m > 0),
        slot: slots.iter().map(|id| Reference::to("Slot", id)).collect(),
        created: Some(instant(a.created_at, tz)),
        participant: vec![
            AppointmentParticipant {
                actor: Some(Reference::to("Patient", a.patient_id)),
                required: Some("required".into()),
                status: patient_status.into(),
            },
            AppointmentParticipant {
                actor: Some(Reference::to("PractitionerRole", doctor_id)),
                required: Some("required".into()),
                status: "accepted".into(),
            },
        ],
    }
}

/// A slot as an appointment that could be booked (`$find`, IHE ITI-115): `proposed`, no id,
/// the slot, its times in the doctor's zone and the `PractitionerRole`, who has yet to accept.
pub fn proposed_appointment(slot: &crate::db::entity::time_slot::Model, tz: Tz) -> Appointment {
    Appointment {
        id: String::new(),
        extension: Vec::new(),
        status: "proposed".into(),
        cancelation_reason: None,
        start: Some(instant(slot.start_at, tz)),
        end: Some(instant(slot.end_at, tz)),
        minutes_duration: Some((slot.end_at - slot.start_at).num_minutes()).filter(|m| *m > 0),
        slot: vec![Reference::to("Slot", slot.id)],
        created: None,
        participant: vec![AppointmentParticipant {
            actor: Some(Reference::to("PractitionerRole", slot.doctor_id)),
            required: Some("required".into()),
            status: "needs-action".into(),
        }],
    }
}

/// Who cancelled, as the HL7 cancellation reasons say it (`pat`, `prov`, `other`), with our own
/// words in `text`.
fn cancellation_reason(a: &appointment::Model, status: AppointmentStatus) -> CodeableConcept {
    let (code, display, mut text) = if status == AppointmentStatus::Expired {
        ("other", "Other", "The hold expired before it was confirmed".to_owned())
    } else {
        match a.cancelled_by.as_deref().and_then(CancelledBy::parse) {
            Some(CancelledBy::Patient) => ("pat", "Patient", "Cancelled by the patient".to_owned()),
            Some(CancelledBy::Clinic) => ("prov", "Provider", "Cancelled by the clinic".to_owned()),
            Some(CancelledBy::Partner) => ("other", "Other", "Cancelled by the booking partner".to_owned()),
            None => ("other", "Other", "Cancelled".to_owned()),
        }
    };
    if let Some(to) = a.rescheduled_to {
        text = format!("{text}: rescheduled as Appointment/{to}");
    }
    CodeableConcept {
        coding: vec![Coding {
            system: Some(CANCELLATION_REASON_SYSTEM.into()),
            code: Some(code.into()),
            display: Some(display.into()),
        }],
        text: Some(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn instants_carry_the_doctors_offset_and_milliseconds() {
        let t = Utc.with_ymd_and_hms(2026, 12, 1, 8, 0, 0).unwrap();
        assert_eq!(instant(t, chrono_tz::UTC), "2026-12-01T08:00:00.000Z");
        assert_eq!(instant(t, chrono_tz::Europe::Paris), "2026-12-01T09:00:00.000+01:00");
        assert_eq!(instant(t, chrono_tz::America::New_York), "2026-12-01T03:00:00.000-05:00");
        let summer = Utc.with_ymd_and_hms(2026, 7, 1, 8, 0, 0).unwrap();
        assert_eq!(instant(summer, chrono_tz::Europe::London), "2026-07-01T09:00:00.000+01:00");
        assert_eq!(instant(t, chrono_tz::Europe::London), "2026-12-01T08:00:00.000Z");
        let odd = Utc.with_ymd_and_hms(2026, 12, 1, 8, 0, 7).unwrap() + chrono::Duration::milliseconds(45);
        assert_eq!(instant(odd, chrono_tz::Asia::Kathmandu), "2026-12-01T13:45:07.045+05:45");
        assert_eq!(instant(odd, chrono_tz::America::St_Johns), "2026-12-01T04:30:07.045-03:30");
        for tz in [chrono_tz::UTC, chrono_tz::Europe::Paris, chrono_tz::America::New_York, chrono_tz::Asia::Kolkata] {
            let by_chrono = odd.with_timezone(&tz).format("%Y-%m-%dT%H:%M:%S%.3f%:z").to_string();
            assert_eq!(instant(odd, tz), by_chrono.replace("+00:00", "Z"), "{tz}");
        }
    }

    #[test]
    fn statuses() {
        assert_eq!(slot_status(2, 1, false), "free");
        assert_eq!(slot_status(2, 2, false), "busy");
        assert_eq!(slot_status(2, 0, true), "busy-unavailable");
    }

    #[test]
    fn deep_links() {
        assert_eq!(deep_link("https://b.example/book", 12), "https://b.example/book?slot=12");
        assert_eq!(deep_link("https://b.example/book?src=x", 12), "https://b.example/book?src=x&slot=12");
        assert_eq!(deep_link("https://b.example/book?", 12), "https://b.example/book?slot=12");
        assert_eq!(deep_link("https://b.example/slots/{slot}/book", 12), "https://b.example/slots/12/book");
    }
}
