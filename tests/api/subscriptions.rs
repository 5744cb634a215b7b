//! Live availability over WebSocket: snapshot then changes, across instances through Redis,
//! through a Redis restart, and the graphql-ws protocol's rules (close codes, cap, legacy).
//!
//! Every wait is bounded by [`WAIT`], so a missing event fails the test instead of hanging.

use std::{collections::HashMap, time::Duration};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::{
    tungstenite::{client::IntoClientRequest, Message},
    MaybeTlsStream, WebSocketStream,
};

use crate::helpers::*;

/// Longest wait for any one message.
const WAIT: Duration = Duration::from_secs(15);

const SUBSCRIBE: &str = "subscription($d:ID!,$date:Date){slotAvailability(doctorId:$d,date:$date)\
    {slotId doctorId startAt capacity bookedCount available version}}";

const MODERN: &str = "graphql-transport-ws";
const LEGACY: &str = "graphql-ws";

/// What a test client can receive.
#[derive(Debug)]
enum Received {
    Json(Value),
    Closed(Option<u16>),
}

/// A GraphQL-over-WebSocket client, speaking either protocol.
struct Ws {
    stream: WebSocketStream<MaybeTlsStream<TcpStream>>,
    protocol: &'static str,
}

impl Ws {
    async fn connect(app: &TestApp, protocol: &'static str) -> Self {
        Self::connect_with(app, protocol, None).await
    }

    /// Connects with `authorization` as the handshake's `Authorization` header, when given.
    async fn connect_with(app: &TestApp, protocol: &'static str, authorization: Option<&str>) -> Self {
        let mut req = format!("ws://127.0.0.1:{}/graphql/ws", app.port).into_client_request().expect("request");
        req.headers_mut().insert("Sec-WebSocket-Protocol", protocol.parse().expect("header"));
        if let Some(value) = authorization {
            req.headers_mut().insert("Authorization", value.parse().expect("header"));
        }
        let (stream, resp) = tokio_tungstenite::connect_async(req).await.expect("websocket connects");
        let chosen = resp.headers().get("sec-websocket-protocol").and_then(|v| v.to_str().ok());
        assert_eq!(chosen, Some(protocol), "negotiated sub-protocol");
        Self { stream, protocol }
    }

    /// Connects and completes `connection_init` (with a token when given).
    async fn ready(app: &TestApp, protocol: &'static str, token: Option<&str>) -> Self {
        let mut ws = Self::connect(app, protocol).await;
        ws.init(token).await;
        let ack = ws.json().await;
        assert_eq!(ack["type"], "connection_ack", "{ack}");
        ws
    }

    async fn send(&mut self, value: Value) {
        self.send_text(&value.to_string()).await;
    }

    async fn send_text(&mut self, text: &str) {
        self.stream.send(Message::text(text)).await.expect("sent");
    }

    async fn init(&mut self, token: Option<&str>) {
        let payload = token.map_or(json!({}), |t| json!({ "Authorization": format!("Bearer {t}") }));
        self.send(json!({ "type": "connection_init", "payload": payload })).await;
    }

    async fn subscribe(&mut self, id: &str, doctor: &str, date: Option<&str>) {
        self.subscribe_with(id, SUBSCRIBE, json!({ "d": doctor, "date": date })).await;
    }

    async fn subscribe_with(&mut self, id: &str, query: &str, variables: Value) {
        let kind = if self.protocol == LEGACY { "start" } else { "subscribe" };
        self.send(json!({ "type": kind, "id": id, "payload": { "query": query, "variables": variables } })).await;
    }

    /// The `data` of the next result of operation `id`.
    async fn data(&mut self, id: &str) -> Value {
        let msg = self.json().await;
        assert_eq!(msg["id"], id, "{msg}");
        assert!(msg["payload"].get("errors").is_none() && msg["payload"]["data"].is_object(), "{msg}");
        msg["payload"]["data"].clone()
    }

    async fn complete(&mut self, id: &str) {
        let kind = if self.protocol == LEGACY { "stop" } else { "complete" };
        self.send(json!({ "type": kind, "id": id })).await;
    }

    async fn receive(&mut self) -> Received {
        loop {
            let msg = tokio::time::timeout(WAIT, self.stream.next()).await.expect("a message in time");
            match msg {
                Some(Ok(Message::Text(t))) => return Received::Json(serde_json::from_str(&t).expect("JSON")),
                Some(Ok(Message::Close(frame))) => return Received::Closed(frame.map(|f| u16::from(f.code))),
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => return Received::Closed(None),
            }
        }
    }

    async fn json(&mut self) -> Value {
        match self.receive().await {
            Received::Json(v) => v,
            other => panic!("expected a message, got {other:?}"),
        }
    }

    /// The next `slotAvailability` event of operation `id`.
    async fn event(&mut self, id: &str) -> Value {
        let msg = self.json().await;
        let kind = if self.protocol == LEGACY { "data" } else { "next" };
        assert_eq!((msg["type"].as_str(), msg["id"].as_str()), (Some(kind), Some(id)), "{msg}");
        assert!(msg["payload"].get("errors").is_none(), "{msg}");
        msg["payload"]["data"]["slotAvailability"].clone()
    }

    async fn events(&mut self, id: &str, n: usize) -> Vec<Value> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.event(id).await);
        }
        out
    }

    /// The close code the server ends the connection with.
    async fn close_code(&mut self) -> Option<u16> {
        loop {
            match self.receive().await {
                Received::Closed(code) => return code,
                Received::Json(_) => continue,
            }
        }
    }
}

/// (slot id, version, bookedCount) of an event.
fn key(e: &Value) -> (String, i64, i64) {
    (
        e["slotId"].as_str().expect("slotId").to_owned(),
        e["version"].as_i64().expect("version"),
        e["bookedCount"].as_i64().expect("bookedCount"),
    )
}

fn appointment_id(payload: &Value) -> String {
    payload["appointment"]["id"].as_str().unwrap_or_else(|| panic!("no appointment in {payload}")).to_owned()
}

#[tokio::test]
async fn snapshot_first_then_each_committed_change() {
    let (app, _db) = TestApp::spawn().await;
    let doctor = app.create_doctor("UTC").await;
    let slots = app.publish(&doctor, &tomorrow(), "09:00", "09:30", 15, 2).await;
    let mut ws = Ws::ready(&app, MODERN, None).await;
    ws.subscribe("1", &doctor, Some(&tomorrow())).await;

    let snapshot = ws.events("1", 2).await;
    let ids: Vec<_> = snapshot.iter().map(|e| e["slotId"].as_str().unwrap().to_owned()).collect();
    assert_eq!(ids, slots, "the snapshot holds every slot of the day, by start");
    for e in &snapshot {
        assert_eq!((e["doctorId"].as_str(), e["version"].as_i64()), (Some(doctor.as_str()), Some(0)));
        assert_eq!(
            (e["capacity"].as_i64(), e["bookedCount"].as_i64(), e["available"].as_i64()),
            (Some(2), Some(0), Some(2))
        );
    }

    let booked = app.book(&patient(5), &slots[1], "k1", None).await;
    let e = ws.event("1").await;
    assert_eq!(key(&e), (slots[1].clone(), 1, 1));
    assert_eq!(e["available"], 1);
    app.cancel(&patient(5), &appointment_id(&booked)).await;
    assert_eq!(key(&ws.event("1").await), (slots[1].clone(), 2, 0));
}

#[tokio::test]
async fn refused_bookings_send_nothing() {
    let (app, _db) = TestApp::spawn().await;
    let (doctor, slot) = app.doctor_with_slot(1).await;
    let mut ws = Ws::ready(&app, MODERN, Some(&patient(9))).await;
    ws.subscribe("s", &doctor, Some(&tomorrow())).await;
    assert_eq!(key(&ws.event("s").await), (slot.clone(), 0, 0));

    let booked = app.book(&patient(1), &slot, "a", None).await;
    assert_eq!(key(&ws.event("s").await), (slot.clone(), 1, 1));
    assert_eq!(user_error(&app.book(&patient(1), &slot, "b", None).await), Some("ALREADY_BOOKED"));
    assert_eq!(user_error(&app.book(&patient(2), &slot, "c", None).await), Some("SLOT_FULL"));
    app.cancel(&patient(1), &appointment_id(&booked)).await;
    // Exactly versions 1 then 2: the refusals in between produced no event.
    assert_eq!(key(&ws.event("s").await), (slot.clone(), 2, 0));
}

#[tokio::test]
async fn versions_strictly_increase_per_slot_under_concurrent_changes() {
    let (app, _db) = TestApp::spawn().await;
    let (doctor, slot) = app.doctor_with_slot(4).await;
    let mut ws = Ws::ready(&app, MODERN, None).await;
    ws.subscribe("v", &doctor, None).await;
    assert_eq!(key(&ws.event("v").await), (slot.clone(), 0, 0));

    let app = std::sync::Arc::new(app);
    let mut tasks = Vec::new();
    for p in 1..=8u64 {
        let (app, slot) = (app.clone(), slot.clone());
        tasks.push(tokio::spawn(async move {
            let booked = app.book(&patient(p), &slot, &format!("k{p}"), None).await;
            if booked["appointment"].is_object() {
                app.cancel(&patient(p), &appointment_id(&booked)).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let last = app.slot(&slot).await["version"].as_i64().expect("version");
    assert!(last >= 2, "some bookings went through");
    // Coalescing may skip versions, never repeat or reorder them; the last one always arrives.
    let mut seen = 0;
    while seen < last {
        let (id, version, booked) = key(&ws.event("v").await);
        assert_eq!(id, slot);
        assert!(version > seen, "version {version} after {seen}");
        assert!((0..=4).contains(&booked));
        seen = version;
    }
    assert_eq!(app.slot(&slot).await["bookedCount"], 0);
}

#[tokio::test]
async fn filters_by_doctor_and_by_day_in_the_doctors_zone() {
    let (app, _db) = TestApp::spawn().await;
    let doctor = app.create_doctor("Pacific/Auckland").await;
    let day = tomorrow();
    let next_day = (chrono::Utc::now().date_naive() + chrono::Days::new(2)).format("%Y-%m-%d").to_string();
    // Both slots fall on the same UTC day (Auckland is 12 or 13 hours ahead): only the doctor's
    // zone tells the two days apart.
    let today_slots = app.publish(&doctor, &day, "23:00", "23:30", 30, 1).await;
    let other_day = app.publish(&doctor, &next_day, "00:00", "00:30", 30, 1).await;
    let (other_doctor, other_slot) = app.doctor_with_slot(1).await;
    assert_ne!(other_doctor, doctor);

    let mut ws = Ws::ready(&app, MODERN, None).await;
    ws.subscribe("d", &doctor, Some(&day)).await;
    assert_eq!(key(&ws.event("d").await).0, today_slots[0], "only that local day's slot");

    app.book(&patient(1), &other_day[0], "x", None).await;
    app.book(&patient(2), &other_slot, "y", None).await;
    app.book(&patient(3), &today_slots[0], "z", None).await;
    assert_eq!(key(&ws.event("d").await), (today_slots[0].clone(), 1, 1), "other days and doctors filtered out");
}

#[tokio::test]
async fn unknown_or_malformed_doctor_is_a_clear_error() {
    let (app, _db) = TestApp::spawn().await;
    let mut ws = Ws::ready(&app, MODERN, None).await;
    for (id, doctor) in [("a", "999999"), ("b", "not-a-number")] {
        ws.subscribe(id, doctor, None).await;
        let msg = ws.json().await;
        assert_eq!(msg["id"], id, "{msg}");
        assert_eq!(msg["payload"]["errors"][0]["extensions"]["code"], "INVALID_INPUT", "{msg}");
        let done = ws.json().await;
        assert_eq!((done["type"].as_str(), done["id"].as_str()), (Some("complete"), Some(id)));
    }
}

#[tokio::test]
async fn request_errors_carry_their_code_as_over_http() {
    let (app, _db) = TestApp::spawn().await;
    let (doctor, _slot) = app.doctor_with_slot(1).await;
    let mut ws = Ws::ready(&app, MODERN, None).await;
    let by_date = "subscription($d: ID!, $t: Date) { slotAvailability(doctorId: $d, date: $t) { slotId } }";
    let cases = [
        ("date", by_date, json!({ "d": doctor, "t": "2030/01/01" })),
        ("field", "subscription { slotAvailability(doctorId: \"1\") { noSuchField } }", json!({})),
        ("parse", "subscription { slotAvailability(", json!({})),
    ];
    for (id, query, variables) in cases {
        ws.subscribe_with(id, query, variables).await;
        let msg = ws.json().await;
        assert_eq!(msg["id"], id, "{msg}");
        // `next` with errors, or the protocol's `error` message with the errors as its payload.
        let first = if msg["payload"].is_array() { &msg["payload"][0] } else { &msg["payload"]["errors"][0] };
        assert_eq!(first["extensions"]["code"], "BAD_REQUEST", "{msg}");
        if msg["type"] == "next" {
            let done = ws.json().await;
            assert_eq!((done["type"].as_str(), done["id"].as_str()), (Some("complete"), Some(id)), "{done}");
        }
    }
}

#[tokio::test]
async fn a_query_answers_over_websocket_as_over_http() {
    // A failed nullable field is null and the fields keep the document's order, as over HTTP.
    let (app, _db) = TestApp::spawn().await;
    let (doctor, slot) = app.doctor_with_slot(1).await;
    let mut ws = Ws::ready(&app, MODERN, None).await;
    let query = format!(
        "{{ c: slot(id: \"{slot}\") {{ id }} b: doctor(id: \"abc\") {{ id }} a: doctor(id: \"{doctor}\") {{ id }} }}"
    );
    for round in 0..3 {
        let id = format!("q{round}");
        ws.subscribe_with(&id, &query, json!({})).await;
        let msg = ws.json().await;
        assert_eq!((msg["type"].as_str(), msg["id"].as_str()), (Some("next"), Some(id.as_str())), "{msg}");
        let data = &msg["payload"]["data"];
        assert_eq!(data, &json!({ "c": { "id": slot }, "b": null, "a": { "id": doctor } }), "{msg}");
        let keys: Vec<&String> = data.as_object().expect("object").keys().collect();
        assert_eq!(keys, ["c", "b", "a"], "{msg}");
        assert_eq!(msg["payload"]["errors"][0]["extensions"]["code"], "INVALID_INPUT", "{msg}");
        let done = ws.json().await;
        assert_eq!((done["type"].as_str(), done["id"].as_str()), (Some("complete"), Some(id.as_str())), "{done}");
    }
}

#[tokio::test]
async fn a_row_left_in_the_outbox_still_goes_out() {
    // A crashed instance may leave committed rows behind: the relay's poll publishes them.
    let (app, _db) = TestApp::spawn().await;
    let (doctor, slot) = app.doctor_with_slot(3).await;
    let mut ws = Ws::ready(&app, MODERN, None).await;
    ws.subscribe("o", &doctor, Some(&tomorrow())).await;
    assert_eq!(key(&ws.event("o").await), (slot.clone(), 0, 0));

    let slot_id: i64 = slot.parse().expect("id");
    let mut model = clinic_booking::db::slots::find(app.db.conn(), slot_id).await.expect("read").expect("slot");
    model.version = 7;
    model.booked_count = 2;
    let row = clinic_booking::db::outbox::NewRow { kind: "SLOT", appointment: None, slot: Some(&model) };
    clinic_booking::db::outbox::record_many(app.db.conn(), [row], chrono::Utc::now()).await.expect("row");
    assert_eq!(key(&ws.event("o").await), (slot, 7, 2));
}

#[tokio::test]
async fn a_booking_on_one_instance_reaches_a_subscriber_on_another() {
    if !has_redis() {
        eprintln!("note: no Redis in this run; cross-instance fan-out is not tested");
        return;
    }
    let database = TestDatabase::new().await;
    let a = TestApp::spawn_on(&database, &[]).await;
    let b = TestApp::spawn_on(&database, &[]).await;
    let (doctor, slot) = a.doctor_with_slot(2).await;
    let mut ws = Ws::ready(&b, MODERN, None).await;
    ws.subscribe("x", &doctor, Some(&tomorrow())).await;
    assert_eq!(key(&ws.event("x").await), (slot.clone(), 0, 0), "the first message is the snapshot");

    let booked = a.book(&patient(3), &slot, "k", None).await;
    assert_eq!(key(&ws.event("x").await), (slot.clone(), 1, 1));
    a.cancel(&patient(3), &appointment_id(&booked)).await;
    assert_eq!(key(&ws.event("x").await), (slot.clone(), 2, 0));
    // And the other way round, through the same Redis channel.
    b.book(&patient(4), &slot, "k", None).await;
    assert_eq!(key(&ws.event("x").await), (slot, 3, 1));
}

/// A private `redis-server` on its own port, restartable on that port.
pub(crate) struct PrivateRedis {
    port: u16,
    child: Option<std::process::Child>,
}

impl PrivateRedis {
    /// Starts one on a free port; `None` when `redis-server` is not on `PATH`.
    pub(crate) async fn start() -> Option<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
        let mut redis = Self { port, child: None };
        redis.spawn().await.then_some(redis)
    }

    /// Starts it (again) on its port; true once it accepts connections.
    pub(crate) async fn spawn(&mut self) -> bool {
        let child = std::process::Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .spawn();
        let Ok(child) = child else { return false };
        self.child = Some(child);
        // Ready when it accepts connections.
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if TcpStream::connect(("127.0.0.1", self.port)).await.is_ok() {
                return true;
            }
        }
        false
    }

    /// Its `REDIS_URL`.
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Stops it, as a crash would.
    pub(crate) fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.stop();
    }
}

#[tokio::test]
async fn an_open_subscription_resumes_after_redis_restarts() {
    let Some(mut redis) = PrivateRedis::start().await else {
        eprintln!("note: redis-server is not on PATH; the Redis restart test is skipped");
        return;
    };
    let database = TestDatabase::new().await;
    let url = redis.url();
    let app = TestApp::spawn_on(&database, &[("REDIS_URL", &url)]).await;
    let (doctor, slot) = app.doctor_with_slot(3).await;
    let mut ws = Ws::ready(&app, MODERN, None).await;
    ws.subscribe("r", &doctor, Some(&tomorrow())).await;
    assert_eq!(key(&ws.event("r").await), (slot.clone(), 0, 0));
    app.book(&patient(1), &slot, "a", None).await;
    assert_eq!(key(&ws.event("r").await), (slot.clone(), 1, 1));

    redis.stop();
    // Bookings never depend on Redis; this change waits in the outbox.
    assert!(app.book(&patient(2), &slot, "b", None).await["appointment"].is_object());
    let ready = app.client.get(format!("{}/readyz", app.address)).send().await.expect("readyz");
    assert_eq!(ready.json::<Value>().await.expect("json")["status"], "degraded");
    assert!(redis.spawn().await, "redis-server restarts on its port");

    // The same subscription, without reconnecting: first the change made while Redis was away,
    // then the next one.
    assert_eq!(key(&ws.event("r").await), (slot.clone(), 2, 2));
    app.book(&patient(3), &slot, "c", None).await;
    assert_eq!(key(&ws.event("r").await), (slot, 3, 3));
}

#[tokio::test]
async fn legacy_protocol_with_a_token_in_init() {
    let (app, _db) = TestApp::spawn().await;
    let (doctor, slot) = app.doctor_with_slot(1).await;
    let mut ws = Ws::ready(&app, LEGACY, Some(&admin())).await;
    ws.subscribe("L", &doctor, Some(&tomorrow())).await;
    assert_eq!(key(&ws.event("L").await), (slot.clone(), 0, 0));
    app.book(&patient(1), &slot, "k", None).await;
    assert_eq!(key(&ws.event("L").await), (slot, 1, 1));
    ws.complete("L").await;
    let done = ws.json().await;
    assert_eq!((done["type"].as_str(), done["id"].as_str()), (Some("complete"), Some("L")));
}

#[tokio::test]
async fn an_invalid_token_in_init_is_refused() {
    let (app, _db) = TestApp::spawn().await;
    let mut ws = Ws::connect(&app, MODERN).await;
    ws.init(Some(&expired_admin())).await;
    assert_eq!(ws.close_code().await, Some(4403));

    let mut legacy = Ws::connect(&app, LEGACY).await;
    legacy.init(Some("not-a-jwt")).await;
    let refused = legacy.json().await;
    assert_eq!(refused["type"], "connection_error", "{refused}");
    assert_eq!(legacy.close_code().await, Some(4403));
}

#[tokio::test]
async fn a_token_on_the_handshake_authenticates_unless_init_has_one() {
    let (app, _db) = TestApp::spawn().await;
    let (_doctor, slot) = app.doctor_with_slot(1).await;
    app.book(&patient(1), &slot, "k", None).await;
    let mine = "{ myAppointments { slot { id } } }";
    let bearer = |token: &str| format!("Bearer {token}");

    // The handshake's header alone: the connection is the patient's.
    let mut ws = Ws::connect_with(&app, MODERN, Some(&bearer(&patient(1)))).await;
    ws.init(None).await;
    assert_eq!(ws.json().await["type"], "connection_ack");
    ws.subscribe_with("m", mine, json!({})).await;
    let msg = ws.json().await;
    assert_eq!(msg["payload"]["data"]["myAppointments"][0]["slot"]["id"], slot, "{msg}");

    // A token in `connection_init` wins over the handshake's, even an invalid one there.
    let mut ws = Ws::connect_with(&app, MODERN, Some("Bearer not-a-jwt")).await;
    ws.init(Some(&patient(1))).await;
    assert_eq!(ws.json().await["type"], "connection_ack");
    let mut ws = Ws::connect_with(&app, MODERN, Some(&bearer(&patient(1)))).await;
    ws.init(Some(&expired_admin())).await;
    assert_eq!(ws.close_code().await, Some(4403));

    // An invalid handshake token with nothing in `connection_init` refuses the connection.
    let mut ws = Ws::connect_with(&app, MODERN, Some("Bearer not-a-jwt")).await;
    ws.init(None).await;
    assert_eq!(ws.close_code().await, Some(4403));
}

#[tokio::test]
async fn protocol_violations_close_with_their_codes() {
    let database = TestDatabase::new().await;
    let app = TestApp::spawn_on(&database, &[("WS_INIT_TIMEOUT_MS", "300")]).await;
    let (doctor, _) = app.doctor_with_slot(1).await;

    let mut bad = Ws::ready(&app, MODERN, None).await;
    bad.send_text("this is not JSON").await;
    assert_eq!(bad.close_code().await, Some(4400), "bad message");

    let mut early = Ws::connect(&app, MODERN).await;
    early.subscribe("1", &doctor, None).await;
    assert_eq!(early.close_code().await, Some(4401), "subscribe before ack");

    let mut silent = Ws::connect(&app, MODERN).await;
    assert_eq!(silent.close_code().await, Some(4408), "no connection_init in time");

    let mut dup = Ws::ready(&app, MODERN, None).await;
    dup.subscribe("same", &doctor, None).await;
    dup.subscribe("same", &doctor, None).await;
    assert_eq!(dup.close_code().await, Some(4409), "duplicate operation id");

    let mut twice = Ws::ready(&app, MODERN, None).await;
    twice.init(None).await;
    assert_eq!(twice.close_code().await, Some(4429), "second connection_init");

    let mut legacy = Ws::connect(&app, LEGACY).await;
    legacy.send_text("{}").await;
    assert_eq!(legacy.close_code().await, Some(4400), "the legacy protocol closes the same way");
}

#[tokio::test]
async fn a_client_close_is_answered_with_a_close_frame() {
    use tokio_tungstenite::tungstenite::protocol::{frame::coding::CloseCode, CloseFrame};
    let (app, _db) = TestApp::spawn().await;
    let (doctor, _) = app.doctor_with_slot(1).await;
    for protocol in [MODERN, LEGACY] {
        for subscribed in [false, true] {
            let mut ws = Ws::ready(&app, protocol, None).await;
            if subscribed {
                ws.subscribe("s", &doctor, None).await;
                ws.event("s").await;
            }
            let bye = CloseFrame { code: CloseCode::Normal, reason: "bye".into() };
            ws.stream.close(Some(bye)).await.expect("close sent");
            // The echo of the close frame, then the end of the connection (not a reset).
            let echo = loop {
                match tokio::time::timeout(WAIT, ws.stream.next()).await.expect("an answer in time") {
                    Some(Ok(Message::Close(frame))) => break frame,
                    Some(Ok(_)) => continue,
                    other => panic!("{protocol}: expected the close frame back, got {other:?}"),
                }
            };
            assert_eq!(echo.map(|f| f.code), Some(CloseCode::Normal), "{protocol}");
            let end = tokio::time::timeout(WAIT, ws.stream.next()).await.expect("the end in time");
            assert!(end.is_none(), "{protocol}: the connection ends cleanly, got {end:?}");
        }
    }
}

#[tokio::test]
async fn operations_per_connection_are_capped() {
    let database = TestDatabase::new().await;
    let app = TestApp::spawn_on(&database, &[("WS_MAX_SUBSCRIPTIONS", "2")]).await;
    let (doctor, slot) = app.doctor_with_slot(1).await;
    let mut ws = Ws::ready(&app, MODERN, None).await;
    ws.subscribe("a", &doctor, None).await;
    ws.event("a").await;
    ws.subscribe("b", &doctor, None).await;
    ws.event("b").await;

    ws.subscribe("c", &doctor, None).await;
    let refused = ws.json().await;
    assert_eq!((refused["type"].as_str(), refused["id"].as_str()), (Some("error"), Some("c")), "{refused}");
    assert_eq!(refused["payload"][0]["extensions"]["code"], "BAD_REQUEST");

    // Completing one frees a place; the connection itself stayed open.
    ws.complete("a").await;
    let done = ws.json().await;
    assert_eq!((done["type"].as_str(), done["id"].as_str()), (Some("complete"), Some("a")));
    ws.subscribe("c", &doctor, None).await;
    assert_eq!(key(&ws.event("c").await).0, slot);
    app.book(&patient(1), &slot, "k", None).await;
    let mut got = HashMap::new();
    for _ in 0..2 {
        let msg = ws.json().await;
        got.insert(
            msg["id"].as_str().expect("id").to_owned(),
            msg["payload"]["data"]["slotAvailability"]["version"].clone(),
        );
    }
    assert_eq!(got, HashMap::from([("b".to_owned(), json!(1)), ("c".to_owned(), json!(1))]));
}

#[tokio::test]
async fn open_subscriptions_are_counted_in_metrics() {
    let (app, _db) = TestApp::spawn().await;
    let (doctor, _) = app.doctor_with_slot(1).await;
    let mut ws = Ws::ready(&app, MODERN, None).await;
    ws.subscribe("m", &doctor, None).await;
    ws.event("m").await;
    let body = app.client.get(format!("{}/metrics", app.address)).send().await.expect("metrics");
    let text = body.text().await.expect("text");
    assert!(text.contains("subscriptions_open"), "{text}");
}

#[tokio::test]
async fn each_document_gets_its_own_shape() {
    // Subscribers of one doctor share the rendering of a change only when their documents and
    // variables are the same; aliases, fragments and other shapes still come out right.
    let (app, _db) = TestApp::spawn().await;
    let (doctor, slot) = app.doctor_with_slot(1).await;
    let mut ws = Ws::ready(&app, MODERN, None).await;
    let vars = json!({ "d": doctor });
    ws.subscribe_with("alias", "subscription($d:ID!){s:slotAvailability(doctorId:$d){v:version slotId}}", vars.clone())
        .await;
    assert_eq!(ws.data("alias").await, json!({ "s": { "v": 0, "slotId": slot } }));
    ws.subscribe_with(
        "fragment",
        "subscription($d:ID!){slotAvailability(doctorId:$d){...F}} \
         fragment F on SlotAvailabilityEvent{available version __typename}",
        vars.clone(),
    )
    .await;
    assert_eq!(
        ws.data("fragment").await,
        json!({ "slotAvailability": { "available": 1, "version": 0, "__typename": "SlotAvailabilityEvent" } })
    );
    // A directive on the root field: async-graphql's own path.
    ws.subscribe_with(
        "directive",
        "subscription($d:ID!){slotAvailability(doctorId:$d) @include(if: true) {version}}",
        vars.clone(),
    )
    .await;
    assert_eq!(ws.data("directive").await, json!({ "slotAvailability": { "version": 0 } }));
    ws.subscribe_with(
        "named",
        "subscription A{x:__typename} subscription B($d:ID!){slotAvailability(doctorId:$d){bookedCount}}",
        vars.clone(),
    )
    .await;
    // (No operationName with two operations: refused, then completed.)
    let refused = ws.json().await;
    assert!(refused["payload"]["errors"].is_array(), "{refused}");
    assert_eq!(ws.json().await["type"], "complete");
    ws.send(json!({ "type": "subscribe", "id": "named", "payload": {
        "query": "subscription A{x:__typename} subscription B($d:ID!){slotAvailability(doctorId:$d){bookedCount}}",
        "operationName": "B", "variables": vars } }))
        .await;
    assert_eq!(ws.data("named").await, json!({ "slotAvailability": { "bookedCount": 0 } }));
    ws.subscribe_with("bad", "subscription($d:ID!){slotAvailability(doctorId:$d){nope}}", json!({ "d": doctor })).await;
    let bad = ws.json().await;
    assert_eq!(bad["id"], "bad", "{bad}");
    assert!(bad["payload"]["errors"][0]["message"].as_str().is_some_and(|m| m.contains("nope")), "{bad}");
    assert_eq!(ws.json().await["type"], "complete");

    app.book(&patient(1), &slot, "k", None).await;
    let mut got = HashMap::new();
    for _ in 0..4 {
        let msg = ws.json().await;
        got.insert(msg["id"].as_str().expect("id").to_owned(), msg["payload"]["data"].clone());
    }
    assert_eq!(got["alias"], json!({ "s": { "v": 1, "slotId": slot } }));
    assert_eq!(
        got["fragment"],
        json!({ "slotAvailability": { "available": 0, "version": 1, "__typename": "SlotAvailabilityEvent" } })
    );
    assert_eq!(got["named"], json!({ "slotAvailability": { "bookedCount": 1 } }));
    assert_eq!(got["directive"], json!({ "slotAvailability": { "version": 1 } }));
}

#[tokio::test]
async fn holds_expiries_reschedules_and_closes_reach_subscribers() {
    let database = TestDatabase::new().await;
    let app = TestApp::spawn_on(&database, &[("HOLD_TTL_SECS", "1"), ("RATE_LIMIT_BOOKINGS", "0")]).await;
    let doctor = app.create_doctor("UTC").await;
    let day = tomorrow();
    let slots = app.publish(&doctor, &day, "12:00", "12:30", 15, 1).await;
    let mut ws = Ws::ready(&app, MODERN, None).await;
    let query = "subscription($d:ID!,$date:Date){slotAvailability(doctorId:$d,date:$date)\
        {slotId version bookedCount available closed}}";
    ws.subscribe_with("s", query, json!({ "d": doctor, "date": day })).await;
    ws.events("s", 2).await;

    let hold = "mutation($s:ID!){holdSlot(input:{slotId:$s,idempotencyKey:\"h\"}){appointment{id}}}";
    app.gql(Some(&patient(1)), hold, json!({ "s": slots[0] })).await;
    assert_eq!(key(&ws.event("s").await), (slots[0].clone(), 1, 1), "a hold takes the seat");
    // The hold runs out (HOLD_TTL_SECS=1): the expiry gives the seat back.
    assert_eq!(key(&ws.event("s").await), (slots[0].clone(), 2, 0), "the expiry gives it back");

    let booked = app.book(&patient(2), &slots[0], "b", None).await;
    assert_eq!(key(&ws.event("s").await), (slots[0].clone(), 3, 1));
    let move_to = "mutation($a:ID!,$s:ID!){rescheduleAppointment(input:{appointmentId:$a,newSlotId:$s,\
        idempotencyKey:\"r\"}){appointment{id}}}";
    app.gql(Some(&patient(2)), move_to, json!({ "a": appointment_id(&booked), "s": slots[1] })).await;
    let mut moved: Vec<_> = ws.events("s", 2).await.iter().map(key).collect();
    moved.sort();
    assert_eq!(moved, [(slots[0].clone(), 4, 0), (slots[1].clone(), 1, 1)], "a reschedule moves the seat");

    let close = "mutation($d:ID!,$f:DateTime!,$t:DateTime!){closeSlots(input:{doctorId:$d,from:$f,to:$t}){closed}}";
    let range = json!({ "d": doctor, "f": format!("{day}T12:00:00Z"), "t": format!("{day}T12:30:00Z") });
    app.gql(Some(&admin()), close, range).await;
    let closed = ws.events("s", 2).await;
    assert!(closed.iter().all(|e| e["closed"] == true && e["available"] == 0), "{closed:?}");
    assert!(closed.iter().all(|e| e["bookedCount"] == 0), "the appointment in it was cancelled: {closed:?}");
}
