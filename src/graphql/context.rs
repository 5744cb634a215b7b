//! What each request carries into the resolvers.

use std::sync::{Arc, Mutex, PoisonError};

use async_graphql::{Context, Result};

use super::error::to_graphql;
use crate::{
    auth::{Caller, Principal},
    error::ServiceError,
    guard::Stamp,
};

/// Per-request data: who is calling and the id that ties log lines to the answer.
#[derive(Clone, Debug)]
pub struct RequestContext {
    /// The verified principal.
    pub principal: Principal,
    /// The request id (also in the `x-request-id` response header).
    pub request_id: String,
    /// The slot reads (lists and searches) the answer is made of, for keeping it (`answer::kept`).
    pub stamps: AnswerStamps,
}

impl RequestContext {
    /// The context of a request by `principal`.
    pub fn new(principal: Principal, request_id: String) -> Self {
        Self { principal, request_id, stamps: AnswerStamps::default() }
    }
}

/// The stamps of the slot reads (lists and searches) of one request (shared with the HTTP
/// layer, which reads them once the answer is made).
#[derive(Clone, Debug, Default)]
pub struct AnswerStamps(Arc<Mutex<Vec<Stamp>>>);

impl AnswerStamps {
    /// Notes that the answer holds a slot list read under `stamp`.
    pub fn record(&self, stamp: Stamp) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).push(stamp);
    }

    /// The stamps noted so far.
    pub fn take(&self) -> Vec<Stamp> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Notes the stamp of a slot list in the request's context (absent outside HTTP requests).
pub fn record_stamp(ctx: &Context<'_>, stamp: Option<Stamp>) {
    if let (Some(stamp), Some(rc)) = (stamp, ctx.data_opt::<RequestContext>()) {
        rc.stamps.record(stamp);
    }
}

/// The request's principal.
pub fn principal<'a>(ctx: &'a Context<'_>) -> Result<&'a Principal> {
    Ok(&ctx.data::<RequestContext>()?.principal)
}

/// The authenticated caller, or `UNAUTHENTICATED`.
pub fn caller<'a>(ctx: &'a Context<'_>) -> Result<&'a Caller> {
    principal(ctx)?.caller().ok_or_else(|| to_graphql(ServiceError::Unauthenticated))
}
