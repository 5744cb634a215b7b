//! Traces against a real OTLP/HTTP receiver: a server on 127.0.0.1 started by each test that
//! takes `POST /v1/traces` and decodes the protobuf with the OpenTelemetry project's own
//! definitions (`opentelemetry-proto`). Each test server has its own tracer provider, so a test
//! sees only the spans of its own servers (and looks at its own trace ids).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{body::Bytes, extract::State, http::StatusCode, response::IntoResponse};
use opentelemetry_proto::tonic::{
    collector::trace::v1::ExportTraceServiceRequest,
    common::v1::{any_value, AnyValue},
};
use prost::Message;
use serde_json::{json, Value};

use crate::{
    backend::{backend, Backend},
    helpers::*,
    webhooks::{eventually, Receiver, Reply, LOCAL},
};

/// One span as the collector received it.
#[derive(Clone, Debug)]
struct Exported {
    service: String,
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    name: String,
    attributes: HashMap<String, String>,
    /// The trace ids of its links.
    links: Vec<String>,
}

impl Exported {
    fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

struct CollectorState {
    spans: Mutex<Vec<Exported>>,
    /// How long it takes to answer each export.
    delay: Duration,
}

/// An OTLP/HTTP collector on 127.0.0.1.
struct Collector {
    port: u16,
    state: Arc<CollectorState>,
    task: tokio::task::JoinHandle<()>,
}

impl Collector {
    async fn start(delay: Duration) -> Self {
        let state = Arc::new(CollectorState { spans: Mutex::new(Vec::new()), delay });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let app = axum::Router::new().route("/v1/traces", axum::routing::post(export)).with_state(Arc::clone(&state));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { port, state, task }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn spans(&self) -> Vec<Exported> {
        self.state.spans.lock().unwrap().clone()
    }

    /// Waits until the spans of `trace_id` satisfy `ok`; returns them.
    async fn trace_when(&self, trace_id: &str, what: &str, ok: impl Fn(&[Exported]) -> bool) -> Vec<Exported> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let spans: Vec<Exported> = self.spans().into_iter().filter(|s| s.trace_id == trace_id).collect();
            if ok(&spans) {
                return spans;
            }
            assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}; the trace has {spans:#?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

async fn export(State(state): State<Arc<CollectorState>>, body: Bytes) -> impl IntoResponse {
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf body");
    let mut spans = Vec::new();
    for resource in request.resource_spans {
        let service = resource
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|a| a.key == "service.name")
            .map(|a| text(a.value.as_ref()))
            .unwrap_or_default();
        for scope in resource.scope_spans {
            for span in scope.spans {
                spans.push(Exported {
                    service: service.clone(),
                    trace_id: hex::encode(&span.trace_id),
                    span_id: hex::encode(&span.span_id),
                    parent_span_id: hex::encode(&span.parent_span_id),
                    name: span.name,
                    attributes: span.attributes.iter().map(|a| (a.key.clone(), text(a.value.as_ref()))).collect(),
                    links: span.links.iter().map(|l| hex::encode(&l.trace_id)).collect(),
                });
            }
        }
    }
    tokio::time::sleep(state.delay).await;
    state.spans.lock().unwrap().extend(spans);
    (StatusCode::OK, [("content-type", "application/x-protobuf")], Vec::<u8>::new())
}

/// Settings that export to `endpoint` at once (a batch every 50 ms).
fn exporting(endpoint: &str) -> Vec<(&'static str, String)> {
    vec![("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.to_owned()), ("OTEL_BSP_SCHEDULE_DELAY", "50".to_owned())]
}

async fn spawn_with(database: &TestDatabase, settings: &[(&'static str, String)]) -> TestApp {
    let settings: Vec<(&str, &str)> = settings.iter().map(|(k, v)| (*k, v.as_str())).collect();
    TestApp::spawn_on(database, &settings).await
}

/// The booking mutation with an operation name.
const BOOK_NAMED: &str = "mutation Book($s:ID!,$k:String!,$p:ID){bookAppointment(input:{slotId:$s,idempotencyKey:$k,\
    patientId:$p}){appointment{id status} replayed userErrors{code}}}";

/// Books as `token` sending `traceparent`; returns the payload.
async fn book_traced(app: &TestApp, token: &str, slot: &str, key: &str, traceparent: &str) -> Value {
    let resp = app
        .client
        .post(format!("{}/graphql", app.address))
        .bearer_auth(token)
        .header("traceparent", traceparent)
        .header("tracestate", "vendor=1")
        .json(&json!({ "query": BOOK_NAMED, "variables": { "s": slot, "k": key, "p": "1" } }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    body["data"]["bookAppointment"].clone()
}

/// A fresh trace id and parent span id, as a caller would send them.
fn caller() -> (String, String, String) {
    let trace = uuid::Uuid::new_v4().simple().to_string();
    let parent = uuid::Uuid::new_v4().simple().to_string()[..16].to_owned();
    let traceparent = format!("00-{trace}-{parent}-01");
    (trace, parent, traceparent)
}

fn db_system() -> &'static str {
    match backend() {
        Backend::Postgres { .. } => "postgresql",
        Backend::Sqlite => "sqlite",
    }
}

#[tokio::test]
async fn a_request_with_a_traceparent_continues_that_trace_with_its_operation_and_statements() {
    let collector = Collector::start(Duration::ZERO).await;
    let database = TestDatabase::new().await;
    let mut settings = exporting(&collector.endpoint());
    settings.push(("OTEL_SERVICE_NAME", "clinic-test".to_owned()));
    let app = spawn_with(&database, &settings).await;
    let (_, slot) = app.doctor_with_slot(2).await;
    let (trace, parent, traceparent) = caller();
    let key = format!("k-{}", uuid::Uuid::new_v4().simple());
    let booked = book_traced(&app, &admin(), &slot, &key, &traceparent).await;
    assert_eq!(booked["appointment"]["status"], "BOOKED", "{booked}");

    // Stopping closes the connections (ending their requests' spans) and sends what is queued.
    app.stop().await;
    let spans: Vec<Exported> = collector.spans().into_iter().filter(|s| s.trace_id == trace).collect();
    let has = |what: &str, ok: &dyn Fn(&Exported) -> bool| assert!(spans.iter().any(ok), "no {what} in {spans:#?}");
    has("server span", &|s| s.attr("http.route") == Some("/graphql"));
    has("operation span", &|s| s.attr("graphql.operation.name") == Some("Book"));
    has("statement span", &|s| s.attr("db.system.name").is_some());
    // The server span continues the caller's: same trace, the caller's span as its parent.
    let server = spans.iter().find(|s| s.attr("http.route") == Some("/graphql")).unwrap();
    assert_eq!(server.parent_span_id, parent, "{server:?}");
    assert_eq!(server.name, "POST /graphql");
    assert_eq!(
        (server.attr("http.request.method"), server.attr("http.response.status_code")),
        (Some("POST"), Some("200"))
    );
    assert_eq!(server.service, "clinic-test");
    // Inside it, the operation, named by its type and name, with the booking's outcome.
    let operation = spans.iter().find(|s| s.attr("graphql.operation.name") == Some("Book")).unwrap();
    assert_eq!(operation.name, "mutation Book");
    assert_eq!(operation.attr("graphql.operation.type"), Some("mutation"));
    assert_eq!(operation.attr("booking.outcome"), Some("BOOKED"));
    assert_eq!(operation.parent_span_id, server.span_id);
    // And the booking's statements: the seat taken (an UPDATE), never with its values.
    let statements: Vec<&Exported> = spans.iter().filter(|s| s.attr("db.system.name").is_some()).collect();
    assert!(statements.iter().all(|s| s.attr("db.system.name") == Some(db_system())), "{statements:?}");
    assert!(statements.iter().any(|s| s.attr("db.operation.name") == Some("UPDATE")), "{statements:?}");
    for s in &statements {
        assert!(s.attributes.values().all(|v| !v.contains(&key)), "a statement span carries a value: {s:?}");
    }
}

#[tokio::test]
async fn a_partners_webhook_carries_a_traceparent_of_the_bookings_trace() {
    let collector = Collector::start(Duration::ZERO).await;
    let receiver = Receiver::start(vec![], Reply::Status(200)).await;
    let database = TestDatabase::new().await;
    let mut settings: Vec<(&'static str, String)> = LOCAL.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
    settings.extend(exporting(&collector.endpoint()));
    let app = spawn_with(&database, &settings).await;
    let token = partner("acme");
    app.endpoint(&token, &receiver.url(), None).await;
    let (_, slot) = app.doctor_with_slot(1).await;
    let (trace, _, traceparent) = caller();
    let booked = book_traced(&app, &token, &slot, "k-traced", &traceparent).await;
    assert_eq!(booked["appointment"]["status"], "BOOKED", "{booked}");

    let hook = receiver.wait_for(1).await.remove(0);
    let sent = hook.header("traceparent");
    assert_eq!(sent.split('-').nth(1), Some(trace.as_str()), "the webhook's traceparent: {sent:?}");
    // The attempt is a span of the booking's trace; the traceparent the partner got names it.
    let spans = collector
        .trace_when(&trace, "the webhook attempt span", |spans| spans.iter().any(|s| s.name == "webhook POST"))
        .await;
    // The relay pass that carried the booking is in its trace, or linked to it when the pass
    // carried other changes too (the doctor's published schedule).
    eventually("the relay pass of the booking", || async {
        let relays: Vec<Exported> = collector.spans().into_iter().filter(|s| s.name == "outbox relay").collect();
        relays.iter().any(|s| s.trace_id == trace || s.links.contains(&trace)).then_some(())
    })
    .await;
    let attempt = spans.iter().find(|s| s.name == "webhook POST").unwrap();
    assert_eq!(attempt.attr("http.response.status_code"), Some("200"), "{attempt:?}");
    assert_eq!(sent.split('-').nth(2), Some(attempt.span_id.as_str()));
    app.stop().await;
}

#[tokio::test]
async fn sampling_off_exports_nothing() {
    let collector = Collector::start(Duration::ZERO).await;
    let database = TestDatabase::new().await;
    let mut settings = exporting(&collector.endpoint());
    settings.push(("OTEL_TRACES_SAMPLER", "always_off".to_owned()));
    let app = spawn_with(&database, &settings).await;
    let (_, slot) = app.doctor_with_slot(1).await;
    let (_, _, traceparent) = caller();
    let booked = book_traced(&app, &admin(), &slot, "k-off", &traceparent).await;
    assert_eq!(booked["appointment"]["status"], "BOOKED", "{booked}");
    // Stopping flushes whatever was queued.
    app.stop().await;
    assert!(collector.spans().is_empty(), "{:?}", collector.spans());
}

/// Books `n` fresh slots and lists one, the same answers whatever the collector does.
async fn answers(app: &TestApp, n: usize) {
    for i in 0..n {
        let (doctor, slot) = app.doctor_with_slot(1).await;
        let (_, _, traceparent) = caller();
        let booked = book_traced(app, &admin(), &slot, &format!("k-{i}"), &traceparent).await;
        assert_eq!((booked["appointment"]["status"].as_str(), &booked["userErrors"]), (Some("BOOKED"), &json!([])));
        let list = "query($d:ID!,$t:Date!){availableSlots(doctorId:$d,date:$t){id available}}";
        let listed = app.gql(Some(&admin()), list, json!({ "d": doctor, "t": tomorrow() })).await;
        let seats: Vec<&Value> = listed["availableSlots"].as_array().unwrap().iter().map(|s| &s["available"]).collect();
        assert!(seats.iter().all(|a| **a == json!(0)), "the booked slot is full: {listed}");
    }
}

#[tokio::test]
async fn a_collector_that_is_down_changes_no_answer() {
    // A port that was free and is closed again: every export is refused.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let database = TestDatabase::new().await;
    let app = spawn_with(&database, &exporting(&format!("http://127.0.0.1:{closed}"))).await;
    answers(&app, 3).await;
    app.stop().await;
}

#[tokio::test]
async fn a_slow_collector_changes_no_answer_and_drops_are_counted() {
    // Each export waits past the exporter's time-out; the queue holds two spans.
    let collector = Collector::start(Duration::from_secs(3)).await;
    let database = TestDatabase::new().await;
    let mut settings = exporting(&collector.endpoint());
    settings.push(("OTEL_BSP_MAX_QUEUE_SIZE", "2".to_owned()));
    settings.push(("OTEL_EXPORTER_OTLP_TIMEOUT", "500".to_owned()));
    let app = spawn_with(&database, &settings).await;
    answers(&app, 3).await;
    let metrics = app.client.get(format!("{}/metrics", app.address)).send().await.unwrap().text().await.unwrap();
    let dropped = metrics
        .lines()
        .find_map(|l| l.strip_prefix("otel_spans_dropped_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    assert!(dropped > 0.0, "spans past the queue are counted:\n{metrics}");
    app.stop().await;
}
