//! The input of `$hold` and `$book`: a `Parameters` resource naming the slot (and the patient)
//! or, for `$book`, the held appointment to confirm.
//!
//! Body that is not JSON, or not a `Parameters` resource: `400` (`BAD_REQUEST`). A
//! `Parameters` whose content we cannot use (an unknown or repeated parameter, a reference to
//! the wrong type, a slot and an appointment together, neither): `422` (`INVALID_INPUT`), with
//! the parameter's name in `expression`. Ids are passed on as written: the booking service
//! parses them and refuses a malformed one exactly as GraphQL does.

use serde_json::Value;

use super::outcome::FhirError;

/// What an operation is asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SeatTarget {
    /// Take a seat in this slot, for this patient (a patient may leave it out).
    Slot {
        /// The slot's id.
        slot_id: String,
        /// The patient's id.
        patient_id: Option<String>,
    },
    /// Confirm this held appointment (`$book` only).
    Appointment {
        /// The appointment's id.
        appointment_id: String,
    },
}

/// Reads the body of `$hold` (`confirm_allowed` false) or `$book`.
pub fn parse_seat_request(body: &[u8], confirm_allowed: bool) -> Result<SeatTarget, FhirError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| FhirError::bad_request(format!("the body is not JSON: {e}")))?;
    let Value::Object(object) = value else {
        return Err(FhirError::bad_request("the body must be a Parameters resource"));
    };
    if object.get("resourceType").and_then(Value::as_str) != Some("Parameters") {
        return Err(FhirError::bad_request("the body must be a Parameters resource (resourceType \"Parameters\")"));
    }
    let parameters = match object.get("parameter") {
        None => &[][..],
        Some(Value::Array(items)) => items.as_slice(),
        Some(_) => return Err(FhirError::bad_request("Parameters.parameter must be an array")),
    };
    let (mut slot, mut patient, mut appointment) = (None, None, None);
    for p in parameters {
        let name = p.get("name").and_then(Value::as_str).unwrap_or("");
        let (kind, seen) = match name {
            "slot" => ("Slot", &mut slot),
            "patient" => ("Patient", &mut patient),
            "appointment" if confirm_allowed => ("Appointment", &mut appointment),
            "" => return Err(FhirError::invalid("every parameter needs a name").at("parameter")),
            other => {
                let shown: String = other.chars().take(40).collect();
                let known = if confirm_allowed { "slot, patient or appointment" } else { "slot or patient" };
                return Err(FhirError::invalid(format!("unknown parameter {shown:?} (expected {known})")).at(shown));
            }
        };
        if seen.is_some() {
            return Err(FhirError::invalid(format!("the parameter {name} is given twice")).at(name));
        }
        let reference =
            p.get("valueReference").and_then(|r| r.get("reference")).and_then(Value::as_str).ok_or_else(|| {
                FhirError::invalid(format!("{name} must be a valueReference with a reference ({kind}/{{id}})")).at(name)
            })?;
        *seen = Some(parse_reference(reference, kind).map_err(|m| FhirError::invalid(m).at(name))?);
    }
    match (slot, appointment) {
        (Some(slot_id), None) => Ok(SeatTarget::Slot { slot_id, patient_id: patient }),
        (None, Some(appointment_id)) if patient.is_none() => Ok(SeatTarget::Appointment { appointment_id }),
        (None, Some(_)) => Err(FhirError::invalid("patient goes with slot, not with appointment").at("patient")),
        (Some(_), Some(_)) => Err(FhirError::invalid("give either slot or appointment, not both").at("appointment")),
        (None, None) => Err(FhirError::invalid("the parameter slot (Slot/{id}) is required").at("slot")),
    }
}

/// The id of a reference to `kind`: `Kind/{id}`, or an absolute URL ending so. The id is
/// returned as written (the service parses it).
pub fn parse_reference(reference: &str, kind: &str) -> Result<String, String> {
    let shown: String = reference.chars().take(80).collect();
    let wrong = || format!("expected a reference {kind}/{{id}}, got {shown:?}");
    let path = if reference.contains("://") { reference.split(['?', '#']).next().unwrap_or("") } else { reference };
    let mut segments = path.rsplit('/');
    let id = segments.next().ok_or_else(wrong)?;
    if segments.next() != Some(kind) || id.is_empty() || (!reference.contains("://") && path.matches('/').count() != 1)
    {
        return Err(wrong());
    }
    Ok(id.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(v: Value) -> Vec<u8> {
        serde_json::to_vec(&v).unwrap()
    }

    fn params(items: Value) -> Vec<u8> {
        body(json!({ "resourceType": "Parameters", "parameter": items }))
    }

    #[test]
    fn the_slot_form() {
        let got = parse_seat_request(
            &params(json!([
                { "name": "slot", "valueReference": { "reference": "Slot/12" } },
                { "name": "patient", "valueReference": { "reference": "Patient/77" } }
            ])),
            false,
        );
        assert_eq!(got, Ok(SeatTarget::Slot { slot_id: "12".into(), patient_id: Some("77".into()) }));
        let own = parse_seat_request(
            &params(json!([{ "name": "slot", "valueReference": { "reference": "https://x.example/fhir/Slot/12" } }])),
            true,
        );
        assert_eq!(own, Ok(SeatTarget::Slot { slot_id: "12".into(), patient_id: None }));
    }

    #[test]
    fn the_appointment_form_is_for_book_only() {
        let confirm = params(json!([{ "name": "appointment", "valueReference": { "reference": "Appointment/5" } }]));
        assert_eq!(parse_seat_request(&confirm, true), Ok(SeatTarget::Appointment { appointment_id: "5".into() }));
        let held = parse_seat_request(&confirm, false).unwrap_err();
        assert_eq!((held.code, held.expression.as_deref()), ("INVALID_INPUT", Some("appointment")));
    }

    #[test]
    fn refusals_name_the_parameter() {
        let cases = [
            (json!([]), "slot"),
            (json!([{ "name": "slot", "valueReference": { "reference": "Patient/12" } }]), "slot"),
            (json!([{ "name": "slot", "valueString": "Slot/12" }]), "slot"),
            (
                json!([
                    { "name": "slot", "valueReference": { "reference": "Slot/1" } },
                    { "name": "slot", "valueReference": { "reference": "Slot/2" } }
                ]),
                "slot",
            ),
            (json!([{ "name": "seat", "valueReference": { "reference": "Slot/1" } }]), "seat"),
            (
                json!([
                    { "name": "slot", "valueReference": { "reference": "Slot/1" } },
                    { "name": "appointment", "valueReference": { "reference": "Appointment/1" } }
                ]),
                "appointment",
            ),
            (json!([{ "name": "slot", "valueReference": { "reference": "Slot/1/_history/2" } }]), "slot"),
        ];
        for (items, at) in cases {
            let e = parse_seat_request(&params(items.clone()), true).unwrap_err();
            assert_eq!((e.code, e.expression.as_deref()), ("INVALID_INPUT", Some(at)), "{items}");
        }
    }

    #[test]
    fn unreadable_bodies_are_bad_requests() {
        for raw in [
            &b"not json"[..],
            b"[]",
            br#"{"resourceType":"Patient"}"#,
            br#"{"resourceType":"Parameters","parameter":{}}"#,
        ] {
            assert_eq!(
                parse_seat_request(raw, true).unwrap_err().code,
                "BAD_REQUEST",
                "{:?}",
                std::str::from_utf8(raw)
            );
        }
    }

    #[test]
    fn ids_pass_as_written() {
        assert_eq!(parse_reference("Slot/abc", "Slot"), Ok("abc".into()));
        assert!(parse_reference("Slot", "Slot").is_err());
        assert!(parse_reference("/Slot/1", "Slot").is_err());
    }
}
