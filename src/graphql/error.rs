//! The one place where errors become GraphQL errors.
//!
//! Policy: expected refusals of bookings and cancels are data (`userErrors`, see
//! [`crate::error::Refusal`]); everything else that ends a request is a top-level error
//! with a stable `extensions.code`. Internal failures are logged here, with the request id
//! of the surrounding span, and reach the client as `INTERNAL` with no detail; a database
//! too busy to take the statement (see `StoreError::is_busy`) is `OVERLOADED`, retryable.

use async_graphql::{Error, ErrorExtensionValues, ErrorExtensions, Response};

use crate::error::ServiceError;

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
            e.set("field", field.clone());
        }),
        ServiceError::RateLimited { retry_after_secs } => Error::new(err.to_string()).extend_with(|_, e| {
            e.set("code", code::RATE_LIMITED);
            e.set("retryAfterSeconds", retry_after_secs);
        }),
        ServiceError::Overloaded => overloaded(),
        ServiceError::Store(inner) if inner.is_busy() => {
            tracing::warn!(error = %inner, "database busy: answered OVERLOADED");
            overloaded()
        }
        ServiceError::Store(inner) => {
            tracing::error!(error = %inner, "internal error");
            internal()
        }
    }
}

/// The retryable answer of a saturated service.
fn overloaded() -> Error {
    Error::new(ServiceError::Overloaded.to_string()).extend_with(|_, e| {
        e.set("code", code::OVERLOADED);
        e.set("retryAfterSeconds", 1);
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
