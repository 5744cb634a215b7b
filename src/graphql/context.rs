//! What each request carries into the resolvers.

use async_graphql::{Context, Result};

use super::error::to_graphql;
use crate::{
    auth::{Caller, Principal},
    booking::ServiceError,
};

/// Per-request data: who is calling and the id that ties log lines to the answer.
#[derive(Clone, Debug)]
pub struct RequestContext {
    /// The verified principal.
    pub principal: Principal,
    /// The request id (also in the `x-request-id` response header).
    pub request_id: String,
}

/// The request's principal.
pub fn principal<'a>(ctx: &'a Context<'_>) -> Result<&'a Principal> {
    Ok(&ctx.data::<RequestContext>()?.principal)
}

/// The authenticated caller, or `UNAUTHENTICATED`.
pub fn caller<'a>(ctx: &'a Context<'_>) -> Result<&'a Caller> {
    principal(ctx)?.caller().ok_or_else(|| to_graphql(ServiceError::Unauthenticated))
}
