//! The GraphQL API: schema, resolvers (thin: they call [`crate::booking`]), types, loaders.

pub mod answer;
pub mod context;
mod cursor;
pub mod desk;
pub mod error;
pub mod find;
pub mod hours;
pub mod identity;
pub mod loaders;
pub mod messages;
mod mutation;
mod query;
pub mod scalars;
pub mod settings;
mod subscription;
pub mod types;
pub mod waitlist;
pub mod webhooks;
pub mod weekday;

use async_graphql::{
    parser::types::{ExecutableDocument, OperationDefinition},
    MergedObject, Schema, ValidationMode,
};

pub use answer::{Answered, Asked, Pipeline, Rendered};
pub use context::{AnswerStamps, RequestContext};
pub use loaders::Loaders;
pub use messages::{MessagesMutation, MessagesQuery};
pub use mutation::BookingMutation;
pub use query::BookingQuery;
pub use settings::Settings;
pub use subscription::{SubscriptionExecutor, SubscriptionRoot};
pub use webhooks::{WebhookMutation, WebhookQuery};

use crate::{booking::BookingService, notify::ContactService, webhooks::WebhookService};

// Each part of the domain contributes its own object, in its own file.
/// Read operations.
#[derive(MergedObject, Default)]
#[graphql(name = "Query")]
pub struct QueryRoot(
    BookingQuery,
    find::FindQuery,
    waitlist::WaitlistQuery,
    MessagesQuery,
    WebhookQuery,
    hours::HoursQuery,
    desk::DeskQuery,
    identity::IdentityQuery,
);

/// Write operations.
#[derive(MergedObject, Default)]
#[graphql(name = "Mutation")]
pub struct MutationRoot(
    BookingMutation,
    waitlist::WaitlistMutation,
    MessagesMutation,
    WebhookMutation,
    hours::HoursMutation,
    desk::DeskMutation,
    identity::IdentityMutation,
);

/// The served schema.
pub type AppSchema = Schema<QueryRoot, MutationRoot, SubscriptionRoot>;

/// Limits on what one request may ask.
#[derive(Clone, Copy, Debug)]
pub struct QueryLimits {
    /// Deepest selection.
    pub depth: usize,
    /// Highest complexity.
    pub complexity: usize,
}

/// The domain services the resolvers call, beyond booking.
#[derive(Clone, Default)]
pub struct MoreServices {
    /// Partner webhook endpoints (their resolvers answer `INTERNAL` without it).
    pub webhooks: Option<WebhookService>,
}

/// Builds the schema. With `service` absent it is only good for printing the SDL.
pub fn build_schema(limits: QueryLimits, service: Option<BookingService>) -> AppSchema {
    build(limits, service, MoreServices::default(), ValidationMode::Strict)
}

/// [`build_schema`] with the other services.
pub fn build_schema_with(limits: QueryLimits, service: Option<BookingService>, more: MoreServices) -> AppSchema {
    build(limits, service, more, ValidationMode::Strict)
}

/// The same schema in async-graphql's fast validation mode (depth and complexity limits only),
/// for requests of a shape known to pass the full validation (see `answer::shape`).
fn build_prevalidated_schema(limits: QueryLimits, service: Option<BookingService>, more: MoreServices) -> AppSchema {
    build(limits, service, more, ValidationMode::Fast)
}

fn build(limits: QueryLimits, service: Option<BookingService>, more: MoreServices, mode: ValidationMode) -> AppSchema {
    // No per-field tracing extension: the request's span (operation name, request id) is made
    // in `answer`, and a span around every resolved field cost about a tenth of the CPU
    // of a slot list (40 slots × 3 fields).
    let mut builder = Schema::build(QueryRoot::default(), MutationRoot::default(), SubscriptionRoot)
        .limit_depth(limits.depth)
        .limit_complexity(limits.complexity)
        .validation_mode(mode);
    if let Some(service) = service {
        builder = builder.data(ContactService::new(service.db().clone())).data(service);
    }
    if let Some(webhooks) = more.webhooks {
        builder = builder.data(webhooks);
    }
    builder.finish()
}

/// The operation of `doc` a request runs: the one named `name`, or the only one when no name
/// is given. `None` when there is no such operation (the executor reports it).
pub fn chosen_operation<'a>(doc: &'a ExecutableDocument, name: Option<&str>) -> Option<&'a OperationDefinition> {
    let mut operations = doc.operations.iter();
    let (_, op) = match name {
        Some(name) => operations.find(|(n, _)| n.map(|n| n.as_str()) == Some(name))?,
        None => match (operations.next(), operations.next()) {
            (Some(only), None) => only,
            _ => return None,
        },
    };
    Some(&op.node)
}

/// Notes a booking's outcome on its operation's span (the trace's `booking.outcome`: the
/// appointment's status, `BOOKED` or `HELD`, or the refusal's code), from the resolver or the
/// direct plan that awaited it, where that span is the current one.
pub(crate) fn record_outcome(outcome: &Result<crate::booking::Booked, crate::error::Refusal>) {
    let code = match outcome {
        Ok(booked) => booked.appointment.status.clone(),
        Err(refusal) => refusal.code.as_str().to_owned(),
    };
    tracing_opentelemetry::OpenTelemetrySpanExt::set_attribute(&tracing::Span::current(), "booking.outcome", code);
}

/// The schema's SDL, as committed in `schema.graphql`.
pub fn sdl() -> String {
    build_schema(QueryLimits { depth: usize::MAX, complexity: usize::MAX }, None).sdl()
}
