//! The `Subscription` root (live availability; the work is in `crate::events`), and the
//! executor that serves subscriptions over WebSocket.
//!
//! # Shared rendering
//!
//! A booking reaches every widget watching the doctor, often thousands of them with the very
//! same document and variables. Running that document through async-graphql once per
//! subscriber and event (a stream of streams, a future per field, a fresh response tree) was
//! over a third of the server's CPU in the fan-out benchmark. [`SubscriptionExecutor`]
//! recognises the common shape, a subscription whose only root field is `slotAvailability`,
//! and renders each change once per distinct document and variables (still through
//! async-graphql, on [`RenderRoot`], which mirrors the field's signature); every subscriber
//! then gets a copy of that response. Any other subscription takes async-graphql's own path
//! through [`SubscriptionRoot`].

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
};

use async_graphql::{
    futures_util::stream::BoxStream,
    parser::types::{DocumentOperations, ExecutableDocument, OperationType, Selection},
    Context, Data, EmptyMutation, EmptySubscription, Executor, Object, Request, Response, Result, Schema, Subscription,
    Value, Variables, ID,
};
use futures_util::{Stream, StreamExt};

use super::{
    chosen_operation,
    error::{to_graphql, with_request_codes, IntoGraphql},
    scalars::Date,
    types::SlotAvailabilityEvent,
    Asked, Pipeline, QueryLimits, RequestContext,
};
use crate::{
    auth::Principal,
    booking::read::parse_arg_id,
    error::{Field, ServiceError},
    events::{Live, SlotChange},
};

/// Live operations.
pub struct SubscriptionRoot;

#[Subscription(name = "Subscription")]
impl SubscriptionRoot {
    /// The current state of every matching slot, then each committed change of them.
    // With `date`: that day's slots in the doctor's zone; without: the slots starting in the
    // next 14 days (`events::UPCOMING_WINDOW`). Open to anonymous callers. The `Live` handle
    // comes with the WebSocket connection's data (see `http::ws`).
    async fn slot_availability(
        &self,
        ctx: &Context<'_>,
        doctor_id: ID,
        date: Option<Date>,
    ) -> Result<impl Stream<Item = SlotAvailabilityEvent>> {
        let changes = open(ctx, &doctor_id, date).await?;
        Ok(changes.map(|c| SlotAvailabilityEvent::from(&c)))
    }
}

/// Opens the live changes of a doctor's slots (`INVALID_INPUT` for a malformed or unknown id).
async fn open(
    ctx: &Context<'_>,
    raw_doctor_id: &str,
    date: Option<Date>,
) -> Result<impl Stream<Item = SlotChange> + Send + 'static> {
    let doctor_id = parse_arg_id(Field::DoctorId, raw_doctor_id).gql()?;
    let opened = ctx.data::<Live>()?.slot_availability(doctor_id, date.map(|d| d.0)).await;
    match opened.map_err(ServiceError::from).gql()? {
        Some(changes) => Ok(changes),
        None => Err(to_graphql(ServiceError::invalid(Field::DoctorId.as_param(), "no doctor with this id"))),
    }
}

/// Serves GraphQL over WebSocket: queries and mutations through the answer pipeline, as over
/// HTTP; `slotAvailability` subscriptions with shared rendering (see the module doc); other
/// subscriptions on the schema. Cheap to clone.
#[derive(Clone)]
pub struct SubscriptionExecutor {
    pipeline: Arc<Pipeline>,
    shared: Arc<Shared>,
}

struct Shared {
    render: Schema<RenderRoot, EmptyMutation, EmptySubscription>,
    live: Live,
    /// Distinct documents (query, operation name, variables) → a number naming them in `cache`.
    documents: Mutex<Interned>,
    /// Rendered data by document and change (only answers without errors are kept).
    cache: Mutex<HashMap<(u64, SlotChange), Value>>,
}

#[derive(Default)]
struct Interned {
    ids: HashMap<String, u64>,
    next: u64,
}

/// Rendered responses kept; beyond this the cache starts afresh (a miss costs one rendering).
const CACHE_ENTRIES: usize = 4096;
/// Distinct documents remembered; beyond this the map starts afresh (numbers are never reused,
/// so forgetting only costs cache misses).
const DOCUMENTS: usize = 1024;

impl SubscriptionExecutor {
    /// An executor answering through `pipeline`, reading live availability from `live`;
    /// `limits` are the schema's, applied as well to the subscriptions it renders itself.
    pub fn new(pipeline: Arc<Pipeline>, live: Live, limits: QueryLimits) -> Self {
        let render = Schema::build(RenderRoot, EmptyMutation, EmptySubscription)
            .limit_depth(limits.depth)
            .limit_complexity(limits.complexity)
            .data(live.clone())
            .finish();
        let shared =
            Shared { render, live, documents: Mutex::new(Interned::default()), cache: Mutex::new(HashMap::new()) };
        Self { pipeline, shared: Arc::new(shared) }
    }

    /// Live availability (for the connection's data, and to notice the instance stopping).
    pub fn live(&self) -> &Live {
        &self.shared.live
    }

    /// A query or mutation (the protocol sends those through `subscribe` too), answered by the
    /// pipeline for the connection's principal.
    async fn answer(&self, request: Request, context: Option<&RequestContext>) -> Response {
        let anonymous = RequestContext::new(Principal::Anonymous, String::new());
        let context = context.unwrap_or(&anonymous);
        let asked = Asked { request, principal: &context.principal, request_id: &context.request_id, key: None };
        self.pipeline.answer(asked).await.response()
    }
}

impl Executor for SubscriptionExecutor {
    async fn execute(&self, request: Request) -> Response {
        let context = context_of(&request.data).cloned();
        self.answer(request, context.as_ref()).await
    }

    fn execute_stream(&self, mut request: Request, session_data: Option<Arc<Data>>) -> BoxStream<'static, Response> {
        if let Some(document) = render_document(&mut request) {
            let template = Template {
                key: self.shared.intern(&request),
                query: request.query,
                variables: request.variables,
                document,
            };
            return rendered(Arc::clone(&self.shared), template).map(with_request_codes).boxed();
        }
        if is_subscription(&mut request) {
            let responses =
                self.pipeline.schema().execute_stream_with_session_data(request, session_data.unwrap_or_default());
            return responses.map(with_request_codes).boxed();
        }
        let this = self.clone();
        futures_util::stream::once(async move {
            let context = session_data.as_deref().and_then(context_of).cloned();
            this.answer(request, context.as_ref()).await
        })
        .boxed()
    }
}

/// The connection's (or request's) context, with the principal its `connection_init` proved.
fn context_of(data: &Data) -> Option<&RequestContext> {
    data.get(&std::any::TypeId::of::<RequestContext>()).and_then(|d| d.downcast_ref::<RequestContext>())
}

/// Whether `request` runs a subscription (a document that does not parse, or names no
/// operation of its own, is answered by the pipeline, which words the error).
fn is_subscription(request: &mut Request) -> bool {
    let name = request.operation_name.clone();
    request
        .parsed_query()
        .ok()
        .and_then(|doc| chosen_operation(doc, name.as_deref()))
        .is_some_and(|op| op.ty == OperationType::Subscription)
}

/// The document to render with when `request` is a subscription to `slotAvailability` alone
/// (the same document, its operation switched to a query of [`RenderRoot`]); `None` otherwise.
fn render_document(request: &mut Request) -> Option<ExecutableDocument> {
    let operation_name = request.operation_name.clone();
    let parsed = request.parsed_query().ok()?;
    let operation = match &parsed.operations {
        DocumentOperations::Single(op) if operation_name.is_none() => op,
        DocumentOperations::Single(_) => return None,
        DocumentOperations::Multiple(ops) => ops.get(operation_name.as_deref()?)?,
    };
    let [only] = operation.node.selection_set.node.items.as_slice() else { return None };
    let Selection::Field(field) = &only.node else { return None };
    let simple = operation.node.ty == OperationType::Subscription
        && operation.node.directives.is_empty()
        && field.node.name.node == "slotAvailability"
        && field.node.directives.is_empty();
    if !simple {
        return None;
    }
    let mut operation = operation.clone();
    operation.node.ty = OperationType::Query;
    // Only the chosen operation: the others may be subscriptions, which the render schema refuses.
    Some(ExecutableDocument { operations: DocumentOperations::Single(operation), fragments: parsed.fragments.clone() })
}

/// One subscription's request, to render with.
struct Template {
    key: u64,
    query: String,
    variables: Variables,
    document: ExecutableDocument,
}

impl Template {
    fn request(&self, input: RenderInput) -> Request {
        // The document holds the chosen operation alone: no operation name needed.
        let mut request = Request::new(self.query.clone()).variables(self.variables.clone()).data(input);
        request.set_parsed_query(self.document.clone());
        request
    }
}

/// What [`RenderRoot`] is asked for.
enum RenderInput {
    /// Open the subscription with the validated arguments and leave its stream here.
    Open(Arc<Mutex<Option<BoxStream<'static, SlotChange>>>>),
    /// Render this change.
    Change(SlotChange),
}

/// Where a rendered subscription is.
enum Phase {
    Opening(Arc<Shared>, Template),
    Open(Arc<Shared>, Template, BoxStream<'static, SlotChange>),
    Done,
}

/// A subscription rendered through the cache: opened by rendering its document once (which
/// validates it and its arguments, and answers errors as async-graphql would), then each change.
fn rendered(shared: Arc<Shared>, template: Template) -> impl Stream<Item = Response> + Send + 'static {
    futures_util::stream::unfold(Phase::Opening(shared, template), |phase| async move {
        match phase {
            Phase::Opening(shared, template) => {
                let cell = Arc::new(Mutex::new(None));
                let opened = shared.render.execute(template.request(RenderInput::Open(Arc::clone(&cell)))).await;
                let changes = cell.lock().unwrap_or_else(PoisonError::into_inner).take();
                match changes {
                    Some(mut changes) if opened.errors.is_empty() => {
                        let first = changes.next().await?;
                        let response = shared.render_change(&template, first).await;
                        Some((response, Phase::Open(shared, template, changes)))
                    }
                    _ => Some((opened, Phase::Done)),
                }
            }
            Phase::Open(shared, template, mut changes) => {
                let change = changes.next().await?;
                let response = shared.render_change(&template, change).await;
                Some((response, Phase::Open(shared, template, changes)))
            }
            Phase::Done => None,
        }
    })
}

impl Shared {
    /// The response to `change` for `template`'s document: rendered once, then copied.
    async fn render_change(&self, template: &Template, change: SlotChange) -> Response {
        let key = (template.key, change);
        if let Some(hit) = self.cache.lock().unwrap_or_else(PoisonError::into_inner).get(&key) {
            return Response::new(hit.clone());
        }
        let response = self.render.execute(template.request(RenderInput::Change(key.1.clone()))).await;
        if response.errors.is_empty() && response.extensions.is_empty() {
            let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
            if cache.len() >= CACHE_ENTRIES {
                cache.clear();
            }
            cache.insert(key, response.data.clone());
        }
        response
    }

    fn intern(&self, request: &Request) -> u64 {
        let text = format!(
            "{}\u{0}{}\u{0}{}",
            request.query,
            request.operation_name.as_deref().unwrap_or_default(),
            serde_json::to_string(&request.variables).unwrap_or_default()
        );
        let mut docs = self.documents.lock().unwrap_or_else(PoisonError::into_inner);
        if docs.ids.len() >= DOCUMENTS {
            docs.ids.clear();
        }
        if let Some(id) = docs.ids.get(&text) {
            return *id;
        }
        let id = docs.next;
        docs.next += 1;
        docs.ids.insert(text, id);
        id
    }
}

/// Mirrors `Subscription.slotAvailability` as a query field, so async-graphql validates a
/// subscription's document (and its arguments) and renders its selection set on a change.
struct RenderRoot;

#[Object(name = "Subscription")]
impl RenderRoot {
    /// The current state of every matching slot, then each committed change of them.
    async fn slot_availability(
        &self,
        ctx: &Context<'_>,
        doctor_id: ID,
        date: Option<Date>,
    ) -> Result<SlotAvailabilityEvent> {
        match ctx.data::<RenderInput>()? {
            RenderInput::Change(c) => Ok(SlotAvailabilityEvent::from(c)),
            RenderInput::Open(cell) => {
                let changes = open(ctx, &doctor_id, date).await?;
                *cell.lock().unwrap_or_else(PoisonError::into_inner) = Some(changes.boxed());
                // Discarded: the opening only validates and opens.
                Ok(SlotAvailabilityEvent::from(&SlotChange::default()))
            }
        }
    }
}
