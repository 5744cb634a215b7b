//! `GET /fhir/metadata` and the `OperationDefinition`s it points at.

use super::resources::{
    CapabilityImplementation, CapabilityInteraction, CapabilityOperation, CapabilityResource, CapabilityRest,
    CapabilitySearchParam, CapabilitySecurity, CapabilitySoftware, CapabilityStatement, CodeableConcept, Coding,
    Extension, OperationDefinition, OperationDefinitionParameter,
};

/// When the statement last changed (update it with the surface).
const STATEMENT_DATE: &str = "2026-12-05";

fn definition_url(base: &str, id: &str) -> String {
    format!("{base}/OperationDefinition/{id}")
}

fn interactions(codes: &[&str]) -> Vec<CapabilityInteraction> {
    codes.iter().map(|c| CapabilityInteraction { code: (*c).into() }).collect()
}

fn read_only(kind: &str, documentation: &str) -> CapabilityResource {
    CapabilityResource {
        type_: kind.into(),
        documentation: Some(documentation.into()),
        interaction: interactions(&["read"]),
        ..CapabilityResource::default()
    }
}

/// Where a SMART app signs in: the first trusted provider's endpoints.
#[derive(Clone, Debug)]
pub struct OauthUris {
    /// `authorization_endpoint`.
    pub authorize: String,
    /// `token_endpoint`.
    pub token: String,
}

/// The SMART App Launch extension naming the authorize and token URLs.
const OAUTH_URIS: &str = "http://fhir-registry.smarthealthit.org/StructureDefinition/oauth-uris";

/// `rest.security` naming SMART-on-FHIR and the provider's endpoints.
fn smart_security(security: &mut CapabilitySecurity, uris: &OauthUris) {
    let uri =
        |name: &str, value: &str| Extension { url: name.into(), value_uri: Some(value.into()), ..Extension::default() };
    security.extension = vec![Extension {
        url: OAUTH_URIS.into(),
        extension: vec![uri("authorize", &uris.authorize), uri("token", &uris.token)],
        ..Extension::default()
    }];
    security.service = vec![CodeableConcept {
        coding: vec![Coding {
            system: Some("http://terminology.hl7.org/CodeSystem/restful-security-service".into()),
            code: Some("SMART-on-FHIR".into()),
            ..Coding::default()
        }],
        text: Some("OAuth2 using SMART-on-FHIR profile (see /fhir/.well-known/smart-configuration)".into()),
    }];
}

/// [`statement`], naming SMART-on-FHIR and `uris` in `rest.security` when providers are trusted.
pub fn statement_with(base: &str, uris: Option<&OauthUris>) -> CapabilityStatement {
    let mut statement = statement(base);
    if let (Some(uris), Some(rest)) = (uris, statement.rest.first_mut()) {
        if let Some(security) = rest.security.as_mut() {
            smart_security(security, uris);
        }
    }
    statement
}

/// The statement, with absolute URLs under `base` (the `/fhir` URL).
pub fn statement(base: &str) -> CapabilityStatement {
    let search_param = |name: &str, kind: &str, doc: &str| CapabilitySearchParam {
        name: name.into(),
        definition: Some(format!("http://hl7.org/fhir/SearchParameter/Slot-{name}")),
        type_: kind.into(),
        documentation: Some(doc.into()),
    };
    CapabilityStatement {
        id: Some("clinic-booking".into()),
        name: Some("ClinicBooking".into()),
        title: Some("clinic-booking FHIR R4 surface".into()),
        status: "active".into(),
        experimental: Some(false),
        date: STATEMENT_DATE.into(),
        description: Some(
            "Doctors, schedules, slots and appointments of clinic-booking, the SMART Scheduling Links feed, \
             and holding and booking seats."
                .into(),
        ),
        kind: "instance".into(),
        software: Some(CapabilitySoftware {
            name: "clinic-booking".into(),
            version: Some(env!("CARGO_PKG_VERSION").into()),
        }),
        implementation: Some(CapabilityImplementation {
            description: "clinic-booking".into(),
            url: Some(base.to_owned()),
        }),
        fhir_version: "4.0.1".into(),
        format: vec!["application/fhir+json".into(), "json".into()],
        rest: vec![CapabilityRest {
            mode: "server".into(),
            documentation: Some(
                "Reads are public except Appointment. The feed is at $bulk-publish (SMART Scheduling Links).".into(),
            ),
            security: Some(CapabilitySecurity {
                extension: vec![],
                service: vec![],
                cors: None,
                description: Some(
                    "Appointment reads, $hold and $book take `Authorization: Bearer <JWT>`, the tokens of the GraphQL \
                     API (roles patient, partner, admin; doctors may read appointments in their slots)."
                        .into(),
                ),
            }),
            resource: vec![
                CapabilityResource {
                    type_: "Appointment".into(),
                    documentation: Some(
                        "pending = held, booked, cancelled (also an expired hold). Visible as in GraphQL.".into(),
                    ),
                    interaction: interactions(&["read"]),
                    operation: vec![
                        CapabilityOperation {
                            name: "hold".into(),
                            definition: definition_url(base, "Appointment-hold"),
                            documentation: Some("Holds a seat (Idempotency-Key header required).".into()),
                        },
                        CapabilityOperation {
                            name: "book".into(),
                            definition: definition_url(base, "Appointment-book"),
                            documentation: Some(
                                "Books a seat (Idempotency-Key header required), or confirms a hold.".into(),
                            ),
                        },
                        CapabilityOperation {
                            name: "find".into(),
                            definition: definition_url(base, "Appointment-find"),
                            documentation: Some(
                                "IHE ITI-115 Find Potential Appointments: the earliest bookable slots across doctors \
                                 as proposed Appointments (GET or POST; public)."
                                    .into(),
                            ),
                        },
                    ],
                    ..CapabilityResource::default()
                },
                read_only("Location", "The clinic."),
                read_only("OperationDefinition", "Definitions of $hold, $book, $find and $bulk-publish."),
                read_only("Practitioner", "A doctor (the GraphQL doctor id)."),
                read_only("PractitionerRole", "A doctor in the clinic, with its specialty (the doctor id)."),
                read_only("Schedule", "A doctor's calendar (the doctor id)."),
                CapabilityResource {
                    type_: "Slot".into(),
                    documentation: Some(
                        "free while a seat is left, busy when full, busy-unavailable when closed; the seats left in \
                         the slot-capacity extension."
                            .into(),
                    ),
                    interaction: interactions(&["read", "search-type"]),
                    search_param: vec![
                        search_param("schedule", "reference", "Required: Schedule/{id}."),
                        search_param("start", "date", "Prefixes eq, ge, gt, le, lt; repeatable."),
                        search_param("status", "token", "free, busy, busy-unavailable; comma-separated."),
                    ],
                    ..CapabilityResource::default()
                },
            ],
            operation: vec![CapabilityOperation {
                name: "bulk-publish".into(),
                definition: definition_url(base, "bulk-publish"),
                documentation: Some("The SMART Scheduling Links manifest; _since accepted.".into()),
            }],
        }],
    }
}

/// One of our `OperationDefinition`s, by id.
pub fn operation_definition(base: &str, id: &str) -> Option<OperationDefinition> {
    let reference = |name: &str, min: u32, target: &str, doc: &str| OperationDefinitionParameter {
        name: name.into(),
        use_: "in".into(),
        min,
        max: "1".into(),
        documentation: Some(doc.into()),
        type_: Some("Reference".into()),
        target_profile: vec![format!("http://hl7.org/fhir/StructureDefinition/{target}")],
    };
    let returns = |kind: &str, doc: &str| OperationDefinitionParameter {
        name: "return".into(),
        use_: "out".into(),
        min: 1,
        max: "1".into(),
        documentation: Some(doc.into()),
        type_: Some(kind.into()),
        target_profile: Vec::new(),
    };
    let patient = reference("patient", 0, "Patient", "The patient; required for partners and admins.");
    let seat = |code: &str, name: &str, doc: &str, params: Vec<OperationDefinitionParameter>| OperationDefinition {
        id: id.into(),
        url: Some(definition_url(base, id)),
        name: name.into(),
        status: "active".into(),
        kind: "operation".into(),
        description: Some(doc.into()),
        affects_state: Some(true),
        code: code.into(),
        resource: vec!["Appointment".into()],
        system: false,
        type_: true,
        instance: false,
        parameter: params,
    };
    match id {
        "Appointment-hold" => Some(seat(
            "hold",
            "AppointmentHold",
            "Holds a seat in a slot for HOLD_TTL_SECS; the answer is the pending Appointment (201, 200 for a replay).",
            vec![
                reference("slot", 1, "Slot", "The slot."),
                patient,
                returns("Appointment", "The held (pending) appointment."),
            ],
        )),
        "Appointment-book" => Some(seat(
            "book",
            "AppointmentBook",
            "Books a seat in a slot, or confirms a held appointment; the answer is the booked Appointment.",
            vec![
                reference("slot", 0, "Slot", "The slot (or give appointment)."),
                patient,
                reference("appointment", 0, "Appointment", "A held appointment to confirm (instead of slot)."),
                returns("Appointment", "The booked appointment."),
            ],
        )),
        "Appointment-find" => {
            let input = |name: &str, min: u32, max: &str, kind: &str, doc: &str| OperationDefinitionParameter {
                name: name.into(),
                use_: "in".into(),
                min,
                max: max.into(),
                documentation: Some(doc.into()),
                type_: Some(kind.into()),
                target_profile: Vec::new(),
            };
            Some(OperationDefinition {
                id: id.into(),
                url: Some(definition_url(base, id)),
                name: "AppointmentFind".into(),
                status: "active".into(),
                kind: "operation".into(),
                description: Some(
                    "IHE ITI-115 Find Potential Appointments: bookable slots starting in [start, end) as proposed \
                     Appointments, by start, then practitioner, then slot, with a next link while more remain."
                        .into(),
                ),
                affects_state: Some(false),
                code: "find".into(),
                resource: vec!["Appointment".into()],
                system: false,
                type_: true,
                instance: false,
                parameter: vec![
                    input("start", 1, "1", "dateTime", "Slots starting at or after this (a date: its UTC day)."),
                    input("end", 0, "1", "dateTime", "…and before this, at most 31 days later (default 7 days)."),
                    input("specialty", 0, "1", "string", "The practitioner's specialty, case-insensitively."),
                    OperationDefinitionParameter {
                        target_profile: vec!["http://hl7.org/fhir/StructureDefinition/Practitioner".into()],
                        ..input("practitioner", 0, "*", "Reference", "Any of these practitioners (at most 100).")
                    },
                    input("_count", 0, "1", "integer", "Appointments per page, 1-100 (default 20)."),
                    returns("Bundle", "A searchset of proposed Appointments."),
                ],
            })
        }
        "bulk-publish" => Some(OperationDefinition {
            id: id.into(),
            url: Some(definition_url(base, id)),
            name: "BulkPublish".into(),
            status: "active".into(),
            kind: "operation".into(),
            description: Some(
                "The SMART Scheduling Links manifest of the clinic's Location, PractitionerRoles, Schedules and Slots."
                    .into(),
            ),
            affects_state: Some(false),
            code: "bulk-publish".into(),
            resource: Vec::new(),
            system: true,
            type_: false,
            instance: false,
            parameter: vec![OperationDefinitionParameter {
                name: "_since".into(),
                use_: "in".into(),
                min: 0,
                max: "1".into(),
                documentation: Some("Only files with changes since this instant (a superset may be listed).".into()),
                type_: Some("instant".into()),
                target_profile: Vec::new(),
            }],
        }),
        _ => None,
    }
}
