//! The few FHIR R4 (4.0.1) resources and data types the service reads and writes, by hand: no
//! maintained Rust crate covers R4, and these carry only the elements we fill.
//!
//! Elements follow the R4 names and cardinalities; absent optional elements are left out of the
//! JSON (FHIR forbids `null` and empty arrays). `resourceType` comes from [`Resource`]'s tag, so
//! a resource is always written through it.

use serde::{Deserialize, Serialize};

/// Any resource we write (and `Parameters`, which we also read), tagged by `resourceType`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "resourceType")]
#[allow(clippy::large_enum_variant)]
pub enum Resource {
    /// A booked, held or cancelled appointment.
    Appointment(Appointment),
    /// A search result.
    Bundle(Bundle),
    /// `GET /fhir/metadata`.
    CapabilityStatement(CapabilityStatement),
    /// The clinic.
    Location(Location),
    /// Definitions of `$hold`, `$book`, `$bulk-publish`.
    OperationDefinition(OperationDefinition),
    /// An error.
    OperationOutcome(OperationOutcome),
    /// Operation input.
    Parameters(Parameters),
    /// A doctor as a person.
    Practitioner(Practitioner),
    /// A doctor in the clinic, with its specialty.
    PractitionerRole(PractitionerRole),
    /// A doctor's calendar.
    Schedule(Schedule),
    /// A bookable interval.
    Slot(Slot),
}

/// `Reference`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reference {
    /// `Type/id` (or an absolute URL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// Text for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display: Option<String>,
}

impl Reference {
    /// A reference to `Type/id`.
    pub fn to(kind: &str, id: impl std::fmt::Display) -> Self {
        Self { reference: Some(format!("{kind}/{id}")), display: None }
    }

    /// The same reference with a display text.
    pub fn with_display(self, display: impl Into<String>) -> Self {
        Self { display: Some(display.into()), ..self }
    }
}

/// `Coding`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Coding {
    /// The code system's URI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// The code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Text for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display: Option<String>,
}

/// `CodeableConcept`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodeableConcept {
    /// Codes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub coding: Vec<Coding>,
    /// Text for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

impl CodeableConcept {
    /// A concept that is only text.
    pub fn text(text: impl Into<String>) -> Self {
        Self { coding: Vec::new(), text: Some(text.into()) }
    }
}

/// `Extension` with the value types we use.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Extension {
    /// What it means.
    pub url: String,
    /// An integer value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_integer: Option<i64>,
    /// A URL value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_url: Option<String>,
    /// A date-time value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_date_time: Option<String>,
    /// A URI value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_uri: Option<String>,
    /// Nested extensions (a complex extension, such as SMART's `oauth-uris`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extension: Vec<Extension>,
}

/// `HumanName`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HumanName {
    /// The full name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// `ContactPoint`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContactPoint {
    /// `phone`, `email`, `url`, ….
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// The number or address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// `work`, `home`, ….
    #[serde(default, rename = "use", skip_serializing_if = "Option::is_none")]
    pub use_: Option<String>,
}

/// `Address`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Address {
    /// Street lines.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub line: Vec<String>,
    /// City.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub city: Option<String>,
    /// State or region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Postal code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub postal_code: Option<String>,
}

/// `Slot`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slot {
    /// Its id (the GraphQL id).
    pub id: String,
    /// `slot-capacity` and `booking-deep-link`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extension: Vec<Extension>,
    /// `Schedule/{doctor id}`.
    pub schedule: Reference,
    /// `free`, `busy` or `busy-unavailable`.
    pub status: String,
    /// Start (instant, with the doctor's offset).
    pub start: String,
    /// End.
    pub end: String,
}

/// `Schedule`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Schedule {
    /// Its id (the doctor's id).
    pub id: String,
    /// Whether it is in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<bool>,
    /// What it offers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_type: Vec<CodeableConcept>,
    /// The `PractitionerRole`, then the `Location`.
    pub actor: Vec<Reference>,
    /// The days whose slots exist: from today through the end of the doctor's
    /// `scheduledThrough` (only for doctors with working hours).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planning_horizon: Option<Period>,
}

/// `Period`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Period {
    /// Start, inclusive.
    pub start: String,
    /// End, inclusive.
    pub end: String,
}

/// `Practitioner`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Practitioner {
    /// Its id (the doctor's id).
    pub id: String,
    /// Whether it is in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<bool>,
    /// Its name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub name: Vec<HumanName>,
}

/// `PractitionerRole`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PractitionerRole {
    /// Its id (the doctor's id).
    pub id: String,
    /// Whether it is in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<bool>,
    /// `Practitioner/{id}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub practitioner: Option<Reference>,
    /// The doctor's specialty, as text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub specialty: Vec<CodeableConcept>,
    /// The clinic.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub location: Vec<Reference>,
}

/// `Location`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Location {
    /// Its id.
    pub id: String,
    /// `active`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Its name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its phone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub telecom: Vec<ContactPoint>,
    /// Its address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<Address>,
}

/// `Appointment`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Appointment {
    /// Its id (the GraphQL id); empty, and left out, for a proposed one (`$find`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// Cancellation date (the R5 element, as its R4 cross-version extension).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extension: Vec<Extension>,
    /// `pending`, `booked` or `cancelled` (`proposed` from `$find`).
    pub status: String,
    /// Who cancelled (or that the hold ran out), for a cancelled one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelation_reason: Option<CodeableConcept>,
    /// Start (instant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
    /// End (instant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<String>,
    /// Its length in minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minutes_duration: Option<i64>,
    /// Every slot it takes a seat in, by start.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slot: Vec<Reference>,
    /// When it was made (dateTime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    /// The patient and the practitioner role.
    pub participant: Vec<AppointmentParticipant>,
}

/// `Appointment.participant`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppointmentParticipant {
    /// `Patient/{id}` or `PractitionerRole/{id}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<Reference>,
    /// `required`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<String>,
    /// `accepted`, `tentative`, … (required in R4).
    pub status: String,
}

/// `Bundle` (searchset).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Bundle {
    /// `searchset`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Matches in all pages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// `self` and `next`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub link: Vec<BundleLink>,
    /// This page's matches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entry: Vec<BundleEntry>,
}

/// `Bundle.link`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BundleLink {
    /// `self` or `next`.
    pub relation: String,
    /// The absolute URL.
    pub url: String,
}

/// `Bundle.entry`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BundleEntry {
    /// The resource's absolute URL.
    pub full_url: String,
    /// The resource.
    pub resource: Box<Resource>,
    /// `match`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<BundleEntrySearch>,
}

/// `Bundle.entry.search`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BundleEntrySearch {
    /// `match`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

/// `OperationOutcome`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationOutcome {
    /// What went wrong (at least one).
    pub issue: Vec<OperationOutcomeIssue>,
}

/// `OperationOutcome.issue`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationOutcomeIssue {
    /// `error`, `fatal`, `warning`, `information`.
    pub severity: String,
    /// The FHIR issue type (`conflict`, `not-found`, `invalid`, …).
    pub code: String,
    /// The GraphQL code in `coding[0].code`, and the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<CodeableConcept>,
    /// Where in the request (a parameter or header name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expression: Vec<String>,
}

/// `Parameters` (operation input).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parameters {
    /// The parameters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parameter: Vec<ParametersParameter>,
}

/// `Parameters.parameter`, with the one value type the operations take.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParametersParameter {
    /// Its name.
    pub name: String,
    /// A reference value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_reference: Option<Reference>,
}

/// `CapabilityStatement`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapabilityStatement {
    /// `clinic-booking`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Computer name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Title for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// `active`.
    pub status: String,
    /// Not a test.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experimental: Option<bool>,
    /// When it was last changed.
    pub date: String,
    /// What it describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `instance`.
    pub kind: String,
    /// The software.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub software: Option<CapabilitySoftware>,
    /// This installation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub implementation: Option<CapabilityImplementation>,
    /// `4.0.1`.
    pub fhir_version: String,
    /// `json` and `application/fhir+json`.
    pub format: Vec<String>,
    /// The server.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rest: Vec<CapabilityRest>,
}

/// `CapabilityStatement.software`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapabilitySoftware {
    /// Name.
    pub name: String,
    /// Version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// `CapabilityStatement.implementation`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapabilityImplementation {
    /// What it is.
    pub description: String,
    /// Its FHIR base URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// `CapabilityStatement.rest`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapabilityRest {
    /// `server`.
    pub mode: String,
    /// Notes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documentation: Option<String>,
    /// How callers authenticate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security: Option<CapabilitySecurity>,
    /// The resources.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource: Vec<CapabilityResource>,
    /// System operations (`$bulk-publish`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub operation: Vec<CapabilityOperation>,
}

/// `CapabilityStatement.rest.security`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapabilitySecurity {
    /// SMART's `oauth-uris` (the provider's authorize and token URLs), when providers are trusted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extension: Vec<Extension>,
    /// Whether CORS headers are sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cors: Option<bool>,
    /// `SMART-on-FHIR`, when providers are trusted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service: Vec<CodeableConcept>,
    /// Bearer tokens, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// `CapabilityStatement.rest.resource`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapabilityResource {
    /// The resource type.
    #[serde(rename = "type")]
    pub type_: String,
    /// Notes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documentation: Option<String>,
    /// `read`, `search-type`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interaction: Vec<CapabilityInteraction>,
    /// Search parameters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub search_param: Vec<CapabilitySearchParam>,
    /// Type operations (`$hold`, `$book`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub operation: Vec<CapabilityOperation>,
}

/// `CapabilityStatement.rest.resource.interaction`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapabilityInteraction {
    /// `read`, `search-type`.
    pub code: String,
}

/// `CapabilityStatement.rest.resource.searchParam`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapabilitySearchParam {
    /// Its name.
    pub name: String,
    /// Its definition's canonical URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition: Option<String>,
    /// `reference`, `date`, `token`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Notes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documentation: Option<String>,
}

/// `CapabilityStatement.rest.resource.operation` and `rest.operation`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapabilityOperation {
    /// The name, without `$`.
    pub name: String,
    /// The `OperationDefinition`'s canonical URL.
    pub definition: String,
    /// Notes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documentation: Option<String>,
}

/// `OperationDefinition`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OperationDefinition {
    /// Its id.
    pub id: String,
    /// Its canonical URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Computer name.
    pub name: String,
    /// `active`.
    pub status: String,
    /// `operation`.
    pub kind: String,
    /// What it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether it changes anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affects_state: Option<bool>,
    /// The name after `$`.
    pub code: String,
    /// The resource types it is invoked on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource: Vec<String>,
    /// Invoked at the base URL.
    pub system: bool,
    /// Invoked on a type.
    #[serde(rename = "type")]
    pub type_: bool,
    /// Invoked on an instance.
    pub instance: bool,
    /// Its parameters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parameter: Vec<OperationDefinitionParameter>,
}

/// `OperationDefinition.parameter`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OperationDefinitionParameter {
    /// Its name.
    pub name: String,
    /// `in` or `out`.
    #[serde(rename = "use")]
    pub use_: String,
    /// Least occurrences.
    pub min: u32,
    /// Most occurrences (`1` or `*`).
    pub max: String,
    /// What it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documentation: Option<String>,
    /// Its type.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// For references: the allowed target profiles.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target_profile: Vec<String>,
}
