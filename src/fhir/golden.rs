//! Golden files of the resources we write (`tests/fhir/golden/*.json`): each test maps fixed
//! rows, compares the JSON with its file (as JSON values, so whitespace and key order do not
//! matter) and reads the file back into the same value. `UPDATE_GOLDEN=1` rewrites the files.

use std::path::PathBuf;

use chrono::{DateTime, TimeZone, Utc};

use super::{
    capability,
    map::{self, MapSettings, SlotFacts},
    outcome::FhirError,
    resources::Resource,
    settings::{LocationSettings, PostalAddress},
};
use crate::db::entity::{appointment, doctor};

fn at(h: u32, m: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, h, m, 0).unwrap()
}

fn settings() -> MapSettings {
    MapSettings {
        booking_url: Some("https://book.example.com/slots?src=fhir".into()),
        location: LocationSettings {
            name: "Riverside Clinic".into(),
            phone: Some("+1 413 555 0100".into()),
            address: Some(PostalAddress {
                lines: vec!["173 Elm St".into()],
                city: "Pittsfield".into(),
                state: "MA".into(),
                postal_code: "01201".into(),
            }),
        },
    }
}

fn doctor() -> doctor::Model {
    doctor::Model {
        id: 3,
        name: "Dr Ada Smith".into(),
        specialty: Some("cardiology".into()),
        timezone: "Europe/Paris".into(),
        created_at: at(0, 0),
    }
}

fn appointment(status: &str) -> appointment::Model {
    appointment::Model {
        id: 5,
        slot_id: 12,
        patient_id: 77,
        status: status.into(),
        booked_by: "partner:p1".into(),
        idempotency_key: "k".into(),
        request_hash: "h".into(),
        created_at: at(7, 30),
        cancelled_at: None,
        start_at: at(8, 0),
        end_at: at(8, 30),
        slot_count: 2,
        expires_at: None,
        cancelled_by: None,
        rescheduled_from: None,
        rescheduled_to: None,
        first_booked_by: None,
        arrived_at: None,
        completed_at: None,
    }
}

fn check(name: &str, resource: Resource) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fhir/golden").join(format!("{name}.json"));
    let actual = serde_json::to_value(&resource).unwrap();
    if std::env::var("UPDATE_GOLDEN").as_deref() == Ok("1") {
        std::fs::write(&path, serde_json::to_string_pretty(&actual).unwrap() + "\n").unwrap();
    }
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", path.display()));
    let expected: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(actual, expected, "{name} differs from {}", path.display());
    let read: Resource = serde_json::from_str(&text).unwrap();
    assert_eq!(read, resource, "{name} does not read back");
}

#[test]
fn slot() {
    let facts = SlotFacts {
        id: 12,
        doctor_id: 3,
        start_at: at(8, 0),
        end_at: at(8, 15),
        capacity: 3,
        booked: 1,
        closed: false,
    };
    check("slot-free", Resource::Slot(map::slot(&facts, chrono_tz::Europe::Paris, &settings())));
    let closed = SlotFacts { closed: true, ..facts };
    let plain = MapSettings { booking_url: None, ..settings() };
    check("slot-closed", Resource::Slot(map::slot(&closed, chrono_tz::UTC, &plain)));
}

#[test]
fn doctor_resources() {
    check("practitioner", Resource::Practitioner(map::practitioner(&doctor())));
    check("practitioner-role", Resource::PractitionerRole(map::practitioner_role(&doctor(), &settings())));
    check("schedule", Resource::Schedule(map::schedule(&doctor(), None)));
    check("location", Resource::Location(map::location(&settings())));
}

#[test]
fn appointments() {
    let tz = chrono_tz::Europe::Paris;
    check("appointment-booked", Resource::Appointment(map::appointment(&appointment("BOOKED"), 3, tz, &[12, 13])));
    let held = appointment::Model { expires_at: Some(at(7, 40)), ..appointment("HELD") };
    check("appointment-held", Resource::Appointment(map::appointment(&held, 3, tz, &[12, 13])));
    let cancelled = appointment::Model {
        cancelled_at: Some(at(7, 45)),
        cancelled_by: Some("CLINIC".into()),
        rescheduled_to: Some(6),
        ..appointment("CANCELLED")
    };
    check("appointment-cancelled", Resource::Appointment(map::appointment(&cancelled, 3, tz, &[12, 13])));
    let arrived = appointment::Model { arrived_at: Some(at(7, 55)), ..appointment("ARRIVED") };
    check("appointment-arrived", Resource::Appointment(map::appointment(&arrived, 3, tz, &[12, 13])));
    let fulfilled = appointment::Model { completed_at: Some(at(8, 25)), ..arrived.clone() };
    let fulfilled = appointment::Model { status: "FULFILLED".into(), ..fulfilled };
    check("appointment-fulfilled", Resource::Appointment(map::appointment(&fulfilled, 3, tz, &[12, 13])));
    check("appointment-noshow", Resource::Appointment(map::appointment(&appointment("NOSHOW"), 3, tz, &[12, 13])));
    let slot = crate::db::entity::time_slot::Model {
        id: 12,
        doctor_id: 3,
        start_at: at(8, 0),
        end_at: at(8, 15),
        capacity: 1,
        booked_count: 0,
        version: 0,
        closed_at: None,
        closed_reason: None,
    };
    check("appointment-proposed", Resource::Appointment(map::proposed_appointment(&slot, tz)));
}

#[test]
fn outcomes_and_definitions() {
    let full =
        FhirError::from(crate::error::Refusal::new(crate::error::RefusalCode::SlotFull, "this slot has no seat left"));
    check("outcome-slot-full", Resource::OperationOutcome(full.outcome()));
    let base = "https://api.example.com/fhir";
    check("capability-statement", Resource::CapabilityStatement(capability::statement(base)));
    let uris = capability::OauthUris {
        authorize: "https://idp.example.com/auth".into(),
        token: "https://idp.example.com/token".into(),
    };
    check("capability-statement-smart", Resource::CapabilityStatement(capability::statement_with(base, Some(&uris))));
    let book = capability::operation_definition(base, "Appointment-book").unwrap();
    check("operation-book", Resource::OperationDefinition(book));
    let find = capability::operation_definition(base, "Appointment-find").unwrap();
    check("operation-find", Resource::OperationDefinition(find));
}
