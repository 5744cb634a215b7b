//! The one place where errors become GraphQL errors.
//!
//! Policy: expected refusals of bookings and cancels are data (`userErrors`, see
//! [`crate::error::Refusal`]); everything else that ends a request is a top-level error
//! with a stable `extensions.code`. Internal failures are logged here, with the request id
//! of the surrounding span, and reach the client as `INTERNAL` with no detail. A database
//! failure is answered by its class (`db::failure`): `UNAVAILABLE` while no primary answers,
//! `OVERLOADED` when it is too busy to take the statement, both retryable.
//!
//! The value an error is about ([`Fault`]) becomes its path in the operation here, and only
//! here ([`field_path`]): `userErrors[].field` and `extensions.field` alike.

use async_graphql::{Error, ErrorExtensionValues, ErrorExtensions, Response};

use crate::{
    db::FailureClass,
    error::{Fault, Place, ServiceError},
};

/// The stable codes of top-level errors.
pub mod code {
    /// No or invalid token.
    pub const UNAUTHENTICATED: &str = "UNAUTHENTICATED";
    /// The role may not do this.
    pub const FORBIDDEN: &str = "FORBIDDEN";
    /// Too many attempts.
    pub const RATE_LIMITED: &str = "RATE_LIMITED";
    /// Malformed request: parse or validation failure, limits exceeded.
    pub const BAD_REQUEST: &str = "BAD_REQUEST";
    /// A bad value for an operation without `userErrors`.
    pub const INVALID_INPUT: &str = "INVALID_INPUT";
    /// The service is saturated; retry shortly.
    pub const OVERLOADED: &str = "OVERLOADED";
    /// No primary database answers (a failover); retry with the same idempotency key.
    pub const UNAVAILABLE: &str = "UNAVAILABLE";
    /// Something failed on our side.
    pub const INTERNAL: &str = "INTERNAL";
}

/// Converts a service error into the GraphQL error the client sees.
pub fn to_graphql(err: ServiceError) -> Error {
    match err {
        ServiceError::Unauthenticated => {
            Error::new(err.to_string()).extend_with(|_, e| e.set("code", code::UNAUTHENTICATED))
        }
        ServiceError::Forbidden(msg) => Error::new(msg).extend_with(|_, e| e.set("code", code::FORBIDDEN)),
        ServiceError::InvalidInput { message, field } => Error::new(message).extend_with(|_, e| {
            e.set("code", code::INVALID_INPUT);
            e.set("field", field_path(field).map(str::to_owned).collect::<Vec<_>>());
        }),
        ServiceError::RateLimited { retry_after_secs } => Error::new(err.to_string()).extend_with(|_, e| {
            e.set("code", code::RATE_LIMITED);
            e.set("retryAfterSeconds", retry_after_secs);
        }),
        ServiceError::Overloaded => overloaded(),
        ServiceError::Store(inner) => match inner.class() {
            FailureClass::Unavailable => {
                tracing::warn!(error = %inner, "database unavailable: answered UNAVAILABLE");
                unavailable()
            }
            FailureClass::Overloaded => {
                tracing::warn!(error = %inner, "database busy: answered OVERLOADED");
                overloaded()
            }
            FailureClass::Constraint | FailureClass::Internal => {
                tracing::error!(error = %inner, "internal error");
                internal()
            }
        },
    }
}

/// The path of the value `fault` names in the operation: `["input", name]` for a field of
/// the operation's request (every operation that takes one takes it as its `input` argument),
/// `[name]` for a parameter (an argument of its own).
pub fn field_path(fault: Fault) -> impl Iterator<Item = &'static str> {
    let input = match fault.place {
        Place::Request => Some("input"),
        Place::Parameter => None,
    };
    input.into_iter().chain(std::iter::once(fault.field.name()))
}

/// The retryable answer of a saturated service.
fn overloaded() -> Error {
    Error::new(ServiceError::Overloaded.to_string()).extend_with(|_, e| {
        e.set("code", code::OVERLOADED);
        e.set("retryAfterSeconds", 1);
    })
}

/// The retryable answer while no primary database answers.
fn unavailable() -> Error {
    Error::new("the database is unavailable; retry shortly with the same idempotency key").extend_with(|_, e| {
        e.set("code", code::UNAVAILABLE);
        e.set("retryAfterSeconds", crate::db::failure::RETRY_AFTER_SECS);
    })
}

/// The masked error for any internal failure (the detail must already be logged).
pub fn internal() -> Error {
    Error::new("internal error").extend_with(|_, e| e.set("code", code::INTERNAL))
}

/// Gives `BAD_REQUEST` to the errors that carry no code: async-graphql's own verdicts on the
/// request (parse, validation, variable coercion, limits). Ours always carry one.
pub fn with_request_codes(mut response: Response) -> Response {
    for error in response.errors.iter_mut().filter(|e| e.extensions.is_none()) {
        let mut extensions = ErrorExtensionValues::default();
        extensions.set("code", code::BAD_REQUEST);
        error.extensions = Some(extensions);
    }
    response
}

/// Whether `response` refused the request as a whole: no `data`, and only async-graphql's own
/// errors (parse, validation, variable coercion, limits), which carry no code until
/// [`with_request_codes`] gives them one. Nothing ran.
pub fn refused_as_a_whole(response: &Response) -> bool {
    response.data == async_graphql::Value::Null
        && !response.errors.is_empty()
        && response.errors.iter().all(|e| e.extensions.is_none())
}

/// `Result<T, ServiceError>` → `async_graphql::Result<T>`.
pub trait IntoGraphql<T> {
    /// Maps the error through [`to_graphql`].
    fn gql(self) -> async_graphql::Result<T>;
}

impl<T> IntoGraphql<T> for Result<T, ServiceError> {
    fn gql(self) -> async_graphql::Result<T> {
        self.map_err(to_graphql)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Field;

    fn path(fault: Fault) -> Vec<&'static str> {
        field_path(fault).collect()
    }

    /// Every value the services name today, at the path the API has always given it.
    #[test]
    fn each_value_keeps_its_path() {
        let request = [
            (Field::PatientId, "patientId"),
            (Field::SlotId, "slotId"),
            (Field::IdempotencyKey, "idempotencyKey"),
            (Field::DurationMinutes, "durationMinutes"),
            (Field::AppointmentId, "appointmentId"),
            (Field::NewSlotId, "newSlotId"),
            (Field::DoctorId, "doctorId"),
            (Field::Date, "date"),
            (Field::To, "to"),
            (Field::Reason, "reason"),
            (Field::Name, "name"),
            (Field::Specialty, "specialty"),
            (Field::Timezone, "timezone"),
            (Field::StartTime, "startTime"),
            (Field::EndTime, "endTime"),
            (Field::SlotMinutes, "slotMinutes"),
            (Field::Capacity, "capacity"),
            (Field::Email, "email"),
            (Field::Phone, "phone"),
            (Field::Locale, "locale"),
            (Field::Url, "url"),
        ];
        for (field, name) in request {
            assert_eq!(path(field.in_request()), ["input", name], "{field:?}");
        }
        let parameters = [
            (Field::Id, "id"),
            (Field::PatientId, "patientId"),
            (Field::DoctorId, "doctorId"),
            (Field::DurationMinutes, "durationMinutes"),
            (Field::First, "first"),
            (Field::After, "after"),
            (Field::DeliveryId, "deliveryId"),
            (Field::EndpointId, "endpointId"),
        ];
        for (field, name) in parameters {
            assert_eq!(path(field.as_param()), [name], "{field:?}");
        }
    }

    #[test]
    fn invalid_input_names_the_path_in_its_extensions() {
        let err = to_graphql(ServiceError::invalid(Field::Name.in_request(), "bad"));
        let extensions = err.extensions.expect("extensions");
        assert_eq!(
            extensions.get("field"),
            Some(&async_graphql::Value::List(vec![
                async_graphql::Value::String("input".into()),
                async_graphql::Value::String("name".into())
            ]))
        );
    }
}
