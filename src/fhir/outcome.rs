//! The one place where errors become `OperationOutcome`s, and the HTTP status of each.
//!
//! Every error names its GraphQL code in `issue[0].details.coding[0].code` (system
//! [`CODE_SYSTEM`]); the code decides the HTTP status, so one table says it all:
//!
//! | code | status | issue type |
//! | --- | --- | --- |
//! | `BAD_REQUEST` (unreadable body, bad search parameter) | 400 | `invalid` |
//! | `UNAUTHENTICATED` | 401 | `login` |
//! | `FORBIDDEN` | 403 | `forbidden` |
//! | `NOT_FOUND`, `SLOT_NOT_FOUND`, `APPOINTMENT_NOT_FOUND` | 404 | `not-found` |
//! | `METHOD_NOT_ALLOWED` | 405 | `not-supported` |
//! | `PAYLOAD_TOO_LARGE` (a body over `MAX_BODY_BYTES`) | 413 | `too-long` |
//! | `SLOT_FULL`, `ALREADY_BOOKED`, `OVERLAPPING_APPOINTMENT`, `HOLD_EXPIRED`, `IDEMPOTENCY_KEY_REUSED`, `SLOT_CLOSED`, `APPOINTMENT_NOT_ACTIVE`, `ALREADY_ON_WAITLIST` | 409 | `conflict` |
//! | `UNSUPPORTED_MEDIA_TYPE` | 415 | `not-supported` |
//! | `INVALID_INPUT` | 422 | `invalid` |
//! | `SLOT_IN_PAST`, `NO_SHOW_LIMIT_REACHED` | 422 | `business-rule` |
//! | `RATE_LIMITED` | 429 | `throttled` |
//! | `INTERNAL` | 500 | `exception` |
//! | `OVERLOADED`, `UNAVAILABLE` (no primary database answers; the feed's first build) | 503 | `transient` |

use axum::{
    http::{header, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
};

use super::resources::{CodeableConcept, Coding, OperationOutcome, OperationOutcomeIssue, Resource};
use crate::{
    db::FailureClass,
    error::{Field, Refusal, ServiceError},
};

/// The system of the codes in `issue.details.coding` (our GraphQL codes).
pub const CODE_SYSTEM: &str = "urn:clinic-booking:error-code";
/// The media type of every FHIR answer.
pub const FHIR_JSON: &str = "application/fhir+json";

/// A request the FHIR surface refuses, as an `OperationOutcome` with its HTTP status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FhirError {
    /// The GraphQL code.
    pub code: &'static str,
    /// A sentence for people.
    pub message: String,
    /// The parameter, header or element at fault.
    pub expression: Option<String>,
    /// Seconds before a retry may work (429, 503).
    pub retry_after: Option<u64>,
    /// The methods the path allows (405).
    pub allow: Option<&'static str>,
}

impl FhirError {
    /// An error with this code and message.
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), expression: None, retry_after: None, allow: None }
    }

    /// The same error about one parameter, header or element.
    pub fn at(self, expression: impl Into<String>) -> Self {
        Self { expression: Some(expression.into()), ..self }
    }

    /// `BAD_REQUEST` (400).
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new("BAD_REQUEST", message)
    }

    /// `INVALID_INPUT` (422).
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new("INVALID_INPUT", message)
    }

    /// `NOT_FOUND` (404) for a resource of `kind`.
    pub fn not_found(kind: &str, id: &str) -> Self {
        let code = match kind {
            "Slot" => "SLOT_NOT_FOUND",
            "Appointment" => "APPOINTMENT_NOT_FOUND",
            _ => "NOT_FOUND",
        };
        let shown: String = id.chars().take(64).collect();
        Self::new(code, format!("no {kind} with id {shown:?}"))
    }

    /// The HTTP status and FHIR issue type of the code.
    pub fn status_and_type(code: &str) -> (StatusCode, &'static str) {
        match code {
            "BAD_REQUEST" => (StatusCode::BAD_REQUEST, "invalid"),
            "UNAUTHENTICATED" => (StatusCode::UNAUTHORIZED, "login"),
            "FORBIDDEN" => (StatusCode::FORBIDDEN, "forbidden"),
            "NOT_FOUND" | "SLOT_NOT_FOUND" | "APPOINTMENT_NOT_FOUND" => (StatusCode::NOT_FOUND, "not-found"),
            "METHOD_NOT_ALLOWED" => (StatusCode::METHOD_NOT_ALLOWED, "not-supported"),
            "PAYLOAD_TOO_LARGE" => (StatusCode::PAYLOAD_TOO_LARGE, "too-long"),
            "SLOT_FULL"
            | "ALREADY_BOOKED"
            | "OVERLAPPING_APPOINTMENT"
            | "HOLD_EXPIRED"
            | "IDEMPOTENCY_KEY_REUSED"
            | "SLOT_CLOSED"
            | "APPOINTMENT_NOT_ACTIVE"
            | "ALREADY_ON_WAITLIST" => (StatusCode::CONFLICT, "conflict"),
            "UNSUPPORTED_MEDIA_TYPE" => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "not-supported"),
            "INVALID_INPUT" => (StatusCode::UNPROCESSABLE_ENTITY, "invalid"),
            "SLOT_IN_PAST" | "NO_SHOW_LIMIT_REACHED" => (StatusCode::UNPROCESSABLE_ENTITY, "business-rule"),
            "RATE_LIMITED" => (StatusCode::TOO_MANY_REQUESTS, "throttled"),
            "OVERLOADED" | "UNAVAILABLE" => (StatusCode::SERVICE_UNAVAILABLE, "transient"),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "exception"),
        }
    }

    /// The `OperationOutcome` of this error.
    pub fn outcome(&self) -> OperationOutcome {
        let (_, issue_type) = Self::status_and_type(self.code);
        OperationOutcome {
            issue: vec![OperationOutcomeIssue {
                severity: "error".into(),
                code: issue_type.into(),
                details: Some(CodeableConcept {
                    coding: vec![Coding {
                        system: Some(CODE_SYSTEM.into()),
                        code: Some(self.code.into()),
                        display: None,
                    }],
                    text: Some(self.message.clone()),
                }),
                expression: self.expression.iter().cloned().collect(),
            }],
        }
    }
}

impl From<Refusal> for FhirError {
    fn from(r: Refusal) -> Self {
        Self::new(r.code.as_str(), r.message)
    }
}

impl From<ServiceError> for FhirError {
    fn from(err: ServiceError) -> Self {
        match err {
            ServiceError::Unauthenticated => Self::new("UNAUTHENTICATED", err.to_string()),
            ServiceError::Forbidden(msg) => Self::new("FORBIDDEN", msg),
            ServiceError::InvalidInput { message, field } => Self::invalid(message).at(expression(field.field, None)),
            ServiceError::RateLimited { retry_after_secs } => {
                Self { retry_after: Some(retry_after_secs), ..Self::new("RATE_LIMITED", err.to_string()) }
            }
            ServiceError::Overloaded => Self { retry_after: Some(1), ..Self::new("OVERLOADED", err.to_string()) },
            // As GraphQL answers it (`graphql::error`): the database too busy to take the write
            // (a SQLite file locked past the wait) is retryable, not a fault.
            ServiceError::Store(inner) => match inner.class() {
                FailureClass::Unavailable => {
                    tracing::warn!(error = %inner, "database unavailable: answered UNAVAILABLE");
                    Self {
                        retry_after: Some(crate::db::failure::RETRY_AFTER_SECS),
                        ..Self::new(
                            "UNAVAILABLE",
                            "the database is unavailable; retry shortly with the same idempotency key",
                        )
                    }
                }
                FailureClass::Overloaded => {
                    tracing::warn!(error = %inner, "database busy: answered OVERLOADED");
                    Self { retry_after: Some(1), ..Self::new("OVERLOADED", ServiceError::Overloaded.to_string()) }
                }
                FailureClass::Constraint | FailureClass::Internal => {
                    tracing::error!(error = %inner, "internal error");
                    Self::new("INTERNAL", "internal error")
                }
            },
        }
    }
}

/// How a FHIR answer names the value at fault: the `$hold`/`$book` parameter or header that
/// carries it, else its name in the request ([`Field::name`]). `subject` is what the
/// operation's own id stands for where that is not plain `id` (`appointment` for `$book` of a
/// hold).
pub fn expression(field: Field, subject: Option<&'static str>) -> &'static str {
    match field {
        Field::SlotId => "slot",
        Field::PatientId => "patient",
        Field::IdempotencyKey => "Idempotency-Key",
        Field::Id => subject.unwrap_or("id"),
        // `$find`'s parameters.
        Field::From => "start",
        Field::To => "end",
        Field::DoctorIds => "practitioner",
        Field::First => "_count",
        Field::After => "_cursor",
        other => other.name(),
    }
}

impl IntoResponse for FhirError {
    fn into_response(self) -> Response {
        let (status, _) = Self::status_and_type(self.code);
        let body = serde_json::to_vec(&Resource::OperationOutcome(self.outcome())).unwrap_or_default();
        let mut resp = (status, [(header::CONTENT_TYPE, FHIR_JSON)], body).into_response();
        let headers = resp.headers_mut();
        if let Some(secs) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if let Some(allow) = self.allow {
            headers.insert(header::ALLOW, HeaderValue::from_static(allow));
        }
        if status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::RefusalCode;

    #[test]
    fn refusals_keep_their_code_and_get_the_contracts_status() {
        for (code, status) in [
            (RefusalCode::SlotFull, 409),
            (RefusalCode::AlreadyBooked, 409),
            (RefusalCode::OverlappingAppointment, 409),
            (RefusalCode::IdempotencyKeyReused, 409),
            (RefusalCode::SlotNotFound, 404),
            (RefusalCode::AppointmentNotFound, 404),
            (RefusalCode::InvalidInput, 422),
            (RefusalCode::SlotInPast, 422),
        ] {
            let e = FhirError::from(Refusal::new(code, "no"));
            assert_eq!(e.code, code.as_str());
            assert_eq!(FhirError::status_and_type(e.code).0.as_u16(), status, "{code:?}");
            let outcome = e.outcome();
            let details = outcome.issue[0].details.as_ref().unwrap();
            assert_eq!(details.coding[0].code.as_deref(), Some(code.as_str()));
        }
        for (code, status) in [("HOLD_EXPIRED", 409), ("SLOT_CLOSED", 409), ("APPOINTMENT_NOT_ACTIVE", 409)] {
            assert_eq!(FhirError::status_and_type(code).0.as_u16(), status, "{code}");
        }
    }

    #[test]
    fn service_errors() {
        assert_eq!(FhirError::from(ServiceError::Unauthenticated).code, "UNAUTHENTICATED");
        let limited = FhirError::from(ServiceError::RateLimited { retry_after_secs: 7 });
        assert_eq!((limited.code, limited.retry_after), ("RATE_LIMITED", Some(7)));
        let resp = limited.into_response();
        assert_eq!(resp.status().as_u16(), 429);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "7");
        let invalid = FhirError::from(ServiceError::invalid(crate::error::Field::Id.as_param(), "bad id"));
        assert_eq!((invalid.code, invalid.expression.as_deref()), ("INVALID_INPUT", Some("id")));
        let internal =
            FhirError::from(ServiceError::Store(crate::db::StoreError::Inconsistent("secret detail".into())));
        assert_eq!(internal.message, "internal error");
        let busy = FhirError::from(ServiceError::Store(crate::db::StoreError::Busy(std::time::Duration::from_secs(2))));
        assert_eq!((busy.code, busy.retry_after), ("OVERLOADED", Some(1)));
        assert_eq!(busy.into_response().status().as_u16(), 503);
        let gone = FhirError::from(ServiceError::Store(crate::db::StoreError::Unavailable("cut".into())));
        assert_eq!(gone.code, "UNAVAILABLE");
        let resp = gone.into_response();
        assert_eq!(resp.status().as_u16(), 503);
        assert!(resp.headers().contains_key(header::RETRY_AFTER));
    }
}
