//! The answer pipeline: how one GraphQL operation is answered, over HTTP and over WebSocket
//! alike. [`Pipeline::answer`] is its one entry point, called the same way by both edges; the
//! transports only read requests and write answers.
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
//! 4. **Slot reads are kept**: an answer made only of slot lists and searches (and nested fields
//!    whose dependencies are known) is kept, rendered ([`render`]), by its request body
//!    ([`kept`]) until a change of what it read ([`crate::guard::Generations`], told of every
//!    change as the other caches are); the same body is served it again before any of the above.

mod book;
mod complete;
mod documents;
mod kept;
mod list;
mod render;
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
pub use render::Rendered;

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

/// One operation an edge asks the pipeline to answer.
pub struct Asked<'a> {
    /// The operation.
    pub request: Request,
    /// Who asks.
    pub principal: &'a Principal,
    /// The id that ties log lines to the answer.
    pub request_id: &'a str,
    /// The request body that names this operation alone (a single POST), when its answer may
    /// be kept: a kept answer to the same body is served, and a keepable one kept under it.
    /// `None` (WebSocket, GET, batches): answered afresh, never kept.
    pub key: Option<Bytes>,
}

/// An answered operation.
// It lives for one request and moves once or twice: boxing the answer would cost an allocation
// per request for nothing.
#[allow(clippy::large_enum_variant)]
pub enum Answered {
    /// Answered now.
    Fresh {
        /// The answer, completed, every error with its `extensions.code`.
        response: Response,
        /// True when nothing ran: the request was refused as a whole (it does not parse or
        /// validate, or it is over a limit).
        refused: bool,
        /// The answer as text, when the pipeline wrote it to keep it.
        rendered: Option<Rendered>,
    },
    /// A kept answer, served as the text it was written as.
    Kept {
        /// The text.
        rendered: Rendered,
        /// The operation's name (a metrics label).
        operation: String,
    },
}

impl Answered {
    /// The answer as the JSON text that goes out (`request_id` goes into `INTERNAL` errors).
    pub fn rendered(self, request_id: &str) -> Rendered {
        match self {
            Self::Fresh { rendered: Some(rendered), .. } | Self::Kept { rendered, .. } => rendered,
            Self::Fresh { response, refused, rendered: None } => render::render(response, refused, request_id),
        }
    }

    /// The answer as a value (for transports that frame it themselves, such as WebSocket). A
    /// kept answer is read back from its text; edges that want values pass no key and get none.
    pub fn response(self) -> Response {
        match self {
            Self::Fresh { response, .. } => response,
            // A kept answer has no errors: its text is `{"data": …}`.
            Self::Kept { rendered, .. } => serde_json::from_slice::<serde_json::Value>(&rendered.body)
                .ok()
                .and_then(|mut v| async_graphql::Value::from_json(v["data"].take()).ok())
                .map(Response::new)
                .unwrap_or_default(),
        }
    }
}

/// How an operation is answered.
enum Strategy<'d> {
    /// A booking of a shape that passed the full validation, without the executor.
    Book(&'d BookPlan, BookRequest),
    /// A slot list of a shape that passed, without the executor.
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

    /// Answers one operation: the kept answer to its body when there is one still current,
    /// else the operation run (see the module's stages), kept when it is made of slot reads.
    /// Runs in a `graphql` span with the operation's name and the request id.
    pub async fn answer(&self, asked: Asked<'_>) -> Answered {
        let Asked { request, principal, request_id, key } = asked;
        if let Some((body, operation)) = key.as_deref().and_then(|k| self.kept.get(k)) {
            let rendered = Rendered { body, outcome: "ok", request_error: false, retry_after: None };
            return Answered::Kept { rendered, operation };
        }
        let operation = request.operation_name.clone().unwrap_or_else(|| "anonymous".into());
        let (response, refused, stamps) = self.run(request, principal, request_id, key.is_some()).await;
        match (key, stamps) {
            (Some(key), Some(stamps)) => {
                let rendered = render::render(response, refused, request_id);
                self.kept.put(key, stamps, rendered.body.clone(), &operation);
                Answered::Fresh { response: Response::default(), refused, rendered: Some(rendered) }
            }
            _ => Answered::Fresh { response, refused, rendered: None },
        }
    }

    /// Runs one operation by `principal`; with `keepable`, also the stamps of the reads it was
    /// made of when its answer may be kept.
    ///
    /// Each way of answering is boxed where it is awaited: a future is as large as its largest
    /// state, and one inline executor would make every request's future kilobytes.
    async fn run(
        &self,
        request: Request,
        principal: &Principal,
        request_id: &str,
        keepable: bool,
    ) -> (Response, bool, Option<Vec<Stamp>>) {
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
        let keepable = keepable && matches!((&document, op), (Some(d), Some(op)) if made_of_slot_reads(&d.doc, op));
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
                    metrics::counter!("graphql_direct_total").increment(1);
                    let response = Box::pin(plan.run(&self.service, &doctor, date, &noted).instrument(run.span)).await;
                    (response, Some(noted), false)
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
        (with_request_codes(response), refused, keep)
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
