//! The waitlist: a freed seat goes, as a hold, to whoever waited longest and can take it, in the
//! transaction that freed it.

use std::{sync::Arc, time::Duration};

use serde_json::{json, Value};
use tokio::sync::Barrier;

use crate::helpers::*;

const JOIN: &str = "mutation($d:ID!,$t:Date!,$k:String!,$p:ID){joinWaitlist(input:{doctorId:$d,date:$t,\
    idempotencyKey:$k,patientId:$p}){entry{id status patientId date doctor{id} offer{id status expiresAt slot{id}}} \
    replayed userErrors{code field}}}";
const LEAVE: &str = "mutation($id:ID!){leaveWaitlist(id:$id){entry{id status} left userErrors{code}}}";
const MINE: &str = "{myWaitlist{id status patientId offer{id status}}}";
const CONFIRM: &str = "mutation($id:ID!){confirmAppointment(id:$id){confirmed userErrors{code}}}";
const LIST: &str = "query($d:ID!,$t:Date!){availableSlots(doctorId:$d,date:$t){id}}";

const NO_LIMIT: (&str, &str) = ("RATE_LIMIT_BOOKINGS", "0");

async fn join(app: &TestApp, token: &str, doctor: &str, key: &str, patient: Option<&str>) -> Value {
    app.gql(Some(token), JOIN, json!({ "d": doctor, "t": tomorrow(), "k": key, "p": patient })).await["joinWaitlist"]
        .clone()
}

async fn mine(app: &TestApp, token: &str) -> Vec<Value> {
    app.gql(Some(token), MINE, json!({})).await["myWaitlist"].as_array().cloned().unwrap_or_default()
}

/// The status of a patient's only entry, and its offer's id.
async fn entry_of(app: &TestApp, patient_id: u64) -> (String, Option<String>) {
    let entries = mine(app, &patient(patient_id)).await;
    let e = &entries[0];
    (e["status"].as_str().unwrap().to_owned(), e["offer"]["id"].as_str().map(str::to_owned))
}

/// A doctor with one capacity-1 slot tomorrow, already booked by patient 100.
async fn full_day(app: &TestApp) -> (String, String, String) {
    let doctor = app.create_doctor("UTC").await;
    let slot = app.publish(&doctor, &tomorrow(), "11:00", "11:15", 15, 1).await[0].clone();
    let booked = app.book(&patient(100), &slot, "first", None).await;
    (doctor, slot, booked["appointment"]["id"].as_str().unwrap().to_owned())
}

#[tokio::test]
async fn a_freed_seat_goes_to_whoever_waited_longest() {
    let db = TestDatabase::new().await;
    let app = TestApp::spawn_on(&db, &[NO_LIMIT, ("WAITLIST_OFFER_SECS", "1")]).await;
    let (doctor, slot, first) = full_day(&app).await;
    for p in [1, 2, 3] {
        let joined = join(&app, &patient(p), &doctor, "w", None).await;
        assert_eq!(joined["entry"]["status"], "WAITING", "{joined}");
    }
    // The cancel frees the seat and, in the same transaction, holds it for patient 1.
    app.cancel(&patient(100), &first).await;
    let (status, offer) = entry_of(&app, 1).await;
    assert_eq!(status, "OFFERED");
    let offer = offer.expect("an offer");
    assert_eq!(app.slot(&slot).await["bookedCount"], 1, "the seat never shows free");
    let listed = app.gql(None, LIST, json!({ "d": doctor, "t": tomorrow() })).await;
    assert_eq!(listed["availableSlots"], json!([]), "nor in availableSlots");
    assert_eq!(entry_of(&app, 2).await.0, "WAITING");

    // Patient 1 lets the offer go (it expires: WAITLIST_OFFER_SECS=1): it lapses, and the seat
    // passes to patient 2.
    let passed = wait_for(|| async { entry_of(&app, 2).await.0 == "OFFERED" }).await;
    assert!(passed, "the expired offer passes to the next in line");
    assert_eq!(entry_of(&app, 1).await.0, "LAPSED");
    let (_, offer2) = entry_of(&app, 2).await;
    // Patient 2 cancels the offer: it lapses and patient 3 gets the seat at once.
    app.cancel(&patient(2), &offer2.unwrap()).await;
    assert_eq!(entry_of(&app, 2).await.0, "LAPSED");
    let (status, offer3) = entry_of(&app, 3).await;
    assert_eq!(status, "OFFERED");
    // Patient 3 confirms in time: fulfilled.
    let confirmed = app.gql(Some(&patient(3)), CONFIRM, json!({ "id": offer3.unwrap() })).await;
    assert_eq!(confirmed["confirmAppointment"]["confirmed"], true, "{confirmed}");
    assert_eq!(entry_of(&app, 3).await.0, "FULFILLED");
    assert_ne!(offer, "", "each offer is its own hold");
    app.assert_counts_consistent().await;
}

async fn wait_for<F, Fut>(mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..100 {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test]
async fn a_waiter_who_cannot_take_the_seat_is_passed_over() {
    let db = TestDatabase::new().await;
    let app = TestApp::spawn_on(&db, &[NO_LIMIT]).await;
    let (doctor, _, first) = full_day(&app).await;
    join(&app, &patient(1), &doctor, "w", None).await;
    join(&app, &patient(2), &doctor, "w", None).await;
    // Patient 1 meanwhile books another doctor at the same time.
    let elsewhere = app.create_doctor("UTC").await;
    let there = app.publish(&elsewhere, &tomorrow(), "11:00", "11:30", 30, 1).await;
    assert!(app.book(&patient(1), &there[0], "elsewhere", None).await["appointment"].is_object());
    app.cancel(&patient(100), &first).await;
    assert_eq!(entry_of(&app, 1).await.0, "WAITING", "an overlapping appointment keeps patient 1 waiting");
    assert_eq!(entry_of(&app, 2).await.0, "OFFERED");
    app.assert_counts_consistent().await;
}

#[tokio::test]
async fn joining_is_idempotent_once_per_day_and_a_free_seat_is_offered_at_once() {
    let db = TestDatabase::new().await;
    let app = TestApp::spawn_on(&db, &[NO_LIMIT]).await;
    let (doctor, _, _) = full_day(&app).await;
    let first = join(&app, &patient(1), &doctor, "w", None).await;
    let again = join(&app, &patient(1), &doctor, "w", None).await;
    assert_eq!((again["replayed"].as_bool(), &again["entry"]["id"]), (Some(true), &first["entry"]["id"]));
    assert_eq!(user_error(&join(&app, &patient(1), &doctor, "other", None).await), Some("ALREADY_ON_WAITLIST"));
    let other_day = app.create_doctor("UTC").await;
    assert_eq!(user_error(&join(&app, &patient(1), &other_day, "w", None).await), Some("IDEMPOTENCY_KEY_REUSED"));

    // A day with a free seat: the join holds it at once.
    let free = app.create_doctor("UTC").await;
    app.publish(&free, &tomorrow(), "15:00", "15:15", 15, 1).await;
    let joined = join(&app, &patient(2), &free, "w", None).await;
    assert_eq!(joined["entry"]["status"], "OFFERED", "{joined}");
    assert_eq!(joined["entry"]["offer"]["status"], "HELD");

    // Leaving: a waiting entry leaves, once.
    let id = first["entry"]["id"].as_str().unwrap();
    let left = app.gql(Some(&patient(1)), LEAVE, json!({ "id": id })).await["leaveWaitlist"].clone();
    assert_eq!((left["left"].as_bool(), left["entry"]["status"].as_str()), (Some(true), Some("LEFT")));
    let again = app.gql(Some(&patient(1)), LEAVE, json!({ "id": id })).await["leaveWaitlist"].clone();
    assert_eq!(again["left"], false);
    let stranger = app.gql(Some(&patient(9)), LEAVE, json!({ "id": id })).await["leaveWaitlist"].clone();
    assert_eq!(user_error(&stranger), Some("INVALID_INPUT"));
    // A day that has ended is refused.
    let past =
        app.gql(Some(&patient(1)), JOIN, json!({ "d": doctor, "t": "2020-01-01", "k": "past", "p": null })).await;
    assert_eq!(user_error(&past["joinWaitlist"]), Some("INVALID_INPUT"));
    app.assert_counts_consistent().await;
}

#[tokio::test]
async fn waitlist_roles() {
    let db = TestDatabase::new().await;
    let app = TestApp::spawn_on(&db, &[NO_LIMIT]).await;
    let (doctor, _, first) = full_day(&app).await;
    let vars = json!({ "d": doctor, "t": tomorrow(), "k": "k", "p": null });
    assert_eq!(app.error_code(None, JOIN, vars.clone()).await, "UNAUTHENTICATED");
    assert_eq!(app.error_code(Some(&crate::helpers::doctor(&doctor)), JOIN, vars).await, "FORBIDDEN");
    assert_eq!(user_error(&join(&app, &partner("p"), &doctor, "k", None).await), Some("INVALID_INPUT"));
    let by_partner = join(&app, &partner("p"), &doctor, "k", Some("7")).await;
    assert_eq!(by_partner["entry"]["patientId"], "7");
    join(&app, &patient(8), &doctor, "k", None).await;
    assert_eq!(mine(&app, &partner("p")).await.len(), 1, "a partner sees what it made");
    assert_eq!(mine(&app, &partner("other")).await.len(), 0);
    assert_eq!(mine(&app, &patient(7)).await.len(), 1, "the patient sees entries made for it");
    assert_eq!(mine(&app, &admin()).await.len(), 2, "an admin sees all");
    // Leaving: doctors have no entries; a malformed id is refused on its field.
    let id = by_partner["entry"]["id"].as_str().unwrap();
    let by_doctor = app.error_code(Some(&crate::helpers::doctor(&doctor)), LEAVE, json!({ "id": id })).await;
    assert_eq!(by_doctor, "FORBIDDEN");
    let malformed = app.gql(Some(&patient(7)), LEAVE, json!({ "id": "abc" })).await["leaveWaitlist"].clone();
    assert_eq!(user_error(&malformed), Some("INVALID_INPUT"));
    let by_other = app.gql(Some(&partner("other")), LEAVE, json!({ "id": id })).await["leaveWaitlist"].clone();
    assert_eq!(user_error(&by_other), Some("INVALID_INPUT"), "another partner's entry reads as unknown");
    // The offer made for a partner's entry is the partner's to see (and to confirm).
    app.cancel(&patient(100), &first).await;
    let entries = mine(&app, &partner("p")).await;
    assert_eq!(entries[0]["status"], "OFFERED");
    let offer = entries[0]["offer"]["id"].as_str().expect("the partner sees the offer").to_owned();
    let confirmed = app.gql(Some(&partner("p")), CONFIRM, json!({ "id": offer })).await;
    assert_eq!(confirmed["confirmAppointment"]["confirmed"], true);
    app.assert_counts_consistent().await;
}

#[tokio::test]
async fn cancels_and_joins_racing_on_one_day_leave_no_seat_free_while_someone_waits() {
    let db = TestDatabase::new().await;
    let app = Arc::new(TestApp::spawn_on(&db, &[NO_LIMIT]).await);
    let doctor = app.create_doctor("UTC").await;
    let slots = app.publish(&doctor, &tomorrow(), "08:00", "10:00", 15, 2).await;
    // Every seat booked, by patients 1000…
    let mut booked = Vec::new();
    for (i, slot) in slots.iter().enumerate() {
        for s in 0..2 {
            let p = 1000 + (i * 2 + s) as u64;
            let answer = app.book(&patient(p), slot, "b", None).await;
            booked.push((p, answer["appointment"]["id"].as_str().unwrap().to_owned()));
        }
    }
    // …then half of them cancel while 12 new patients join, all at once.
    let cancels: Vec<_> = booked.iter().step_by(2).cloned().collect();
    let barrier = Arc::new(Barrier::new(cancels.len() + 12));
    let mut tasks = Vec::new();
    for (p, id) in cancels {
        let (app, barrier) = (Arc::clone(&app), Arc::clone(&barrier));
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            app.cancel(&patient(p), &id).await;
        }));
    }
    for w in 0..12u64 {
        let (app, barrier, doctor) = (Arc::clone(&app), Arc::clone(&barrier), doctor.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let joined = join(&app, &patient(2000 + w), &doctor, "w", None).await;
            assert!(joined["entry"].is_object(), "{joined}");
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // Every seat is booked, held for exactly one entry, or free with nobody waiting.
    let entries = mine(&app, &admin()).await;
    let waiting = entries.iter().filter(|e| e["status"] == "WAITING").count();
    let offered: Vec<&Value> = entries.iter().filter(|e| e["status"] == "OFFERED").collect();
    let mut free = 0;
    for slot in &slots {
        free += app.slot(slot).await["available"].as_i64().unwrap();
    }
    // 8 slots of 2 seats, 8 seats freed, 12 waiters: each freed seat is held for one of them.
    assert_eq!(offered.len(), 8, "each freed seat is held for one waiter: {entries:?}");
    assert!(offered.iter().all(|e| e["offer"]["status"] == "HELD"));
    let mut offers: Vec<&str> = offered.iter().map(|e| e["offer"]["id"].as_str().unwrap()).collect();
    offers.sort_unstable();
    offers.dedup();
    assert_eq!(offers.len(), offered.len(), "one hold per entry");
    assert!(free == 0 || waiting == 0, "{free} free seats while {waiting} wait");
    assert_eq!((waiting, free), (4, 0));
    app.assert_counts_consistent().await;
}
