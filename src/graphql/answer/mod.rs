//! The answer pipeline: how one GraphQL operation is answered, over HTTP and over WebSocket
//! alike. [`Pipeline::answer`] is its one entry point; the transports only read requests and
//! write answers.
//!
//! One operation goes through these stages, in this order:
//!
//! 1. **The document** is parsed once per query text and kept ([`documents`]), with the variable
//!    shapes of its requests that passed the full validation ([`shape`]).
//! 2. **A strategy is chosen**, in one place ([`Strategy::choose`]): a `bookAppointment` or an
//!    `availableSlots` of a shape that passed before is answered without the executor
//!    ([`book`], [`list`]: compiled plans that build the executor's answer themselves, proven
//!    byte for byte equal to it by `tests/api/direct.rs`); anything else runs on async-graphql's
//!    executor, on a schema that skips the full validation when the shape passed before.
//! 3. **The executor's answer is completed** where async-graphql departs from the spec
//!    ([`complete`]), and every error gets its `extensions.code`.
//! 4. **Slot reads are kept**: an answer made only of slot lists and searches is kept by its
//!    request body ([`kept`]) until a change of its doctors' slots ([`crate::guard::Generations`], told of
//!    every change as the other caches are), and [`Pipeline::kept`] serves it again before any
//!    of the above.

mod book;
mod complete;
mod documents;
mod kept;
mod list;
mod shape;

use std::{sync::Arc, time::Duration};

use async_graphql::{
    parser::types::{DocumentOperations, OperationType},
    Request, Response, Variables,
};
use axum::body::Bytes;
use chrono::NaiveDate;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

pub use book::BookPlan;
pub use kept::made_of_slot_reads;
pub use list::ListPlan;

use super::{
    build_schema_with, chosen_operation,
    context::{AnswerStamps, RequestContext},
    error::{refused_as_a_whole, with_request_codes},
    loaders::Loaders,
    AppSchema, MoreServices, QueryLimits,
};
use crate::{
    auth::Principal,
    booking::{BookRequest, BookingService},
    guard::Stamp,
};

/// How one instance answers GraphQL operations.
pub struct Pipeline {
    /// The schema, validating every request in full.
    strict: AppSchema,
    /// The same schema in async-graphql's fast validation mode (depth and complexity limits
    /// only), for requests of a shape known to pass the full validation.
    validated: AppSchema,
    /// The booking service the direct plans call, as the resolvers do.
    service: BookingService,
    /// Rendered slot-list answers.
    kept: kept::KeptAnswers,
}

/// An answered operation.
pub struct Answered {
    /// The answer, completed, every error with its `extensions.code`.
    pub response: Response,
    /// True when nothing ran: the request was refused as a whole (it does not parse or
    /// validate, or it is over a limit).
    pub refused: bool,
    /// The reads an answer made only of slot reads (lists and searches) was made of, when it may be kept.
    pub keep: Option<Vec<Stamp>>,
}

/// How an operation is answered.
enum Strategy<'d> {
    /// A booking of a shape that passed the full validation, without the executor.
    Book(&'d BookPlan, BookRequest),
    /// A slot list of a shape that passed, without the executor (unless the service refuses it:
    /// the executor then words the error).
    List(&'d ListPlan, String, NaiveDate),
    /// async-graphql's executor (on the schema that skips the full validation when the shape
    /// passed it before).
    Executor,
}

impl<'d> Strategy<'d> {
    /// The strategy for a request of `document` with these variables, whose shape
    /// `validated` before.
    fn choose(document: Option<&'d documents::Document>, validated: bool, variables: &Variables) -> Self {
        let Some(document) = document.filter(|_| validated) else {
            return Self::Executor;
        };
        if let Some(request) = document.book_plan().and_then(|plan| Some((plan, plan.bind(variables)?))) {
            return Self::Book(request.0, request.1);
        }
        if let Some((plan, (doctor, date))) = document.list_plan().and_then(|plan| Some((plan, plan.bind(variables)?)))
        {
            return Self::List(plan, doctor, date);
        }
        Self::Executor
    }
}

impl Pipeline {
    /// The pipeline of `service` (and the other services the resolvers call) under `limits`,
    /// keeping slot-list answers for `answer_ttl` at most (zero: none).
    pub fn new(limits: QueryLimits, service: BookingService, more: MoreServices, answer_ttl: Duration) -> Self {
        let strict = build_schema_with(limits, Some(service.clone()), more.clone());
        let validated = super::build_prevalidated_schema(limits, Some(service.clone()), more);
        let kept = kept::KeptAnswers::new(answer_ttl, Arc::clone(&service.guard().generations));
        Self { strict, validated, service, kept }
    }

    /// The schema (subscriptions run on it).
    pub fn schema(&self) -> &AppSchema {
        &self.strict
    }

    /// The kept answer to a request with exactly this body, with its operation name.
    pub fn kept(&self, body: &[u8]) -> Option<(Bytes, String)> {
        self.kept.get(body)
    }

    /// Keeps `body`, the rendered answer to the request with body `request`, made of the reads
    /// of `stamps` ([`Answered::keep`]).
    pub fn keep(&self, request: Bytes, stamps: Vec<Stamp>, body: Bytes, operation: &str) {
        self.kept.put(request, stamps, body, operation);
    }

    /// Whether `request` runs a mutation or a subscription (an unparsable one: no, the
    /// executor refuses it).
    pub fn writes(request: &Request) -> bool {
        let Some(document) = documents::document(&request.query) else {
            return false;
        };
        let name = request.operation_name.as_deref();
        document.doc.operations.iter().any(|(op_name, op)| {
            (name.is_none() || op_name.map(|n| n.as_str()) == name) && op.node.ty != OperationType::Query
        })
    }

    /// Answers one operation by `principal`; `keepable` when its answer may be kept (a single
    /// operation whose request body can name it). Runs in a `graphql` span with the operation's
    /// name and the request id.
    ///
    /// Each way of answering is boxed where it is awaited: a future is as large as its largest
    /// state, and one inline executor would make every request's future kilobytes.
    pub async fn answer(&self, request: Request, principal: &Principal, request_id: &str, keepable: bool) -> Answered {
        let operation = request.operation_name.as_deref().unwrap_or("anonymous");
        let document = documents::document(&request.query);
        let name = request.operation_name.as_deref();
        let op = document.as_deref().and_then(|d| chosen_operation(&d.doc, name));
        // A lone named operation sent without `operationName` is still named in its trace.
        let named = name.or_else(|| match &document.as_deref()?.doc.operations {
            DocumentOperations::Multiple(ops) if ops.len() == 1 => ops.keys().next().map(|n| n.as_str()),
            _ => None,
        });
        let span = operation_span(request_id, operation, named, op.map(|op| op.ty));
        let keepable = keepable && op.is_some_and(made_of_slot_reads);
        let shape = op.and_then(|op| shape::shape(name, op, &request.variables));
        let validated = matches!((&document, &shape), (Some(d), Some(s)) if d.passed(s));
        let run = Run { principal, request_id, document: document.as_deref(), validated, span };
        let (mut response, stamps, executed) =
            match Strategy::choose(document.as_deref(), validated, &request.variables) {
                Strategy::Book(plan, booking) => {
                    metrics::counter!("graphql_direct_total").increment(1);
                    (Box::pin(plan.run(&self.service, principal, booking).instrument(run.span)).await, None, false)
                }
                Strategy::List(plan, doctor, date) => {
                    let noted = AnswerStamps::default();
                    let span = run.span.clone();
                    match Box::pin(plan.run(&self.service, &doctor, date, &noted).instrument(span)).await {
                        Some(response) => {
                            metrics::counter!("graphql_direct_total").increment(1);
                            (response, Some(noted), false)
                        }
                        None => {
                            let (response, noted) = Box::pin(self.execute(request, run)).await;
                            (response, Some(noted), true)
                        }
                    }
                }
                Strategy::Executor => {
                    let (response, noted) = Box::pin(self.execute(request, run)).await;
                    (response, Some(noted), true)
                }
            };
        let refused = refused_as_a_whole(&response);
        if let (true, Some(d), Some(op)) = (executed, &document, op) {
            complete::complete(&mut response, &d.doc, op);
        }
        if let (Some(d), Some(shape), false, false) = (&document, shape, validated, refused) {
            d.remember(shape);
        }
        let keep =
            (keepable && !refused && response.errors.is_empty()).then(|| stamps.map(|s| s.take()).unwrap_or_default());
        Answered { response: with_request_codes(response), refused, keep }
    }

    /// Runs a request on the executor, noting the slot reads of its resolvers.
    async fn execute(&self, mut request: Request, run: Run<'_>) -> (Response, AnswerStamps) {
        if let Some(d) = run.document {
            request.set_parsed_query(d.doc.clone());
        }
        let schema = if run.validated { &self.validated } else { &self.strict };
        let context = RequestContext::new(run.principal.clone(), run.request_id.to_owned());
        let stamps = context.stamps.clone();
        let request = request.data(context).data(Loaders::new(self.service.db()));
        (schema.execute(request).instrument(run.span).await, stamps)
    }
}

/// The span of one operation: `graphql` in the logs (request id, operation name); in traces
/// named by the operation's type and name, with OpenTelemetry's GraphQL attributes (and, for a
/// booking, its outcome: [`crate::graphql::record_outcome`]).
fn operation_span(request_id: &str, operation: &str, name: Option<&str>, ty: Option<OperationType>) -> tracing::Span {
    let ty = match ty {
        Some(OperationType::Query) => "query",
        Some(OperationType::Mutation) => "mutation",
        Some(OperationType::Subscription) => "subscription",
        None => "",
    };
    let span_name = match (ty, name) {
        ("", _) => "GraphQL operation".to_owned(),
        (ty, Some(name)) => format!("{ty} {name}"),
        (ty, None) => ty.to_owned(),
    };
    let span = tracing::info_span!("graphql", request_id = %request_id, operation = %operation, otel.name = %span_name);
    // Attributes of the trace only: the log lines carry the operation already.
    if !ty.is_empty() {
        span.set_attribute("graphql.operation.type", ty);
    }
    if let Some(name) = name {
        span.set_attribute("graphql.operation.name", name.to_owned());
    }
    span
}

/// What running one request needs besides the request.
struct Run<'a> {
    principal: &'a Principal,
    request_id: &'a str,
    /// The parsed document, when it parses.
    document: Option<&'a documents::Document>,
    /// Whether its shape passed the full validation before.
    validated: bool,
    span: tracing::Span,
}
