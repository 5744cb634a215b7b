//! Partner webhooks against a real receiver: an HTTP server on 127.0.0.1 started by each test,
//! which records every request and answers as scripted. Signatures are checked by the
//! Standard Webhooks reference library (PyPI `standardwebhooks`, run as a subprocess).

use std::{
    collections::{HashMap, VecDeque},
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode, Uri},
    response::{IntoResponse, Response},
};
use serde_json::{json, Value};

use crate::helpers::*;

// ---------------------------------------------------------------------------------------------
// The receiver

/// How the receiver answers one request.
#[derive(Clone, Debug)]
pub(crate) enum Reply {
    /// This status, empty body.
    Status(u16),
    /// `302 Found` to this path of the receiver itself.
    Redirect(&'static str),
    /// This status after this long.
    Slow(Duration, u16),
}

/// One request the receiver got.
#[derive(Clone, Debug)]
pub(crate) struct Received {
    /// When it arrived.
    at: tokio::time::Instant,
    path: String,
    headers: HashMap<String, String>,
    body: String,
}

impl Received {
    pub(crate) fn header(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", String::as_str)
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap()
    }
}

struct ReceiverState {
    requests: Mutex<Vec<Received>>,
    script: Mutex<VecDeque<Reply>>,
    otherwise: Reply,
}

/// A webhook receiver on 127.0.0.1.
pub(crate) struct Receiver {
    port: u16,
    state: Arc<ReceiverState>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// Answers `script` in order, then `otherwise` to every request.
    pub(crate) async fn start(script: Vec<Reply>, otherwise: Reply) -> Self {
        Self::start_on(0, script, otherwise).await
    }

    async fn start_on(port: u16, script: Vec<Reply>, otherwise: Reply) -> Self {
        let state =
            Arc::new(ReceiverState { requests: Mutex::new(Vec::new()), script: Mutex::new(script.into()), otherwise });
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let app = axum::Router::new().fallback(receive).with_state(Arc::clone(&state));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { port, state, task }
    }

    /// The URL of its `/hook` path.
    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }

    pub(crate) fn requests(&self) -> Vec<Received> {
        self.state.requests.lock().unwrap().clone()
    }

    /// Waits until it got at least `n` requests; returns them.
    pub(crate) async fn wait_for(&self, n: usize) -> Vec<Received> {
        eventually(&format!("{n} requests at the receiver"), || async {
            let r = self.requests();
            (r.len() >= n).then_some(r)
        })
        .await
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn receive(State(state): State<Arc<ReceiverState>>, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let headers =
        headers.iter().map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or_default().to_owned())).collect();
    let received = Received {
        at: tokio::time::Instant::now(),
        path: uri.path().to_owned(),
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    state.requests.lock().unwrap().push(received);
    let reply = state.script.lock().unwrap().pop_front().unwrap_or_else(|| state.otherwise.clone());
    match reply {
        Reply::Status(code) => StatusCode::from_u16(code).unwrap().into_response(),
        Reply::Redirect(to) => (StatusCode::FOUND, [("location", to)]).into_response(),
        Reply::Slow(wait, code) => {
            tokio::time::sleep(wait).await;
            StatusCode::from_u16(code).unwrap().into_response()
        }
    }
}

/// Polls `check` until it gives a value (30 s at most: the tests wait for behaviour, and a
/// busy machine may be slow).
pub(crate) async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// The API

/// The settings of a test server whose webhooks may reach the receiver on 127.0.0.1.
pub(crate) const LOCAL: &[(&str, &str)] =
    &[("WEBHOOK_ALLOW_CIDRS", "127.0.0.0/8"), ("WEBHOOK_RETRY_SCHEDULE", "1s,1s"), ("WEBHOOK_POLL_MS", "200")];

async fn spawn_local(extra: &[(&str, &str)]) -> (TestApp, TestDatabase) {
    let database = TestDatabase::new().await;
    let mut settings = LOCAL.to_vec();
    settings.extend_from_slice(extra);
    (TestApp::spawn_on(&database, &settings).await, database)
}

const CREATE: &str = "mutation($u:String!,$e:[WebhookEventType!]){createWebhookEndpoint(input:{url:$u,events:$e})\
    {endpoint{id url events enabled createdAt} secret userErrors{code message field}}}";
const DELIVERY_FIELDS: &str = "id eventId eventType attempts status lastStatusCode lastAttemptAt nextAttemptAt";

impl TestApp {
    /// Creates an endpoint as `token`; returns the payload.
    async fn create_endpoint(&self, token: &str, url: &str, events: Option<Value>) -> Value {
        self.gql(Some(token), CREATE, json!({ "u": url, "e": events })).await["createWebhookEndpoint"].clone()
    }

    /// Creates an endpoint that must be accepted; returns (id, secret).
    pub(crate) async fn endpoint(&self, token: &str, url: &str, events: Option<Value>) -> (String, String) {
        let p = self.create_endpoint(token, url, events).await;
        assert_eq!(p["userErrors"], json!([]), "{p}");
        (p["endpoint"]["id"].as_str().unwrap().to_owned(), p["secret"].as_str().unwrap().to_owned())
    }

    /// An endpoint's deliveries, newest first.
    pub(crate) async fn deliveries(&self, token: &str, endpoint: &str) -> Vec<Value> {
        let q = format!("query($e:ID!){{webhookDeliveries(endpointId:$e,first:100){{nodes{{{DELIVERY_FIELDS}}}}}}}");
        let data = self.gql(Some(token), &q, json!({ "e": endpoint })).await;
        data["webhookDeliveries"]["nodes"].as_array().unwrap().clone()
    }

    /// Waits until the endpoint's deliveries satisfy `ok`; returns them.
    async fn deliveries_when(
        &self,
        token: &str,
        endpoint: &str,
        what: &str,
        ok: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        eventually(what, || async {
            let d = self.deliveries(token, endpoint).await;
            ok(&d).then_some(d)
        })
        .await
    }

    async fn endpoints(&self, token: &str) -> Vec<Value> {
        let data = self.gql(Some(token), "{webhookEndpoints{id url events enabled}}", json!({})).await;
        data["webhookEndpoints"].as_array().unwrap().clone()
    }

    pub(crate) async fn redeliver(&self, token: &str, delivery: &str) -> Value {
        let q = format!(
            "mutation($d:ID!){{redeliverWebhook(deliveryId:$d){{delivery{{{DELIVERY_FIELDS}}} userErrors{{code field}}}}}}"
        );
        self.gql(Some(token), &q, json!({ "d": delivery })).await["redeliverWebhook"].clone()
    }

    async fn delete_endpoint(&self, token: &str, id: &str) -> Value {
        let q = "mutation($i:ID!){deleteWebhookEndpoint(id:$i){deleted userErrors{code field}}}";
        self.gql(Some(token), q, json!({ "i": id })).await["deleteWebhookEndpoint"].clone()
    }

    async fn rotate(&self, token: &str, id: &str) -> Value {
        let q = "mutation($i:ID!){rotateWebhookSecret(id:$i){endpoint{id} secret userErrors{code field}}}";
        self.gql(Some(token), q, json!({ "i": id })).await["rotateWebhookSecret"].clone()
    }

    async fn enable(&self, token: &str, id: &str) -> Value {
        let q =
            "mutation($i:ID!){enableWebhookEndpoint(id:$i){endpoint{id url enabled} secret userErrors{code field}}}";
        self.gql(Some(token), q, json!({ "i": id })).await["enableWebhookEndpoint"].clone()
    }

    /// Books a fresh slot as partner `sub` for patient `patient`; returns the appointment id.
    async fn partner_books(&self, sub: &str, patient: u64) -> String {
        let (_, slot) = self.doctor_with_slot(1).await;
        let key = format!("k-{}", uuid::Uuid::new_v4().simple());
        let booked = self.book(&partner(sub), &slot, &key, Some(&patient.to_string())).await;
        booked["appointment"]["id"].as_str().unwrap_or_else(|| panic!("booked: {booked}")).to_owned()
    }
}

fn statuses(deliveries: &[Value]) -> Vec<&str> {
    deliveries.iter().map(|d| d["status"].as_str().unwrap()).collect()
}

// ---------------------------------------------------------------------------------------------
// The independent verifier

/// The Python that has the `standardwebhooks` package: `CLINIC_WEBHOOK_PYTHON`, the venv
/// `.ci/run` makes (`target/py`), or `python3`. `None` (after one printed
/// line) when none has it, unless `CLINIC_REQUIRE_EXTERNAL_TESTS=1`, which makes it a failure.
pub(crate) fn verifier() -> Option<PathBuf> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/servers/verify_webhook.py");
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/py/bin/python");
    let candidates = std::env::var_os("CLINIC_WEBHOOK_PYTHON")
        .map(PathBuf::from)
        .into_iter()
        .chain([venv, PathBuf::from("python3")]);
    for python in candidates {
        let ok = std::process::Command::new(&python)
            .arg(&script)
            .arg("--check")
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Some(python);
        }
    }
    let required = std::env::var("CLINIC_REQUIRE_EXTERNAL_TESTS").is_ok_and(|v| v == "1");
    assert!(!required, "the PyPI package standardwebhooks is missing (.ci/run installs it into target/py)");
    println!("skipped: no Python with the standardwebhooks package (see .ci/run)");
    None
}

/// Verifies each (request, secret) with the reference library; "ok" or its refusal, per case.
pub(crate) fn verify(python: &PathBuf, cases: &[(&Received, &str)]) -> Vec<String> {
    use std::io::Write;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/servers/verify_webhook.py");
    let input = json!({ "cases": cases.iter().map(|(r, secret)| json!({
        "secret": secret, "headers": r.headers, "body": r.body,
    })).collect::<Vec<_>>() });
    let mut child = std::process::Command::new(python)
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input.to_string().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "verifier failed: {out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

// ---------------------------------------------------------------------------------------------
// Deliveries

#[tokio::test]
async fn a_partner_booking_reaches_its_endpoint_signed() {
    let Some(python) = verifier() else { return };
    let (app, _db) = spawn_local(&[]).await;
    let receiver = Receiver::start(vec![], Reply::Status(204)).await;
    let a = partner("acme");
    let created = app.create_endpoint(&a, &receiver.url(), None).await;
    let endpoint = created["endpoint"]["id"].as_str().unwrap().to_owned();
    let secret = created["secret"].as_str().unwrap().to_owned();
    assert_eq!(created["endpoint"]["enabled"], true);
    assert_eq!(
        created["endpoint"]["events"],
        json!([
            "APPOINTMENT_BOOKED",
            "APPOINTMENT_HELD",
            "APPOINTMENT_CONFIRMED",
            "APPOINTMENT_CANCELLED",
            "APPOINTMENT_EXPIRED",
            "APPOINTMENT_RESCHEDULED",
            "APPOINTMENT_ARRIVED",
            "APPOINTMENT_FULFILLED",
            "APPOINTMENT_NOSHOW"
        ])
    );
    assert!(secret.starts_with("whsec_") && secret.len() >= 6 + 32, "{secret}");

    let (_, slot) = app.doctor_with_slot(1).await;
    let booked = app.book(&a, &slot, "k1", Some("77")).await;
    let id = booked["appointment"]["id"].as_str().unwrap().to_owned();
    let got = receiver.wait_for(1).await;
    let r = &got[0];
    assert_eq!(r.path, "/hook");
    assert_eq!(r.header("content-type"), "application/json");
    assert!(r.header("user-agent").starts_with("clinic-booking-webhooks/"), "{:?}", r.headers);
    assert!(r.header("webhook-id").starts_with("msg_"));
    let ts: i64 = r.header("webhook-timestamp").parse().unwrap();
    assert!((chrono::Utc::now().timestamp() - ts).abs() < 300);
    assert!(r.header("webhook-signature").starts_with("v1,") && !r.header("webhook-signature").contains(' '));
    let body = r.json();
    assert_eq!(body["type"], "appointment.booked");
    assert!(chrono::DateTime::parse_from_rfc3339(body["timestamp"].as_str().unwrap()).is_ok());
    let appointment = &body["data"]["appointment"];
    let from_api = app
        .gql(
            Some(&a),
            "query($id:ID!){appointment(id:$id){id patientId status slot{id startAt endAt doctor{id}}}}",
            json!({ "id": id }),
        )
        .await["appointment"]
        .clone();
    assert_eq!(appointment["id"], from_api["id"]);
    assert_eq!(appointment["slotId"], from_api["slot"]["id"]);
    assert_eq!(appointment["doctorId"], from_api["slot"]["doctor"]["id"]);
    assert_eq!(appointment["patientId"], "77");
    assert_eq!(appointment["status"], "BOOKED");
    assert_eq!(appointment["startAt"], from_api["slot"]["startAt"]);
    assert_eq!(appointment["endAt"], from_api["slot"]["endAt"]);

    // The reference library accepts it with the endpoint's secret, and only with it.
    let stranger = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let results = verify(&python, &[(r, &secret), (r, stranger)]);
    assert_eq!(results[0], "ok");
    assert_ne!(results[1], "ok");

    let deliveries = app
        .deliveries_when(&a, &endpoint, "a succeeded delivery", |d| d.len() == 1 && d[0]["status"] == "SUCCEEDED")
        .await;
    let d = &deliveries[0];
    assert_eq!(d["eventId"], r.header("webhook-id"));
    assert_eq!(d["eventType"], "APPOINTMENT_BOOKED");
    assert_eq!((d["attempts"].clone(), d["lastStatusCode"].clone()), (json!(1), json!(204)));
    assert!(d["lastAttemptAt"].is_string() && d["nextAttemptAt"].is_null());

    // A cancel follows, with who cancelled.
    app.cancel(&a, &id).await;
    let got = receiver.wait_for(2).await;
    let cancelled = got.iter().find(|r| r.json()["type"] == "appointment.cancelled").unwrap().json();
    assert_eq!(cancelled["data"]["appointment"]["status"], "CANCELLED");
    assert_eq!(cancelled["data"]["appointment"]["cancelledBy"], "PARTNER");
    assert!(cancelled["data"]["appointment"]["cancelledAt"].is_string());
    let deliveries = app.deliveries_when(&a, &endpoint, "two deliveries", |d| d.len() == 2).await;
    assert_eq!(deliveries[0]["eventType"], "APPOINTMENT_CANCELLED", "newest first");

    let metrics = app.client.get(format!("{}/metrics", app.address)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("webhook_deliveries_total{outcome=\"succeeded\"}"), "{metrics}");
    assert!(metrics.contains("webhook_attempt_seconds_bucket"));
    assert!(metrics.contains("webhook_queue_depth"));
}

#[tokio::test]
async fn failures_are_retried_with_the_same_event_then_succeed() {
    let (app, _db) = spawn_local(&[]).await;
    let receiver = Receiver::start(vec![Reply::Status(500), Reply::Status(503)], Reply::Status(200)).await;
    let (endpoint, _) = app.endpoint(&partner("acme"), &receiver.url(), None).await;
    app.partner_books("acme", 1).await;
    let got = receiver.wait_for(3).await;
    assert_eq!(got.len(), 3);
    for r in &got[1..] {
        assert_eq!(r.header("webhook-id"), got[0].header("webhook-id"));
        assert_eq!(r.body, got[0].body, "every attempt sends the same bytes");
    }
    let d = app
        .deliveries_when(&partner("acme"), &endpoint, "success", |d| {
            d.first().is_some_and(|d| d["status"] == "SUCCEEDED")
        })
        .await;
    assert_eq!((d[0]["attempts"].clone(), d[0]["lastStatusCode"].clone()), (json!(3), json!(200)));
}

#[tokio::test]
async fn a_delivery_fails_when_the_schedule_is_used_up() {
    let (app, _db) = spawn_local(&[]).await;
    let failing = vec![Reply::Status(500), Reply::Status(500), Reply::Status(500)];
    let receiver = Receiver::start(failing, Reply::Status(200)).await;
    let (endpoint, _) = app.endpoint(&partner("acme"), &receiver.url(), None).await;
    app.partner_books("acme", 1).await;
    let d = app
        .deliveries_when(&partner("acme"), &endpoint, "failed", |d| d.first().is_some_and(|d| d["status"] == "FAILED"))
        .await;
    // The first attempt and one per wait of `1s,1s`.
    assert_eq!(d[0]["attempts"], 3);
    assert_eq!(d[0]["lastStatusCode"], 500);
    assert!(d[0]["nextAttemptAt"].is_null());
    assert_eq!(receiver.requests().len(), 3);
    // A redelivery of a failed delivery is one more attempt.
    let again = app.redeliver(&partner("acme"), d[0]["id"].as_str().unwrap()).await;
    assert_eq!(again["delivery"]["status"], "PENDING");
    let d = app.deliveries_when(&partner("acme"), &endpoint, "success", |d| d[0]["status"] == "SUCCEEDED").await;
    assert_eq!((d[0]["attempts"].clone(), d[0]["lastStatusCode"].clone()), (json!(4), json!(200)));
}

#[tokio::test]
async fn deliveries_go_out_without_waiting_for_the_poll() {
    // A poll far longer than the test waits: the relay's commit wakes the worker, and the
    // worker sleeps only until the next retry is due.
    let (app, _db) = spawn_local(&[("WEBHOOK_POLL_MS", "600000")]).await;
    let receiver = Receiver::start(vec![Reply::Status(500)], Reply::Status(200)).await;
    let (endpoint, _) = app.endpoint(&partner("acme"), &receiver.url(), None).await;
    app.partner_books("acme", 1).await;
    app.deliveries_when(&partner("acme"), &endpoint, "success", |d| {
        d.first().is_some_and(|d| d["status"] == "SUCCEEDED")
    })
    .await;
    assert_eq!(receiver.requests().len(), 2);
}

#[tokio::test]
async fn two_instances_send_each_delivery_once() {
    let database = TestDatabase::new().await;
    let receiver = Receiver::start(vec![], Reply::Status(200)).await;
    let one = TestApp::spawn_on(&database, LOCAL).await;
    let two = TestApp::spawn_on(&database, LOCAL).await;
    let (endpoint, _) = one.endpoint(&partner("acme"), &receiver.url(), None).await;
    for p in 1..=6 {
        let app = if p % 2 == 0 { &one } else { &two };
        app.partner_books("acme", p).await;
    }
    two.deliveries_when(&partner("acme"), &endpoint, "six successes", |d| {
        d.len() == 6 && d.iter().all(|d| d["status"] == "SUCCEEDED")
    })
    .await;
    let mut ids: Vec<String> = receiver.requests().iter().map(|r| r.header("webhook-id").to_owned()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 6);
    assert_eq!(receiver.requests().len(), 6, "each once");
}

#[tokio::test]
async fn many_deliveries_at_once_each_count_their_own_attempts() {
    // Forty bookings at once, the first ten POSTs failing: the worker claims several deliveries
    // per statement and writes the outcomes that finished together in one transaction, and each
    // attempt still lands on its own delivery, once.
    let (app, _db) = spawn_local(&[]).await;
    let receiver = Receiver::start(vec![Reply::Status(500); 10], Reply::Status(200)).await;
    let (endpoint, _) = app.endpoint(&partner("acme"), &receiver.url(), None).await;
    futures_util::future::join_all((1..=40).map(|p| app.partner_books("acme", p))).await;
    let deliveries = app
        .deliveries_when(&partner("acme"), &endpoint, "forty successes", |d| {
            d.len() == 40 && d.iter().all(|d| d["status"] == "SUCCEEDED")
        })
        .await;
    let got = receiver.requests();
    assert_eq!(got.len(), 50, "forty deliveries, ten of them twice");
    let mut sent: HashMap<&str, i64> = HashMap::new();
    for r in &got {
        *sent.entry(r.header("webhook-id")).or_default() += 1;
    }
    for d in &deliveries {
        let event = d["eventId"].as_str().unwrap();
        assert_eq!(d["attempts"], json!(sent[event]), "{d}");
        assert_eq!(d["lastStatusCode"], 200);
    }
}

#[tokio::test]
async fn more_deliveries_than_the_worker_has_room_for_each_go_out_once() {
    // One attempt at a time, so room for 16 handed over: most of the forty are recorded due
    // and claimed from the queue instead, and the two ways meet on no delivery.
    let (app, _db) = spawn_local(&[("WEBHOOK_CONCURRENCY", "1")]).await;
    let receiver = Receiver::start(vec![], Reply::Status(200)).await;
    let (endpoint, _) = app.endpoint(&partner("acme"), &receiver.url(), None).await;
    futures_util::future::join_all((1..=40).map(|p| app.partner_books("acme", p))).await;
    let deliveries = app
        .deliveries_when(&partner("acme"), &endpoint, "forty successes", |d| {
            d.len() == 40 && d.iter().all(|d| d["status"] == "SUCCEEDED")
        })
        .await;
    assert!(deliveries.iter().all(|d| d["attempts"] == 1), "{deliveries:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut ids: Vec<String> = receiver.requests().iter().map(|r| r.header("webhook-id").to_owned()).collect();
    assert_eq!(ids.len(), 40, "each once");
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 40);
}

#[tokio::test]
async fn gone_disables_the_endpoint_and_stops_what_is_pending() {
    // A long schedule: the first delivery waits for its retry while the second answers 410.
    let (app, _db) = spawn_local(&[("WEBHOOK_RETRY_SCHEDULE", "1h")]).await;
    let receiver = Receiver::start(vec![Reply::Status(500)], Reply::Status(410)).await;
    let a = partner("acme");
    let (endpoint, _) = app.endpoint(&a, &receiver.url(), None).await;
    app.partner_books("acme", 1).await;
    app.deliveries_when(&a, &endpoint, "a pending retry", |d| d.first().is_some_and(|d| d["attempts"] == 1)).await;
    app.partner_books("acme", 2).await;
    let d = app
        .deliveries_when(&a, &endpoint, "both failed", |d| d.len() == 2 && statuses(d) == ["FAILED", "FAILED"])
        .await;
    assert_eq!(d[0]["lastStatusCode"], 410);
    assert!(d[1]["nextAttemptAt"].is_null(), "the pending retry was stopped: {d:?}");
    assert_eq!(app.endpoints(&a).await[0]["enabled"], false);

    // Nothing more is recorded or sent for it, and a redelivery is refused.
    let canary_receiver = Receiver::start(vec![], Reply::Status(200)).await;
    let (canary, _) = app.endpoint(&a, &canary_receiver.url(), None).await;
    app.partner_books("acme", 3).await;
    app.deliveries_when(&a, &canary, "the canary's delivery", |d| d.len() == 1).await;
    assert_eq!(app.deliveries(&a, &endpoint).await.len(), 2);
    assert_eq!(receiver.requests().len(), 2);
    let refused = app.redeliver(&a, d[0]["id"].as_str().unwrap()).await;
    assert_eq!(user_error(&refused), Some("INVALID_INPUT"), "{refused}");
}

#[tokio::test]
async fn an_endpoint_enabled_again_gets_the_events_that_follow() {
    let (app, _db) = spawn_local(&[]).await;
    let receiver = Receiver::start(vec![Reply::Status(410)], Reply::Status(200)).await;
    let (a, b) = (partner("acme"), partner("other"));
    let (endpoint, _) = app.endpoint(&a, &receiver.url(), None).await;
    app.partner_books("acme", 1).await;
    app.deliveries_when(&a, &endpoint, "the delivery failed", |d| statuses(d) == ["FAILED"]).await;
    assert_eq!(app.endpoints(&a).await[0]["enabled"], false);

    // Another partner's id answers as an unknown one does, and changes nothing.
    let refused = app.enable(&b, &endpoint).await;
    assert_eq!(user_error(&refused), Some("INVALID_INPUT"), "{refused}");
    assert_eq!(refused["userErrors"], app.enable(&b, "999999").await["userErrors"], "no existence oracle");
    assert_eq!(refused["userErrors"], app.rotate(&b, &endpoint).await["userErrors"], "as rotateWebhookSecret");
    assert_eq!(user_error(&app.enable(&a, "x").await), Some("INVALID_INPUT"));
    assert_eq!(app.endpoints(&a).await[0]["enabled"], false);

    // Its owner enables it, twice: the second answers the same and changes nothing.
    for _ in 0..2 {
        let enabled = app.enable(&a, &endpoint).await;
        assert_eq!(enabled["userErrors"], json!([]), "{enabled}");
        assert_eq!(enabled["endpoint"]["id"], endpoint.as_str());
        assert_eq!(enabled["endpoint"]["enabled"], true);
        assert_eq!(enabled["endpoint"]["url"], receiver.url());
        assert!(enabled["secret"].is_null(), "{enabled}");
    }
    assert_eq!(app.endpoints(&a).await[0]["enabled"], true);

    // The next booking's event reaches it.
    let next = app.partner_books("acme", 2).await;
    let got = receiver.wait_for(2).await;
    assert_eq!(got[1].json()["data"]["appointment"]["id"], next.as_str());
    let d = app.deliveries_when(&a, &endpoint, "the new delivery", |d| statuses(d) == ["SUCCEEDED", "FAILED"]).await;
    assert_eq!(d[0]["attempts"], 1);
    // An admin may enable any endpoint (it is enabled already: answered as it is).
    assert_eq!(app.enable(&admin(), &endpoint).await["endpoint"]["enabled"], true);
}

#[tokio::test]
async fn redirects_are_not_followed() {
    let (app, _db) = spawn_local(&[("WEBHOOK_RETRY_SCHEDULE", "1h")]).await;
    let receiver = Receiver::start(vec![Reply::Redirect("/elsewhere")], Reply::Status(200)).await;
    let (endpoint, _) = app.endpoint(&partner("acme"), &receiver.url(), None).await;
    app.partner_books("acme", 1).await;
    let d = app
        .deliveries_when(&partner("acme"), &endpoint, "one attempt", |d| d.first().is_some_and(|d| d["attempts"] == 1))
        .await;
    assert_eq!((d[0]["status"].clone(), d[0]["lastStatusCode"].clone()), (json!("PENDING"), json!(302)));
    assert!(d[0]["nextAttemptAt"].is_string());
    assert!(receiver.requests().iter().all(|r| r.path == "/hook"), "{:?}", receiver.requests());
}

#[tokio::test]
async fn a_slow_answer_times_out_and_is_retried() {
    let (app, _db) = spawn_local(&[("WEBHOOK_TIMEOUT_MS", "1000")]).await;
    let receiver = Receiver::start(vec![Reply::Slow(Duration::from_secs(5), 200)], Reply::Status(200)).await;
    let (endpoint, _) = app.endpoint(&partner("acme"), &receiver.url(), None).await;
    app.partner_books("acme", 1).await;
    let d = app
        .deliveries_when(&partner("acme"), &endpoint, "success", |d| {
            d.first().is_some_and(|d| d["status"] == "SUCCEEDED")
        })
        .await;
    assert_eq!(d[0]["attempts"], 2, "the slow attempt counted as a failure");
    let requests = receiver.requests();
    assert_eq!(requests.len(), 2);
    // The schedule's wait (1 s) runs from the attempt's end, after its 1 s timeout.
    let gap = requests[1].at - requests[0].at;
    assert!(gap >= Duration::from_millis(1900), "the retry came {gap:?} after the first attempt");
}

#[tokio::test]
async fn a_redelivery_sends_the_same_event_again() {
    let (app, _db) = spawn_local(&[]).await;
    let receiver = Receiver::start(vec![], Reply::Status(200)).await;
    let a = partner("acme");
    let (endpoint, _) = app.endpoint(&a, &receiver.url(), None).await;
    app.partner_books("acme", 1).await;
    let d =
        app.deliveries_when(&a, &endpoint, "success", |d| d.first().is_some_and(|d| d["status"] == "SUCCEEDED")).await;
    let again = app.redeliver(&a, d[0]["id"].as_str().unwrap()).await;
    assert_eq!(again["userErrors"], json!([]));
    assert_eq!(again["delivery"]["eventId"], d[0]["eventId"]);
    let got = receiver.wait_for(2).await;
    assert_eq!(got[1].header("webhook-id"), got[0].header("webhook-id"));
    assert_eq!(got[1].body, got[0].body);
    let d = app
        .deliveries_when(&a, &endpoint, "success again", |d| d[0]["status"] == "SUCCEEDED" && d[0]["attempts"] == 2)
        .await;
    assert_eq!(d.len(), 1, "a redelivery is the same delivery");
    // Malformed and unknown ids.
    assert_eq!(user_error(&app.redeliver(&a, "x").await), Some("INVALID_INPUT"));
    assert_eq!(user_error(&app.redeliver(&a, "999999").await), Some("INVALID_INPUT"));
}

/// The relay waits this long after a commit woke it, so that the changes the tests make right
/// after an event are committed before the event's deliveries are recorded (as under load,
/// when the relay runs seconds behind).
const LATE_RELAY: (&str, &str) = ("OUTBOX_GATHER_MS", "1500");

#[tokio::test]
async fn an_event_says_what_it_did_even_when_a_later_change_committed_first() {
    let (app, _db) = spawn_local(&[LATE_RELAY, ("RATE_LIMIT_BOOKINGS", "0")]).await;
    let receiver = Receiver::start(vec![], Reply::Status(204)).await;
    let a = partner("acme");
    let (endpoint, _) = app.endpoint(&a, &receiver.url(), None).await;
    let (_, slot) = app.doctor_with_slot(2).await;

    // Booked, then cancelled a moment later: both commit before the relay drains either.
    let booked = app.book(&a, &slot, "k1", Some("77")).await;
    let id = booked["appointment"]["id"].as_str().unwrap().to_owned();
    app.cancel(&a, &id).await;
    // Held, then confirmed.
    let hold = "mutation($s:ID!){holdSlot(input:{slotId:$s,idempotencyKey:\"k2\",patientId:\"78\"})\
        {appointment{id expiresAt} userErrors{code}}}";
    let held = app.gql(Some(&a), hold, json!({ "s": slot })).await["holdSlot"].clone();
    let held_id = held["appointment"]["id"].as_str().unwrap().to_owned();
    let confirm = "mutation($i:ID!){confirmAppointment(id:$i){confirmed}}";
    assert_eq!(app.gql(Some(&a), confirm, json!({ "i": held_id })).await["confirmAppointment"]["confirmed"], true);

    let got = receiver.wait_for(4).await;
    let body_of = |kind: &str| {
        got.iter().map(Received::json).find(|b| b["type"] == kind).unwrap_or_else(|| panic!("no {kind} in {got:?}"))
    };
    let booked = &body_of("appointment.booked")["data"]["appointment"];
    assert_eq!((booked["id"].as_str(), booked["status"].as_str()), (Some(id.as_str()), Some("BOOKED")), "{booked}");
    assert!(booked["cancelledAt"].is_null() && booked["cancelledBy"].is_null(), "{booked}");
    let cancelled = &body_of("appointment.cancelled")["data"]["appointment"];
    assert_eq!((cancelled["status"].as_str(), cancelled["cancelledBy"].as_str()), (Some("CANCELLED"), Some("PARTNER")));
    let held_body = &body_of("appointment.held")["data"]["appointment"];
    assert_eq!(held_body["status"], "HELD", "{held_body}");
    assert_eq!(
        chrono::DateTime::parse_from_rfc3339(held_body["expiresAt"].as_str().unwrap()).unwrap(),
        chrono::DateTime::parse_from_rfc3339(held["appointment"]["expiresAt"].as_str().unwrap()).unwrap(),
    );
    let confirmed = &body_of("appointment.confirmed")["data"]["appointment"];
    assert_eq!((confirmed["status"].as_str(), confirmed["expiresAt"].as_str()), (Some("BOOKED"), None));

    // A redelivery, after all of that, sends the event's own bytes again.
    let deliveries = app.deliveries_when(&a, &endpoint, "four sent", |d| statuses(d) == ["SUCCEEDED"; 4]).await;
    let first = deliveries.iter().find(|d| d["eventType"] == "APPOINTMENT_BOOKED").unwrap();
    app.redeliver(&a, first["id"].as_str().unwrap()).await;
    let again = receiver.wait_for(5).await;
    let original = got.iter().find(|r| r.header("webhook-id") == first["eventId"].as_str().unwrap()).unwrap();
    assert_eq!(again[4].header("webhook-id"), original.header("webhook-id"));
    assert_eq!(again[4].body, original.body);
}

#[tokio::test]
async fn a_rotation_signs_with_both_secrets() {
    let Some(python) = verifier() else { return };
    let (app, _db) = spawn_local(&[]).await;
    let receiver = Receiver::start(vec![], Reply::Status(200)).await;
    let a = partner("acme");
    let (endpoint, old) = app.endpoint(&a, &receiver.url(), None).await;
    let rotated = app.rotate(&a, &endpoint).await;
    assert_eq!(rotated["userErrors"], json!([]));
    let new = rotated["secret"].as_str().unwrap().to_owned();
    assert!(new.starts_with("whsec_") && new != old);
    app.partner_books("acme", 1).await;
    let got = receiver.wait_for(1).await;
    let r = &got[0];
    assert_eq!(r.header("webhook-signature").split(' ').count(), 2, "{}", r.header("webhook-signature"));
    let stranger = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let results = verify(&python, &[(r, &new), (r, &old), (r, stranger)]);
    assert_eq!(&results[..2], ["ok", "ok"]);
    assert_ne!(results[2], "ok");
}

// ---------------------------------------------------------------------------------------------
// Who gets what

#[tokio::test]
async fn partners_get_and_manage_only_their_own_and_admins_get_everything() {
    let (app, _db) = spawn_local(&[]).await;
    let (ra, rb, radmin) = (
        Receiver::start(vec![], Reply::Status(200)).await,
        Receiver::start(vec![], Reply::Status(200)).await,
        Receiver::start(vec![], Reply::Status(200)).await,
    );
    let (a, b) = (partner("a"), partner("b"));
    let (ea, _) = app.endpoint(&a, &ra.url(), None).await;
    let (eb, _) = app.endpoint(&b, &rb.url(), None).await;
    let (eadmin, _) = app.endpoint(&admin(), &radmin.url(), None).await;

    let by_b = app.partner_books("b", 2).await;
    let (_, slot) = app.doctor_with_slot(1).await;
    let by_patient = app.book(&patient(9), &slot, "k", None).await["appointment"]["id"].as_str().unwrap().to_owned();
    let by_a = app.partner_books("a", 1).await;

    let admin_got = radmin.wait_for(3).await;
    let ids: Vec<Value> = admin_got.iter().map(|r| r.json()["data"]["appointment"]["id"].clone()).collect();
    for id in [&by_a, &by_b, &by_patient] {
        assert!(ids.contains(&json!(id)), "admin endpoint missed {id}: {ids:?}");
    }
    // A's event came after B's, so once A has it, B's would have arrived too.
    let a_got = ra.wait_for(1).await;
    assert_eq!(rb.wait_for(1).await[0].json()["data"]["appointment"]["id"], by_b.as_str());
    assert_eq!(a_got.len(), 1);
    assert_eq!(a_got[0].json()["data"]["appointment"]["id"], by_a.as_str());
    assert_eq!(rb.requests().len(), 1);

    // B sees only its own endpoint; A's ids answer as unknown.
    let b_sees: Vec<Value> = app.endpoints(&b).await.iter().map(|e| e["id"].clone()).collect();
    assert_eq!(b_sees, [json!(eb)]);
    assert!(app.deliveries(&b, &ea).await.is_empty());
    let a_delivery = app.deliveries(&a, &ea).await[0]["id"].as_str().unwrap().to_owned();
    for refused in [app.delete_endpoint(&b, &ea).await, app.rotate(&b, &ea).await, app.redeliver(&b, &a_delivery).await]
    {
        assert_eq!(user_error(&refused), Some("INVALID_INPUT"), "{refused}");
    }
    let unknown = app.delete_endpoint(&b, "999999").await;
    assert_eq!(unknown["userErrors"], app.delete_endpoint(&b, &ea).await["userErrors"], "no existence oracle");
    assert_eq!(app.endpoints(&a).await.len(), 1, "still there");
    // An admin sees and manages every endpoint.
    assert_eq!(app.endpoints(&admin()).await.len(), 3);
    assert_eq!(app.deliveries(&admin(), &ea).await.len(), 1);
    assert_eq!(app.deliveries(&admin(), &eadmin).await.len(), 3);
    // Deleting is for good.
    let deleted = app.delete_endpoint(&a, &ea).await;
    assert_eq!((deleted["deleted"].clone(), deleted["userErrors"].clone()), (json!(true), json!([])));
    assert_eq!(user_error(&app.delete_endpoint(&a, &ea).await), Some("INVALID_INPUT"));
    assert!(app.endpoints(&a).await.is_empty());
}

#[tokio::test]
async fn an_event_filter_lets_only_its_types_through() {
    let (app, _db) = spawn_local(&[]).await;
    let receiver = Receiver::start(vec![], Reply::Status(200)).await;
    let a = partner("acme");
    let created = app.create_endpoint(&a, &receiver.url(), Some(json!(["APPOINTMENT_CANCELLED"]))).await;
    assert_eq!(created["endpoint"]["events"], json!(["APPOINTMENT_CANCELLED"]));
    let endpoint = created["endpoint"]["id"].as_str().unwrap().to_owned();
    let unfiltered = Receiver::start(vec![], Reply::Status(200)).await;
    let (all, _) = app.endpoint(&a, &unfiltered.url(), Some(json!([]))).await;
    let id = app.partner_books("acme", 1).await;
    app.cancel(&a, &id).await;
    let got = receiver.wait_for(1).await;
    app.deliveries_when(&a, &all, "both events at the unfiltered endpoint", |d| d.len() == 2).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].json()["type"], "appointment.cancelled");
    let d = app.deliveries(&a, &endpoint).await;
    assert_eq!(d.len(), 1);
    assert_eq!(d[0]["eventType"], "APPOINTMENT_CANCELLED");
}

#[tokio::test]
async fn nothing_is_sent_for_a_change_that_rolled_back() {
    let (app, _db) = spawn_local(&[]).await;
    let receiver = Receiver::start(vec![], Reply::Status(200)).await;
    let a = partner("acme");
    let (endpoint, _) = app.endpoint(&a, &receiver.url(), None).await;
    let (_, slot) = app.doctor_with_slot(2).await;
    let first = app.book(&a, &slot, "k1", Some("5")).await;
    let id = first["appointment"]["id"].as_str().unwrap().to_owned();
    // The same patient again with another key: the seat is taken, then the insert is refused
    // and the whole transaction rolls back.
    assert_eq!(user_error(&app.book(&a, &slot, "k2", Some("5")).await), Some("ALREADY_BOOKED"));
    app.cancel(&a, &id).await;
    let d = app.deliveries_when(&a, &endpoint, "the cancel's delivery", |d| d.len() >= 2).await;
    let types: Vec<&str> = d.iter().map(|d| d["eventType"].as_str().unwrap()).collect();
    assert_eq!(types, ["APPOINTMENT_CANCELLED", "APPOINTMENT_BOOKED"]);
    let got = receiver.wait_for(2).await;
    assert!(got.iter().all(|r| r.json()["data"]["appointment"]["id"] == id.as_str()));
}

#[tokio::test]
async fn only_partners_and_admins_manage_endpoints() {
    let (app, _db) = spawn_local(&[]).await;
    let url = "https://hooks.example.invalid/x";
    let create = json!({ "u": url });
    let queries: [(&str, Value); 7] = [
        (CREATE, create),
        ("mutation{deleteWebhookEndpoint(id:\"1\"){deleted}}", json!({})),
        ("mutation{rotateWebhookSecret(id:\"1\"){secret}}", json!({})),
        ("mutation{enableWebhookEndpoint(id:\"1\"){secret}}", json!({})),
        ("mutation{redeliverWebhook(deliveryId:\"1\"){delivery{id}}}", json!({})),
        ("{webhookEndpoints{id}}", json!({})),
        ("{webhookDeliveries(endpointId:\"1\"){nodes{id}}}", json!({})),
    ];
    for (q, vars) in &queries {
        assert_eq!(app.error_code(None, q, vars.clone()).await, "UNAUTHENTICATED", "{q}");
        assert_eq!(app.error_code(Some(&patient(1)), q, vars.clone()).await, "FORBIDDEN", "{q}");
        assert_eq!(app.error_code(Some(&doctor("1")), q, vars.clone()).await, "FORBIDDEN", "{q}");
    }
    // Partners and admins may, and malformed arguments of the queries are INVALID_INPUT.
    app.endpoint(&admin(), url, None).await;
    let (endpoint, _) = app.endpoint(&partner("p"), url, None).await;
    let page = |first: i32| json!({ "e": endpoint, "f": first });
    let q = "query($e:ID!,$f:Int){webhookDeliveries(endpointId:$e,first:$f){nodes{id}}}";
    for bad in [page(-1), page(101), json!({ "e": "abc" })] {
        assert_eq!(app.error_code(Some(&partner("p")), q, bad.clone()).await, "INVALID_INPUT", "{bad}");
    }
    let bad_cursor = "{webhookDeliveries(endpointId:\"1\",after:\"nope\"){nodes{id}}}";
    assert_eq!(app.error_code(Some(&partner("p")), bad_cursor, json!({})).await, "INVALID_INPUT");
}

#[tokio::test]
async fn deliveries_page_newest_first() {
    let (app, _db) = spawn_local(&[]).await;
    let receiver = Receiver::start(vec![], Reply::Status(200)).await;
    let a = partner("acme");
    let (endpoint, _) = app.endpoint(&a, &receiver.url(), None).await;
    for p in 1..=3 {
        app.partner_books("acme", p).await;
    }
    let all = app.deliveries_when(&a, &endpoint, "three deliveries", |d| d.len() == 3).await;
    let ids: Vec<i64> = all.iter().map(|d| d["id"].as_str().unwrap().parse().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "newest first: {ids:?}");
    let q = "query($e:ID!,$f:Int,$a:String){webhookDeliveries(endpointId:$e,first:$f,after:$a)\
             {pageInfo{hasNextPage hasPreviousPage} edges{cursor node{id}} nodes{id}}}";
    let first = app.gql(Some(&a), q, json!({ "e": endpoint, "f": 2 })).await["webhookDeliveries"].clone();
    assert_eq!(first["pageInfo"], json!({ "hasNextPage": true, "hasPreviousPage": false }));
    assert_eq!(first["nodes"], json!([{ "id": all[0]["id"] }, { "id": all[1]["id"] }]));
    let cursor = first["edges"][1]["cursor"].clone();
    let rest = app.gql(Some(&a), q, json!({ "e": endpoint, "f": 2, "a": cursor })).await["webhookDeliveries"].clone();
    assert_eq!(rest["pageInfo"], json!({ "hasNextPage": false, "hasPreviousPage": true }));
    assert_eq!(rest["nodes"], json!([{ "id": all[2]["id"] }]));
    let none = app.gql(Some(&a), q, json!({ "e": endpoint, "f": 0 })).await["webhookDeliveries"].clone();
    assert_eq!((none["nodes"].clone(), none["pageInfo"]["hasNextPage"].clone()), (json!([]), json!(true)));
}

// ---------------------------------------------------------------------------------------------
// Restarts

/// A port nothing listens on (yet).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[tokio::test]
async fn a_restart_loses_no_delivery() {
    let database = TestDatabase::new().await;
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/hook");
    // Waits long enough that this server stops before its retries run out.
    let first = TestApp::spawn_on(&database, &[LOCAL, &[("WEBHOOK_RETRY_SCHEDULE", "3s,3s")]].concat()).await;
    let a = partner("acme");
    let (endpoint, _) = first.endpoint(&a, &url, None).await;
    first.partner_books("acme", 1).await;
    // Nobody listens yet: the first attempt fails and a retry waits.
    let d = first
        .deliveries_when(&a, &endpoint, "a failed attempt", |d| {
            d.first().is_some_and(|d| d["attempts"].as_i64() >= Some(1))
        })
        .await;
    assert_eq!(d[0]["status"], "PENDING");
    assert!(d[0]["lastStatusCode"].is_null());
    first.stop().await;

    let receiver = Receiver::start_on(port, vec![], Reply::Status(200)).await;
    let second = TestApp::spawn_on(&database, LOCAL).await;
    let d = second
        .deliveries_when(&a, &endpoint, "success after the restart", |d| {
            d.first().is_some_and(|d| d["status"] == "SUCCEEDED")
        })
        .await;
    let got = receiver.wait_for(1).await;
    assert_eq!(got.len(), 1, "delivered once");
    assert_eq!(got[0].header("webhook-id"), d[0]["eventId"].as_str().unwrap());
}

#[tokio::test]
async fn an_attempt_under_way_at_a_stop_is_sent_again_after_it() {
    let database = TestDatabase::new().await;
    // The first request is not answered before the server stops (it waits longer than the
    // stop's grace, well within the timeout); later ones are.
    let receiver = Receiver::start(vec![Reply::Slow(Duration::from_secs(20), 200)], Reply::Status(200)).await;
    let first = TestApp::spawn_on(&database, &[LOCAL, &[("WEBHOOK_TIMEOUT_MS", "60000")]].concat()).await;
    let a = partner("acme");
    let (endpoint, _) = first.endpoint(&a, &receiver.url(), None).await;
    first.partner_books("acme", 1).await;
    receiver.wait_for(1).await;
    first.stop().await;

    let second = TestApp::spawn_on(&database, LOCAL).await;
    let d = second
        .deliveries_when(&a, &endpoint, "success after the restart", |d| {
            d.first().is_some_and(|d| d["status"] == "SUCCEEDED")
        })
        .await;
    let got = receiver.wait_for(2).await;
    assert_eq!(got[1].header("webhook-id"), got[0].header("webhook-id"), "at least once, same id");
    assert_eq!(d[0]["eventId"].as_str().unwrap(), got[1].header("webhook-id"));
}

// ---------------------------------------------------------------------------------------------
// The SSRF rule

#[tokio::test]
async fn urls_reaching_non_public_addresses_are_refused() {
    // No allow-list: the production default.
    let (app, _db) = TestApp::spawn().await;
    let a = partner("acme");
    for url in [
        "https://127.0.0.1/hook",
        "https://127.0.0.1:8443/hook",
        "https://localhost/hook",
        "https://localhost./hook",
        "https://10.1.2.3/hook",
        "https://192.168.0.10/hook",
        "https://172.16.5.4/hook",
        "https://169.254.169.254/latest/meta-data/",
        "https://100.64.1.1/hook",
        "https://0.0.0.0/hook",
        "https://[::1]/hook",
        "https://[::ffff:127.0.0.1]/hook",
        "https://[fd00::1]/hook",
        "https://[fe80::1]/hook",
        "https://224.0.0.1/hook",
        "https://2130706433/hook",
        "ftp://example.com/hook",
        "file:///etc/passwd",
        "http://example.com/hook",
        "http://93.184.215.14/hook",
        "https://user:secret@example.com/hook",
        "not a url",
    ] {
        let p = app.create_endpoint(&a, url, None).await;
        assert_eq!(p["endpoint"], Value::Null, "{url}: {p}");
        assert_eq!(p["secret"], Value::Null);
        assert_eq!(p["userErrors"][0]["code"], "INVALID_INPUT", "{url}: {p}");
        assert_eq!(p["userErrors"][0]["field"], json!(["input", "url"]));
    }
    assert!(app.endpoints(&a).await.is_empty());

    // A name that does not resolve is accepted, and fails at delivery.
    let (endpoint, _) = app.endpoint(&a, "https://hooks.example.invalid/x", None).await;
    app.partner_books("acme", 1).await;
    let d = app
        .deliveries_when(&a, &endpoint, "a failed attempt", |d| {
            d.first().is_some_and(|d| d["attempts"].as_i64() >= Some(1))
        })
        .await;
    assert_eq!(d[0]["status"], "PENDING");
    assert!(d[0]["lastStatusCode"].is_null());
}

#[tokio::test]
async fn the_allow_list_opens_only_its_networks() {
    let (app, _db) = spawn_local(&[]).await;
    let a = partner("acme");
    assert!(app.create_endpoint(&a, "http://127.0.0.1:9/hook", None).await["endpoint"].is_object());
    assert!(app.create_endpoint(&a, "https://127.0.0.2:9/hook", None).await["endpoint"].is_object());
    for url in
        ["https://10.0.0.1/hook", "http://[::1]:9/hook", "http://localhost:9/hook", "http://hooks.example.invalid/"]
    {
        assert_eq!(user_error(&app.create_endpoint(&a, url, None).await), Some("INVALID_INPUT"), "{url}");
    }
}

#[tokio::test]
async fn addresses_are_checked_again_at_every_connection() {
    let database = TestDatabase::new().await;
    let receiver = Receiver::start(vec![], Reply::Status(200)).await;
    let allowed =
        TestApp::spawn_on(&database, &[LOCAL, &[("WEBHOOK_ALLOW_CIDRS", "127.0.0.0/8,::1/128")]].concat()).await;
    let a = partner("acme");
    let (literal, _) = allowed.endpoint(&a, &receiver.url(), None).await;
    let (named, _) = allowed.endpoint(&a, &format!("http://localhost:{}/hook", receiver.port), None).await;
    allowed.stop().await;
    // The same endpoints, on a server whose allow-list no longer holds their addresses.
    let strict = TestApp::spawn_on(&database, &[("WEBHOOK_RETRY_SCHEDULE", "1h")]).await;
    strict.partner_books("acme", 1).await;
    for endpoint in [&literal, &named] {
        let d = strict
            .deliveries_when(&a, endpoint, "a refused attempt", |d| d.first().is_some_and(|d| d["attempts"] == 1))
            .await;
        assert_eq!(d[0]["status"], "PENDING");
        assert!(d[0]["lastStatusCode"].is_null());
    }
    assert!(receiver.requests().is_empty(), "nothing reached the refused address");
}
