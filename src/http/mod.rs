//! HTTP: the router, GraphQL over HTTP and WebSocket, health, readiness, metrics and the
//! embeddable availability widget.

mod connection;
mod cors;
mod graphiql;
mod graphql;
mod health;
mod linger;
mod metrics;
pub mod settings;
mod widget;
mod ws;

use std::sync::Arc;

use axum::{
    extract::State,
    http::{header, StatusCode},
    response::{IntoResponse, Response},
};
use axum::{
    routing::{get, post},
    Router,
};
use tower_http::{catch_panic::CatchPanicLayer, trace::TraceLayer};

use crate::{auth::Authenticator, booking::BookingService, graphql::Pipeline};

pub use self::{cors::AllowedOrigins, metrics::install_recorder, settings::Settings};

/// Everything a handler needs, shared by all requests of an instance.
pub struct AppState {
    /// Answers GraphQL operations (over HTTP here, over WebSocket through `subscriptions`).
    pub pipeline: Arc<Pipeline>,
    /// The booking service.
    pub service: BookingService,
    /// Verifies bearer tokens.
    pub tokens: Arc<Authenticator>,
    /// Request limits.
    pub limits: HttpLimits,
    /// Redis, when configured (readiness reports it).
    pub redis: Option<redis::Client>,
    /// Runs GraphQL over WebSocket (subscriptions to live availability rendered once per event).
    pub subscriptions: crate::graphql::SubscriptionExecutor,
    /// Origins whose pages may call the API (CORS) and open WebSockets.
    pub origins: AllowedOrigins,
    /// The FHIR surface (`/fhir`), taken out when the router is built.
    pub fhir: Option<crate::fhir::FhirState>,
    /// The instance's traces: each request's server span is a root of its trace.
    pub tracing: crate::telemetry::Tracing,
}

/// Limits of the HTTP layer.
#[derive(Clone, Copy, Debug)]
pub struct HttpLimits {
    /// Largest body in bytes.
    pub max_body_bytes: usize,
    /// Most operations in a batch.
    pub max_batch: usize,
    /// Longest wait for `connection_init` on a WebSocket before closing it with 4408.
    pub ws_init_timeout: std::time::Duration,
    /// Most operations running at once on one WebSocket.
    pub ws_max_subscriptions: usize,
}

/// The state as handlers receive it: axum clones the state for every request, and one
/// reference count costs less than one per field.
type Shared = State<Arc<AppState>>;

/// Serves the routes on `listener` until `shutdown` completes; connections the server ends
/// close lingering (see `linger`), so a client still sending a refused body reads the answer.
///
/// The layers every request passes wrap the router from outside: a layer given to the router
/// itself is applied to each route, which axum clones for every request, one boxed service per
/// layer. Around the router the stack is cloned as plain values, and the router by one `Arc`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let traces = state.tracing.clone();
    let app = tower::ServiceBuilder::new()
        .map_response(IntoResponse::into_response)
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(move |req: &axum::http::Request<_>| server_span(&traces, req))
                .on_response(|res: &Response<_>, _: std::time::Duration, span: &tracing::Span| {
                    span.record("http.response.status_code", res.status().as_u16());
                    if res.status().is_server_error() {
                        span.record("otel.status_code", "ERROR");
                    }
                }),
        )
        .layer(CatchPanicLayer::custom(panic_response))
        .layer(connection::UnreadBodies)
        .service(router(state));
    axum::serve(linger::LingeringListener(listener), axum::ServiceExt::into_make_service(app))
        .with_graceful_shutdown(shutdown)
        .await
}

/// A request's server span (OpenTelemetry's HTTP server conventions), continuing the caller's
/// trace when the request carries a W3C `traceparent`. `http.route` is the matched route; FHIR's
/// routes, nested, record theirs once matched ([`record_route`]).
fn server_span<B>(traces: &crate::telemetry::Tracing, req: &axum::http::Request<B>) -> tracing::Span {
    let path = req.uri().path();
    let route = match path {
        "/graphql"
        | "/graphql/ws"
        | "/widget"
        | "/widget/clinic-availability.js"
        | "/healthz"
        | "/readyz"
        | "/metrics" => Some(path),
        _ if path.starts_with("/graphql/assets/") => Some("/graphql/assets/{file}"),
        _ => None,
    };
    let method = req.method().as_str();
    let name = match route {
        Some(route) => format!("{method} {route}"),
        None => method.to_owned(),
    };
    let span = tracing::info_span!(
        crate::telemetry::SERVER_SPAN,
        otel.name = %name,
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        http.request.method = method,
        http.route = route,
        url.path = path,
        http.response.status_code = tracing::field::Empty,
    );
    traces.adopt(&span, crate::telemetry::traces::extract(req.headers()));
    span
}

/// Records a nested route's template on the request's server span (and names the span by it).
async fn record_route(
    matched: axum::extract::MatchedPath,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let span = tracing::Span::current();
    span.record("http.route", matched.as_str());
    span.record("otel.name", format!("{} {}", req.method(), matched.as_str()));
    next.run(req).await
}

/// The service's routes (without the layers [`serve`] puts around them).
pub fn router(mut state: AppState) -> Router {
    // The CORS policy of every route browsers may call from other sites (see `cors::Cors`):
    // `/graphql`, FHIR under `/fhir` with its own state, and the widget's module, which other
    // sites' pages load as a module script (fetched in CORS mode).
    let cors = cors::Cors::new(state.origins.clone());
    let fhir = state
        .fhir
        .take()
        .map(|fhir| crate::fhir::router(fhir).layer(cors.clone()).route_layer(axum::middleware::from_fn(record_route)));
    let router = Router::new()
        .route("/graphql", post(graphql::post).get(graphql::get).layer(cors.clone()))
        .route("/graphql/ws", get(ws::upgrade))
        .route("/graphql/assets/{file}", get(graphiql::asset))
        .route("/widget", get(widget::page))
        .route("/widget/clinic-availability.js", get(widget::script).layer(cors))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(metrics::render));
    let router = match fhir {
        Some(fhir) => router.nest("/fhir", fhir),
        None => router,
    };
    router.with_state(Arc::new(state))
}

/// A panic is a bug: log it and answer `INTERNAL` like any other internal failure.
fn panic_response(err: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let detail = err
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| err.downcast_ref::<&str>().copied())
        .unwrap_or("unknown panic");
    tracing::error!(panic = detail, "request handler panicked");
    let body = serde_json::json!({ "errors": [{ "message": "internal error", "extensions": { "code": "INTERNAL" } }] });
    (StatusCode::INTERNAL_SERVER_ERROR, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}
