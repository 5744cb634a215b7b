//! Traces: the service's `tracing` spans exported as OpenTelemetry traces, by OTLP over HTTP
//! (protobuf) to `{OTEL_EXPORTER_OTLP_ENDPOINT}/v1/traces`, when that variable is set.
//!
//! # Whose tracer builds a span
//!
//! The `tracing` layer ([`layer`]) is the process's, but the tracer provider is the instance's
//! ([`Tracing`], made by `Application::build` and shut down with it). The instance puts its
//! tracer into the OpenTelemetry context of each of its root spans (a request's server span, an
//! outbox relay pass, a message or webhook attempt: [`Tracing::adopt`]), and every span below
//! inherits that context. The layer's tracer ([`Router`]) builds each span with the tracer its
//! parent context carries; a span with none (export off, or code outside an instance) still gets
//! trace and span ids, for the logs and for propagation, but is recorded by nobody. So several
//! instances in one process (the tests run many) each export their own spans, to their own
//! collector, with their own sampler, and no span leaks from one to another.
//!
//! # Never in a request's way
//!
//! A finished span goes into the SDK's batch processor: a queue of `OTEL_BSP_MAX_QUEUE_SIZE`
//! spans that a thread of its own exports from (every `OTEL_BSP_SCHEDULE_DELAY` ms, or as soon as
//! a batch is full), each export bounded by `OTEL_EXPORTER_OTLP_TIMEOUT`. Ending a span only
//! offers it to the queue; a span that finds the queue full (a collector down or slow) is dropped
//! and counted in `otel_spans_dropped_total`. Queued spans are counted until their export ends,
//! so a batch being sent still takes its room: the queue is bounded whatever the collector does.
//!
//! # Database statements
//!
//! Every statement is already timed in one place (`db`'s statement count, fed by sea-orm's
//! metric callback and by the few statements sent through sqlx directly); [`statement`] turns
//! each into a client span of the current trace, after the fact (start = end − elapsed), with
//! `db.system.name` and `db.operation.name` and never the SQL's values. Statements outside a
//! recorded trace (the workers' polls) cost one thread-local look-up.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, SystemTime},
};

use opentelemetry::{
    propagation::{Extractor, TextMapPropagator},
    trace::{
        Span as _, SpanBuilder, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
        TraceState, Tracer as _, TracerProvider as _,
    },
    Context, KeyValue,
};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::{
    error::OTelSdkResult,
    propagation::TraceContextPropagator,
    trace::{
        BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracer, SdkTracerProvider, SpanData, SpanExporter,
        SpanProcessor,
    },
    Resource,
};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::settings::{ConfigError, Reader};

/// The instrumentation scope of every span.
const SCOPE: &str = "clinic-booking";

/// Most links of one span to the traces of the work it does (a relay pass of many bookings).
const MAX_LINKS: usize = 64;

/// How root spans are sampled (`OTEL_TRACES_SAMPLER`, with `OTEL_TRACES_SAMPLER_ARG`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplerChoice {
    /// A span with a parent follows the parent's decision (the `parentbased_` samplers).
    pub parent_based: bool,
    /// What a root span gets.
    pub root: RootSampling,
}

/// The decision for a root span.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RootSampling {
    /// Every trace.
    On,
    /// None.
    Off,
    /// This fraction of the traces, by trace id.
    Ratio(f64),
}

impl SamplerChoice {
    /// The SDK's standard sampler names.
    fn parse(name: &str, arg: Option<f64>) -> Result<Self, String> {
        let (parent_based, root) = match name.strip_prefix("parentbased_") {
            Some(root) => (true, root),
            None => (false, name),
        };
        let root = match root {
            "always_on" => RootSampling::On,
            "always_off" => RootSampling::Off,
            "traceidratio" => RootSampling::Ratio(arg.unwrap_or(1.0)),
            _ => {
                return Err("expected always_on, always_off, traceidratio, parentbased_always_on, \
                            parentbased_always_off or parentbased_traceidratio"
                    .into())
            }
        };
        Ok(Self { parent_based, root })
    }

    fn sampler(self) -> Sampler {
        let root = match self.root {
            RootSampling::On => Sampler::AlwaysOn,
            RootSampling::Off => Sampler::AlwaysOff,
            RootSampling::Ratio(r) => Sampler::TraceIdRatioBased(r),
        };
        if self.parent_based {
            Sampler::ParentBased(Box::new(root))
        } else {
            root
        }
    }
}

/// Trace export's settings (the OpenTelemetry SDK's standard variables).
#[derive(Clone, Debug, PartialEq)]
pub struct TraceSettings {
    /// Where the collector listens (`OTEL_EXPORTER_OTLP_ENDPOINT`, e.g. `http://127.0.0.1:4318`);
    /// spans go to `{endpoint}/v1/traces`. Unset: nothing is exported.
    pub endpoint: Option<String>,
    /// `service.name` of every span (`OTEL_SERVICE_NAME`, default `clinic-booking`).
    pub service_name: String,
    /// Sampling (`OTEL_TRACES_SAMPLER`, default `parentbased_always_on`; `OTEL_TRACES_SAMPLER_ARG`,
    /// the ratio of the `traceidratio` samplers, default 1).
    pub sampler: SamplerChoice,
    /// Most spans waiting for export (`OTEL_BSP_MAX_QUEUE_SIZE`, default 2048); more are dropped.
    pub queue_size: usize,
    /// Longest wait of a finished span before its batch is sent (`OTEL_BSP_SCHEDULE_DELAY`, ms,
    /// default 5000).
    pub schedule_delay: Duration,
    /// Longest export (`OTEL_EXPORTER_OTLP_TIMEOUT`, ms, default 10000).
    pub export_timeout: Duration,
}

impl TraceSettings {
    /// Reads them.
    pub fn from_env(r: &mut Reader) -> Result<Self, ConfigError> {
        let endpoint = r.with("OTEL_EXPORTER_OTLP_ENDPOINT", |raw| {
            let raw = raw.trim();
            match url::Url::parse(raw) {
                Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => {
                    Ok(raw.trim_end_matches('/').to_owned())
                }
                _ => Err("expected the collector's http:// or https:// URL (without /v1/traces)".into()),
            }
        })?;
        let service_name = r.string("OTEL_SERVICE_NAME").map_or_else(|| SCOPE.to_owned(), |s| s.trim().to_owned());
        let arg = r.with("OTEL_TRACES_SAMPLER_ARG", |raw| {
            raw.trim()
                .parse::<f64>()
                .ok()
                .filter(|v| (0.0..=1.0).contains(v))
                .ok_or_else(|| "expected a ratio from 0 to 1".into())
        })?;
        let sampler =
            r.with_or("OTEL_TRACES_SAMPLER", "parentbased_always_on", |raw| SamplerChoice::parse(raw.trim(), arg))?;
        let queue_size = r.number("OTEL_BSP_MAX_QUEUE_SIZE", 2048usize, 1..=1_000_000, "a number of spans")?;
        let schedule_delay = r.millis("OTEL_BSP_SCHEDULE_DELAY", 5000, 1..=600_000, "a number of milliseconds")?;
        let export_timeout = r.millis("OTEL_EXPORTER_OTLP_TIMEOUT", 10_000, 1..=600_000, "a number of milliseconds")?;
        Ok(Self { endpoint, service_name, sampler, queue_size, schedule_delay, export_timeout })
    }
}

/// The context value that names the tracer of an instance that exports.
#[derive(Clone, Debug)]
struct Route(SdkTracer);

/// One instance's traces: its tracer provider when it exports, and how its root spans join a
/// trace. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Tracing {
    exporting: Option<Arc<Exporting>>,
}

#[derive(Debug)]
struct Exporting {
    provider: SdkTracerProvider,
    route: Route,
}

impl Tracing {
    /// Tracing that exports nothing (root spans still get trace ids).
    pub fn off() -> Self {
        Self::default()
    }

    /// Starts exporting as `settings` say (nothing without an endpoint). Never fails at a
    /// collector that is down: it is only tried when the first batch goes.
    pub fn start(settings: &TraceSettings) -> Result<Self, String> {
        let Some(endpoint) = &settings.endpoint else {
            return Ok(Self::off());
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(format!("{endpoint}/v1/traces"))
            .with_timeout(settings.export_timeout)
            .build()
            .map_err(|e| format!("cannot export traces to OTEL_EXPORTER_OTLP_ENDPOINT={endpoint}: {e}"))?;
        let queued = Arc::new(AtomicUsize::new(0));
        let config = BatchConfigBuilder::default()
            .with_max_queue_size(settings.queue_size)
            .with_max_export_batch_size(settings.queue_size.min(512))
            .with_scheduled_delay(settings.schedule_delay)
            .build();
        let batch = BatchSpanProcessor::builder(Counted { inner: exporter, queued: Arc::clone(&queued) })
            .with_batch_config(config)
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(Bounded { inner: batch, queued, room: settings.queue_size })
            .with_sampler(settings.sampler.sampler())
            .with_resource(Resource::builder_empty().with_service_name(settings.service_name.clone()).build())
            .build();
        let route = Route(provider.tracer(SCOPE));
        tracing::info!(endpoint = %endpoint, service = %settings.service_name, "exporting traces (OTLP over HTTP)");
        Ok(Self { exporting: Some(Arc::new(Exporting { provider, route })) })
    }

    /// Whether spans are exported.
    pub fn exports(&self) -> bool {
        self.exporting.is_some()
    }

    /// The context of a root span of this instance: its tracer, continuing `parent` (a caller's
    /// span, or the span whose transaction queued the work) when there is one.
    pub fn root(&self, parent: Option<SpanContext>) -> Context {
        let cx = match &self.exporting {
            Some(e) => Context::new().with_value(e.route.clone()),
            None => Context::new(),
        };
        match parent.filter(SpanContext::is_valid) {
            Some(p) => cx.with_remote_span_context(p),
            None => cx,
        }
    }

    /// Makes `span` (not entered yet) a root span of this instance, a child of `parent`.
    pub fn adopt(&self, span: &tracing::Span, parent: Option<SpanContext>) {
        // Fails only where no OpenTelemetry layer is installed: then there is nothing to join.
        let _ = span.set_parent(self.root(parent));
    }

    /// Makes `span` (not entered yet) a root span of this instance that continues the trace of
    /// `parents` (the spans that queued the work it does): a child of the one when they are one,
    /// else linked to each.
    pub fn adopt_all(&self, span: &tracing::Span, parents: impl IntoIterator<Item = TraceParent>) {
        let mut parents: Vec<TraceParent> = parents.into_iter().collect();
        parents.sort_unstable_by_key(|p| (p.trace_id.to_bytes(), p.span_id.to_bytes()));
        parents.dedup();
        match parents.as_slice() {
            [one] => self.adopt(span, Some(one.span_context())),
            many => {
                self.adopt(span, None);
                for p in many.iter().take(MAX_LINKS) {
                    span.add_link(p.span_context());
                }
            }
        }
    }

    /// Exports what is queued (within a few seconds) and stops the export thread. Off the
    /// async threads: the SDK waits for its thread.
    pub async fn shutdown(&self) {
        let Some(exporting) = &self.exporting else { return };
        let provider = exporting.provider.clone();
        let done = tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(Duration::from_secs(3)));
        if tokio::time::timeout(Duration::from_secs(5), done).await.is_err() {
            tracing::warn!("the trace exporter did not stop in time; its last spans may be lost");
        }
    }
}

/// The batch processor behind a bound of its own: spans past `room` waiting (queued or being
/// exported) are dropped here, and counted, before the SDK would drop them silently.
#[derive(Debug)]
struct Bounded {
    inner: BatchSpanProcessor,
    queued: Arc<AtomicUsize>,
    room: usize,
}

impl SpanProcessor for Bounded {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if self.queued.fetch_add(1, Ordering::Relaxed) >= self.room {
            self.queued.fetch_sub(1, Ordering::Relaxed);
            metrics::counter!("otel_spans_dropped_total").increment(1);
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The exporter, giving back the room of each batch once its export ended (sent or failed).
#[derive(Debug)]
struct Counted<E> {
    inner: E,
    queued: Arc<AtomicUsize>,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    fn export(&self, batch: Vec<SpanData>) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        let spans = batch.len();
        let export = self.inner.export(batch);
        async move {
            let result = export.await;
            self.queued.fetch_sub(spans, Ordering::Relaxed);
            match &result {
                Ok(()) => metrics::counter!("otel_spans_exported_total").increment(spans as u64),
                Err(_) => metrics::counter!("otel_export_failures_total").increment(1),
            }
            result
        }
    }

    fn shutdown_with_timeout(&mut self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&mut self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The layer's tracer: builds each span with the tracer of the instance its parent context
/// names, else with a tracer that records nothing (the span still has ids).
#[derive(Clone, Debug)]
pub struct Router {
    unrecorded: SdkTracer,
}

impl Router {
    fn new() -> Self {
        let provider = SdkTracerProvider::builder().with_sampler(Sampler::AlwaysOff).build();
        Self { unrecorded: provider.tracer(SCOPE) }
    }
}

impl opentelemetry::trace::Tracer for Router {
    type Span = opentelemetry_sdk::trace::Span;

    fn build_with_context(&self, builder: SpanBuilder, parent_cx: &Context) -> Self::Span {
        match parent_cx.get::<Route>() {
            Some(route) => route.0.build_with_context(builder, parent_cx),
            None => self.unrecorded.build_with_context(builder, parent_cx),
        }
    }
}

/// The `tracing` layer that makes OpenTelemetry spans of this crate's spans (info and above) and
/// its events (as span events). Install it once per subscriber; [`Tracing`] decides per instance
/// what is exported.
pub fn layer<S>() -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let layer = tracing_opentelemetry::layer()
        .with_tracer(Router::new())
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_tracked_inactivity(false);
    let ours = tracing_subscriber::filter::filter_fn(|meta| {
        meta.target().starts_with("clinic_booking") && *meta.level() <= tracing::Level::INFO
    });
    tracing_subscriber::Layer::with_filter(layer, ours)
}

/// Reads the W3C trace context headers (`traceparent`, `tracestate`).
struct Headers<'a>(&'a axum::http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(axum::http::HeaderName::as_str).collect()
    }
}

/// The caller's span, from a request's `traceparent` and `tracestate`; `None` without a valid one.
pub fn extract(headers: &axum::http::HeaderMap) -> Option<SpanContext> {
    if !headers.contains_key("traceparent") {
        return None;
    }
    let cx = TraceContextPropagator::new().extract(&Headers(headers));
    let span = cx.span().span_context().clone();
    span.is_valid().then_some(span)
}

/// A W3C trace parent: the span that queued some work (kept with it as text, `traceparent`'s
/// form) or that sends a request. Small and `Copy`, as the events that carry it are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceParent {
    trace_id: TraceId,
    span_id: SpanId,
    flags: TraceFlags,
}

impl TraceParent {
    /// The span running now; `None` outside any span.
    pub fn current() -> Option<Self> {
        Self::of(&Context::current())
    }

    /// The OpenTelemetry span of `span`.
    pub fn of_span(span: &tracing::Span) -> Option<Self> {
        Self::of(&span.context())
    }

    fn of(cx: &Context) -> Option<Self> {
        let span = cx.span();
        let sc = span.span_context();
        sc.is_valid().then(|| Self { trace_id: sc.trace_id(), span_id: sc.span_id(), flags: sc.trace_flags() })
    }

    /// The span a `traceparent` value names; `None` when it is not one.
    pub fn parse(traceparent: &str) -> Option<Self> {
        let carrier = HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
        let cx = TraceContextPropagator::new().extract(&carrier);
        Self::of(&cx)
    }

    /// As a remote parent.
    pub fn span_context(self) -> SpanContext {
        SpanContext::new(self.trace_id, self.span_id, self.flags, true, TraceState::default())
    }

    /// The trace it belongs to.
    pub fn trace_id(self) -> TraceId {
        self.trace_id
    }
}

impl std::fmt::Display for TraceParent {
    /// The `traceparent` header's value.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "00-{}-{}-{:02x}", self.trace_id, self.span_id, self.flags.to_u8())
    }
}

/// The trace id of the span running now (for log lines); `None` outside any span.
pub(crate) fn current_trace_id() -> Option<opentelemetry::TraceId> {
    let cx = Context::current();
    let span = cx.span();
    let sc = span.span_context();
    sc.is_valid().then(|| sc.trace_id())
}

/// A statement's operation: known by its caller, or read from its SQL (only when it is traced).
#[derive(Clone, Copy, Debug)]
pub enum Operation<'a> {
    /// `SELECT`, `UPDATE`, …
    Named(&'static str),
    /// The statement, whose first keyword names it.
    Sql(&'a str),
}

/// Records, as a span of the trace running now, a statement of `system` (`postgresql` or
/// `sqlite`) that just ended after `elapsed`. Nothing when that trace is not recorded.
pub(crate) fn statement(system: &'static str, operation: Operation<'_>, elapsed: Duration, failed: bool) {
    let cx = Context::current();
    let Some(route) = cx.get::<Route>() else { return };
    if !cx.span().span_context().is_sampled() {
        return;
    }
    let operation = match operation {
        Operation::Named(name) => name,
        Operation::Sql(sql) => self::operation(sql),
    };
    let end = SystemTime::now();
    let mut span = route
        .0
        .span_builder(format!("{operation} {system}"))
        .with_kind(SpanKind::Client)
        .with_start_time(end.checked_sub(elapsed).unwrap_or(end))
        .with_attributes([KeyValue::new("db.system.name", system), KeyValue::new("db.operation.name", operation)])
        .start_with_context(&route.0, &cx);
    if failed {
        span.set_status(Status::error("the statement failed"));
    }
    span.end_with_timestamp(end);
}

/// The statement's operation: its first keyword, or for a `WITH` the first data-modifying one
/// (a booking is a `WITH … UPDATE … INSERT`).
fn operation(sql: &str) -> &'static str {
    const KNOWN: [&str; 14] = [
        "SELECT",
        "INSERT",
        "UPDATE",
        "DELETE",
        "WITH",
        "BEGIN",
        "COMMIT",
        "ROLLBACK",
        "SET",
        "SAVEPOINT",
        "RELEASE",
        "PRAGMA",
        "CREATE",
        "ALTER",
    ];
    let first = sql.trim_start().split(|c: char| !c.is_ascii_alphabetic()).next().unwrap_or_default();
    match KNOWN.iter().find(|k| first.eq_ignore_ascii_case(k)) {
        Some(&"WITH") => {
            let words: Vec<&str> = sql.split(|c: char| !c.is_ascii_alphabetic()).collect();
            ["UPDATE", "INSERT", "DELETE"]
                .into_iter()
                .find(|op| words.iter().any(|w| w.eq_ignore_ascii_case(op)))
                .unwrap_or("SELECT")
        }
        Some(k) => k,
        None => "OTHER",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_are_named_by_their_keyword() {
        assert_eq!(operation("  select * from x"), "SELECT");
        assert_eq!(operation("WITH l AS (SELECT 1), s AS (UPDATE time_slot SET a = 1) SELECT 1"), "UPDATE");
        assert_eq!(operation("WITH a AS (SELECT 1) SELECT 2"), "SELECT");
        assert_eq!(operation("VACUUM"), "OTHER");
    }

    #[test]
    fn traceparents_round_trip() {
        let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let parent = TraceParent::parse(tp).expect("valid");
        assert_eq!(parent.to_string(), tp);
        let cx = Context::new().with_remote_span_context(parent.span_context());
        assert_eq!(TraceParent::of(&cx), Some(parent));
        assert!(TraceParent::parse("00-00000000000000000000000000000000-b7ad6b7169203331-01").is_none());
        assert!(TraceParent::parse("garbage").is_none());
    }

    #[test]
    fn samplers_parse() {
        let on = SamplerChoice { parent_based: true, root: RootSampling::On };
        assert_eq!(SamplerChoice::parse("parentbased_always_on", None), Ok(on));
        assert_eq!(
            SamplerChoice::parse("traceidratio", Some(0.25)),
            Ok(SamplerChoice { parent_based: false, root: RootSampling::Ratio(0.25) })
        );
        assert!(SamplerChoice::parse("sometimes", None).is_err());
    }
}
