//! The rest of an appointment's life: holds that expire or are confirmed, reschedules, no
//! overlapping appointments per patient, longer appointments, closed slots. Every test ends
//! with the database's own invariant check.

use std::{sync::Arc, time::Duration};

use serde_json::{json, Value};
use tokio::sync::Barrier;

use crate::helpers::*;

const HOLD: &str = "mutation($s:ID!,$k:String!,$p:ID,$m:Int){holdSlot(input:{slotId:$s,idempotencyKey:$k,patientId:$p,\
    durationMinutes:$m}){appointment{id status expiresAt startAt endAt slots{id}} replayed userErrors{code field}}}";
const BOOK_FOR: &str = "mutation($s:ID!,$k:String!,$p:ID,$m:Int){bookAppointment(input:{slotId:$s,idempotencyKey:$k,\
    patientId:$p,durationMinutes:$m}){appointment{id status startAt endAt slots{id bookedCount}} replayed \
    userErrors{code field}}}";
const CONFIRM: &str =
    "mutation($id:ID!){confirmAppointment(id:$id){appointment{id status expiresAt} confirmed userErrors{code}}}";
const RESCHEDULE: &str = "mutation($a:ID!,$s:ID!,$k:String!){rescheduleAppointment(input:{appointmentId:$a,\
    newSlotId:$s,idempotencyKey:$k}){appointment{id status slot{id} expiresAt rescheduledFrom{id}} \
    previous{id status cancelledBy rescheduledTo{id}} replayed userErrors{code field}}}";
const CLOSE: &str = "mutation($d:ID!,$f:DateTime!,$t:DateTime!){closeSlots(input:{doctorId:$d,from:$f,to:$t,\
    reason:\"sick\"}){closed cancelledAppointments{id status cancelledBy} userErrors{code field}}}";
const APPOINTMENT: &str =
    "query($id:ID!){appointment(id:$id){id status expiresAt cancelledBy slots{id} rescheduledTo{id}}}";
const AVAILABLE: &str =
    "query($d:ID!,$t:Date!,$m:Int){availableSlots(doctorId:$d,date:$t,durationMinutes:$m){id closed available}}";

/// No rate limit: these tests make many attempts for one patient on purpose.
const NO_LIMIT: &[(&str, &str)] = &[("RATE_LIMIT_BOOKINGS", "0")];

async fn app_with(extra: &[(&str, &str)]) -> (TestApp, TestDatabase) {
    let db = TestDatabase::new().await;
    let mut settings = NO_LIMIT.to_vec();
    settings.extend_from_slice(extra);
    (TestApp::spawn_on(&db, &settings).await, db)
}

async fn hold(app: &TestApp, token: &str, slot: &str, key: &str, minutes: Option<i32>) -> Value {
    app.gql(Some(token), HOLD, json!({ "s": slot, "k": key, "m": minutes })).await["holdSlot"].clone()
}

async fn book_for(app: &TestApp, token: &str, slot: &str, key: &str, minutes: Option<i32>) -> Value {
    app.gql(Some(token), BOOK_FOR, json!({ "s": slot, "k": key, "m": minutes })).await["bookAppointment"].clone()
}

async fn confirm(app: &TestApp, token: &str, id: &str) -> Value {
    app.gql(Some(token), CONFIRM, json!({ "id": id })).await["confirmAppointment"].clone()
}

async fn reschedule(app: &TestApp, token: &str, appointment: &str, slot: &str, key: &str) -> Value {
    app.gql(Some(token), RESCHEDULE, json!({ "a": appointment, "s": slot, "k": key })).await["rescheduleAppointment"]
        .clone()
}

fn id_of(payload: &Value) -> String {
    payload["appointment"]["id"].as_str().unwrap_or_else(|| panic!("no appointment in {payload}")).to_owned()
}

/// A doctor with `n` consecutive 15-minute slots of `capacity` tomorrow from 10:00 (UTC).
async fn doctor_with_run(app: &TestApp, n: u32, capacity: i32) -> (String, Vec<String>) {
    let doctor = app.create_doctor("UTC").await;
    let slots = app.publish(&doctor, &tomorrow(), "10:00", &clock(600 + 15 * n), 15, capacity).await;
    (doctor, slots)
}

/// The `bookedCount` of each of `slots`, in order.
async fn booked_counts(app: &TestApp, slots: &[String]) -> Vec<i64> {
    futures_util::future::join_all(slots.iter().map(|s| app.slot(s)))
        .await
        .iter()
        .map(|s| s["bookedCount"].as_i64().unwrap())
        .collect()
}

/// Polls `check` every 100 ms for up to `within`; true as soon as it holds.
async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_hold_takes_a_seat_until_confirmed() {
    let (app, _db) = app_with(&[]).await;
    let (_, slot) = app.doctor_with_slot(1).await;
    let held = hold(&app, &patient(1), &slot, "h", None).await;
    assert_eq!(held["appointment"]["status"], "HELD", "{held}");
    let expires: chrono::DateTime<chrono::Utc> = held["appointment"]["expiresAt"].as_str().unwrap().parse().unwrap();
    let ttl = expires - chrono::Utc::now();
    assert!(ttl > chrono::Duration::seconds(590) && ttl <= chrono::Duration::seconds(600), "HOLD_TTL_SECS 600: {ttl}");
    assert_eq!(app.slot(&slot).await["bookedCount"], 1, "a hold takes the seat");
    assert_eq!(user_error(&app.book(&patient(2), &slot, "b", None).await), Some("SLOT_FULL"));
    assert_eq!(user_error(&hold(&app, &patient(1), &slot, "h2", None).await), Some("ALREADY_BOOKED"));

    let id = id_of(&held);
    let confirmed = confirm(&app, &patient(1), &id).await;
    assert_eq!((confirmed["confirmed"].as_bool(), &confirmed["appointment"]["status"]), (Some(true), &json!("BOOKED")));
    assert!(confirmed["appointment"]["expiresAt"].is_null(), "a booking has no expiry: {confirmed}");
    let again = confirm(&app, &patient(1), &id).await;
    assert_eq!(again["confirmed"], false, "confirming a booking changes nothing: {again}");
    assert_eq!(app.slot(&slot).await["bookedCount"], 1);

    // Whoever may cancel may confirm; others do not see it.
    assert_eq!(user_error(&confirm(&app, &patient(2), &id).await), Some("APPOINTMENT_NOT_FOUND"));
    app.cancel(&patient(1), &id).await;
    app.assert_counts_consistent().await;
}

#[tokio::test]
async fn holds_and_bookings_share_the_key_space_and_replay() {
    let (app, _db) = app_with(&[]).await;
    let (_, slot) = app.doctor_with_slot(2).await;
    let held = hold(&app, &patient(1), &slot, "k", None).await;
    let again = hold(&app, &patient(1), &slot, "k", None).await;
    assert_eq!((again["replayed"].as_bool(), id_of(&again)), (Some(true), id_of(&held)));
    let as_booking = app.book(&patient(1), &slot, "k", None).await;
    assert_eq!(user_error(&as_booking), Some("IDEMPOTENCY_KEY_REUSED"), "{as_booking}");
    assert_eq!(app.slot(&slot).await["bookedCount"], 1);
    app.assert_counts_consistent().await;
}

#[tokio::test]
async fn cancelling_a_hold_gives_its_seat_back() {
    let (app, _db) = app_with(&[]).await;
    let (_, slot) = app.doctor_with_slot(1).await;
    let held = hold(&app, &partner("p"), &slot, "k", None).await;
    assert!(held["userErrors"][0]["code"].as_str() == Some("INVALID_INPUT"), "a partner must name the patient");
    let held = app.gql(Some(&partner("p")), HOLD, json!({ "s": slot, "k": "k", "p": "5" })).await["holdSlot"].clone();
    let cancelled = app.cancel(&partner("p"), &id_of(&held)).await;
    assert_eq!(cancelled["appointment"]["status"], "CANCELLED");
    let seen = app.gql(Some(&partner("p")), APPOINTMENT, json!({ "id": id_of(&held) })).await;
    assert_eq!(seen["appointment"]["cancelledBy"], "PARTNER", "{seen}");
    assert!(seen["appointment"]["expiresAt"].is_null());
    assert_eq!(user_error(&confirm(&app, &partner("p"), &id_of(&held)).await), Some("APPOINTMENT_NOT_ACTIVE"));
    assert_eq!(app.slot(&slot).await["bookedCount"], 0);
    app.assert_counts_consistent().await;
}

#[tokio::test]
async fn an_expired_hold_gives_its_seat_back_and_cannot_be_confirmed() {
    let (app, _db) = app_with(&[("HOLD_TTL_SECS", "1")]).await;
    let (_, slot) = app.doctor_with_slot(1).await;
    let held = hold(&app, &patient(1), &slot, "h", None).await;
    let id = id_of(&held);
    // Within 5 s of expiresAt, by the job of any instance.
    let released = eventually(Duration::from_secs(8), || async { app.slot(&slot).await["bookedCount"] == 0 }).await;
    assert!(released, "the expired hold's seat was not given back");
    let seen = app.gql(Some(&patient(1)), APPOINTMENT, json!({ "id": id })).await["appointment"].clone();
    assert_eq!(seen["status"], "EXPIRED", "{seen}");
    assert!(seen["expiresAt"].is_string(), "an expired hold keeps its expiry: {seen}");
    assert_eq!(user_error(&confirm(&app, &patient(1), &id).await), Some("HOLD_EXPIRED"));
    assert!(app.book(&patient(2), &slot, "b", None).await["appointment"].is_object(), "the seat is free again");
    app.assert_counts_consistent().await;
}

#[tokio::test]
async fn a_hold_past_its_expiry_is_refused_before_the_job_runs() {
    let db = TestDatabase::new().await;
    // One instance holds; its clock is the database's, so confirm is refused once expiresAt
    // has passed even when no expiry job has turned it EXPIRED yet.
    let app = TestApp::spawn_on(&db, &[("HOLD_TTL_SECS", "1"), ("RATE_LIMIT_BOOKINGS", "0")]).await;
    let (_, slot) = app.doctor_with_slot(1).await;
    let id = id_of(&hold(&app, &patient(1), &slot, "h", None).await);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(user_error(&confirm(&app, &patient(1), &id).await), Some("HOLD_EXPIRED"));
    app.assert_counts_consistent().await;
}

async fn confirm_races_expiry(round: usize) {
    let (app, _db) = app_with(&[("HOLD_TTL_SECS", "1")]).await;
    let app = Arc::new(app);
    let (_, slot) = app.doctor_with_slot(1).await;
    let id = id_of(&hold(&app, &patient(1), &slot, &format!("h{round}"), None).await);
    // Confirm right around expiresAt, while the expiry job looks for due holds.
    tokio::time::sleep(Duration::from_millis(950 + (round as u64 % 5) * 20)).await;
    let confirmed = confirm(&app, &patient(1), &id).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let seen = app.gql(Some(&patient(1)), APPOINTMENT, json!({ "id": id })).await["appointment"].clone();
    let booked = app.slot(&slot).await["bookedCount"].as_i64();
    if confirmed["confirmed"] == true {
        assert_eq!((seen["status"].as_str(), booked), (Some("BOOKED"), Some(1)), "confirm won: {seen}");
    } else {
        assert_eq!(user_error(&confirmed), Some("HOLD_EXPIRED"), "{confirmed}");
        assert_eq!((seen["status"].as_str(), booked), (Some("EXPIRED"), Some(0)), "expiry won: {seen}");
    }
    app.assert_counts_consistent().await;
}

#[tokio::test]
async fn a_confirm_racing_the_expiry_has_exactly_one_winner() {
    let rounds: Vec<_> = (0..5).map(|r| tokio::spawn(confirm_races_expiry(r))).collect();
    for r in rounds {
        r.await.unwrap();
    }
}

#[tokio::test]
async fn many_holds_expire_together_and_release_every_seat() {
    let (app, _db) = app_with(&[("HOLD_TTL_SECS", "1")]).await;
    let doctor = app.create_doctor("UTC").await;
    let slots = app.publish(&doctor, &tomorrow(), "08:00", "10:00", 15, 20).await;
    for (i, slot) in slots.iter().enumerate() {
        for p in 0..20u64 {
            let token = patient(1000 + i as u64 * 100 + p);
            let _ = hold(&app, &token, slot, &format!("k{i}-{p}"), None).await;
        }
    }
    let released = eventually(Duration::from_secs(10), || async {
        let mut all = true;
        for slot in &slots {
            all &= app.slot(slot).await["bookedCount"] == 0;
        }
        all
    })
    .await;
    assert!(released, "every expired hold's seat comes back");
    app.assert_counts_consistent().await;
}

#[tokio::test]
async fn a_reschedule_moves_an_appointment_all_or_nothing() {
    let (app, _db) = app_with(&[]).await;
    let (_, run) = doctor_with_run(&app, 4, 1).await;
    let me = patient(1);
    let booked = app.book(&me, &run[0], "b", None).await;
    let old = id_of(&booked);

    let moved = reschedule(&app, &me, &old, &run[2], "r").await;
    assert!(moved["userErrors"].as_array().unwrap().is_empty(), "{moved}");
    let new = id_of(&moved);
    assert_eq!(moved["appointment"]["status"], "BOOKED");
    assert_eq!(moved["appointment"]["slot"]["id"], run[2].as_str());
    assert_eq!(moved["appointment"]["rescheduledFrom"]["id"], old.as_str());
    assert_eq!(moved["previous"]["status"], "CANCELLED");
    assert_eq!(moved["previous"]["cancelledBy"], "PATIENT");
    assert_eq!(moved["previous"]["rescheduledTo"]["id"], new.as_str());
    assert_eq!(
        (app.slot(&run[0]).await["bookedCount"].as_i64(), app.slot(&run[2]).await["bookedCount"].as_i64()),
        (Some(0), Some(1))
    );

    // A retry replays; the same key for something else is refused.
    let again = reschedule(&app, &me, &old, &run[2], "r").await;
    assert_eq!((again["replayed"].as_bool(), id_of(&again)), (Some(true), new.clone()));
    assert_eq!(user_error(&reschedule(&app, &me, &new, &run[3], "r").await), Some("IDEMPOTENCY_KEY_REUSED"));

    // The old one cannot move again; the new one cannot move into a slot it holds.
    assert_eq!(user_error(&reschedule(&app, &me, &old, &run[3], "r2").await), Some("APPOINTMENT_NOT_ACTIVE"));
    assert_eq!(user_error(&reschedule(&app, &me, &new, &run[2], "r3").await), Some("ALREADY_BOOKED"));
    // Into a full slot: refused, and nothing changed.
    app.book(&patient(2), &run[3], "x", None).await;
    assert_eq!(user_error(&reschedule(&app, &me, &new, &run[3], "r4").await), Some("SLOT_FULL"));
    assert_eq!(app.slot(&run[2]).await["bookedCount"], 1, "the appointment stayed where it was");
    assert_eq!(user_error(&reschedule(&app, &me, &new, "999999", "r5").await), Some("SLOT_NOT_FOUND"));
    assert_eq!(user_error(&reschedule(&app, &patient(9), &new, &run[1], "r6").await), Some("APPOINTMENT_NOT_FOUND"));
    app.assert_counts_consistent().await;
}

#[tokio::test]
async fn a_rescheduled_hold_keeps_its_expiry_and_moving_past_an_overlap_of_its_own_is_fine() {
    let (app, _db) = app_with(&[]).await;
    let (_, run) = doctor_with_run(&app, 4, 1).await;
    let held = hold(&app, &patient(1), &run[0], "h", Some(30)).await;
    let expires = held["appointment"]["expiresAt"].clone();
    // 30 minutes from run[0] to run[1]: overlaps the appointment being moved, which is fine.
    let moved = reschedule(&app, &patient(1), &id_of(&held), &run[1], "r").await;
    assert_eq!(moved["appointment"]["status"], "HELD", "{moved}");
    assert_eq!(moved["appointment"]["expiresAt"], expires);
    let counts = booked_counts(&app, &run).await;
    assert_eq!(counts, [0, 1, 1, 0]);
    app.assert_counts_consistent().await;
}

#[tokio::test]
async fn concurrent_reschedules_of_one_appointment_have_one_winner() {
    let (app, _db) = app_with(&[]).await;
    let app = Arc::new(app);
    let doctor = app.create_doctor("UTC").await;
    let slots = app.publish(&doctor, &tomorrow(), "08:00", "14:00", 15, 1).await;
    let old = id_of(&app.book(&patient(1), &slots[0], "b", None).await);
    let barrier = Arc::new(Barrier::new(20));
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let (app, barrier, old, slot) = (Arc::clone(&app), Arc::clone(&barrier), old.clone(), slots[i + 1].clone());
            tokio::spawn(async move {
                barrier.wait().await;
                reschedule(&app, &patient(1), &old, &slot, &format!("r{i}")).await
            })
        })
        .collect();
    let mut won = 0;
    for t in tasks {
        let answer = t.await.unwrap();
        match user_error(&answer) {
            None => won += 1,
            Some(code) => assert_eq!(code, "APPOINTMENT_NOT_ACTIVE", "{answer}"),
        }
    }
    assert_eq!(won, 1, "exactly one reschedule wins");
    let total: i64 = booked_counts(&app, &slots).await.iter().sum();
    assert_eq!(total, 1, "one seat, wherever it went");
    app.assert_counts_consistent().await;
}

#[tokio::test]
async fn concurrent_crossing_reschedules_and_bookings_never_deadlock() {
    let (app, _db) = app_with(&[]).await;
    let app = Arc::new(app);
    let (_, run) = doctor_with_run(&app, 8, 2).await;
    // Patients 1..=8 each hold slot i; each moves to the slot "across" while others book.
    let mut booked = Vec::new();
    for (i, slot) in run.iter().enumerate() {
        booked.push(id_of(&app.book(&patient(i as u64 + 1), slot, "b", None).await));
    }
    let barrier = Arc::new(Barrier::new(16));
    let mut tasks = Vec::new();
    for (i, id) in booked.iter().enumerate() {
        let (app, barrier, id, to) =
            (Arc::clone(&app), Arc::clone(&barrier), id.clone(), run[run.len() - 1 - i].clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            reschedule(&app, &patient(i as u64 + 1), &id, &to, "r").await
        }));
    }
    for (i, slot) in run.iter().enumerate() {
        let (app, barrier, slot) = (Arc::clone(&app), Arc::clone(&barrier), slot.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            app.book(&patient(100 + i as u64), &slot, "x", None).await
        }));
    }
    for t in tasks {
        let answer = t.await.unwrap();
        // Every answer is an answer: moved/booked, or a refusal; never an internal error.
        assert!(answer["appointment"].is_object() || user_error(&answer).is_some(), "{answer}");
    }
    app.assert_counts_consistent().await;
}

#[tokio::test]
async fn a_patient_is_never_in_two_places_at_once() {
    let (app, _db) = app_with(&[]).await;
    let app = Arc::new(app);
    let mut slots = Vec::new();
    for _ in 0..10 {
        let doctor = app.create_doctor("UTC").await;
        slots.push(app.publish(&doctor, &tomorrow(), "13:00", "13:30", 30, 5).await[0].clone());
    }
    let barrier = Arc::new(Barrier::new(slots.len()));
    let tasks: Vec<_> = slots
        .iter()
        .enumerate()
        .map(|(i, slot)| {
            let (app, barrier, slot) = (Arc::clone(&app), Arc::clone(&barrier), slot.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                app.book(&patient(7), &slot, &format!("k{i}"), None).await
            })
        })
        .collect();
    let mut won = 0;
    for t in tasks {
        let answer = t.await.unwrap();
        match user_error(&answer) {
            None => won += 1,
            Some(code) => assert_eq!(code, "OVERLAPPING_APPOINTMENT", "{answer}"),
        }
    }
    assert_eq!(won, 1, "one patient, one appointment at that instant");

    // Touching intervals do not overlap; a cancel frees the time.
    let doctor = app.create_doctor("UTC").await;
    let next = app.publish(&doctor, &tomorrow(), "13:30", "14:00", 30, 1).await;
    assert!(app.book(&patient(7), &next[0], "touching", None).await["appointment"].is_object());
    app.assert_counts_consistent().await;
}

#[tokio::test]
async fn refusals_keep_their_order_with_overlaps() {
    let (app, _db) = app_with(&[]).await;
    let (_, run) = doctor_with_run(&app, 2, 1).await;
    let other = app.create_doctor("UTC").await;
    let there = app.publish(&other, &tomorrow(), "10:00", "10:15", 15, 1).await;
    app.book(&patient(1), &run[0], "a", None).await;
    // The same slot again: ALREADY_BOOKED wins over the overlap (and over full).
    assert_eq!(user_error(&app.book(&patient(1), &run[0], "b", None).await), Some("ALREADY_BOOKED"));
    // Another doctor at the same time: overlapping.
    assert_eq!(user_error(&app.book(&patient(1), &there[0], "c", None).await), Some("OVERLAPPING_APPOINTMENT"));
    // Full for someone else, and overlapping wins over full for this patient.
    app.book(&patient(2), &there[0], "d", None).await;
    assert_eq!(user_error(&app.book(&patient(3), &there[0], "e", None).await), Some("SLOT_FULL"));
    assert_eq!(user_error(&app.book(&patient(1), &there[0], "f", None).await), Some("OVERLAPPING_APPOINTMENT"));
    app.assert_counts_consistent().await;
}

#[tokio::test]
async fn a_longer_appointment_takes_every_seat_of_its_run_or_none() {
    let (app, _db) = app_with(&[]).await;
    let (doctor, run) = doctor_with_run(&app, 4, 1).await;
    let long = book_for(&app, &patient(1), &run[0], "long", Some(45)).await;
    assert!(long["userErrors"].as_array().unwrap().is_empty(), "{long}");
    let slots: Vec<&str> =
        long["appointment"]["slots"].as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(slots, [run[0].as_str(), run[1].as_str(), run[2].as_str()]);
    assert_eq!(long["appointment"]["endAt"].as_str().map(|t| t.contains("10:45")), Some(true), "{long}");
    assert_eq!(app.slot(&run[2]).await["bookedCount"], 1);
    assert_eq!(app.slot(&run[3]).await["bookedCount"], 0);

    // A run that reaches a full slot takes nothing.
    let blocked = book_for(&app, &patient(2), &run[2], "b", Some(30)).await;
    assert_eq!(user_error(&blocked), Some("SLOT_FULL"));
    assert_eq!(app.slot(&run[3]).await["bookedCount"], 0, "all or none");
    // Not exactly covered: past the end of the schedule, or not a whole number of slots.
    for minutes in [90, 20] {
        let refused = book_for(&app, &patient(3), &run[0], &format!("m{minutes}"), Some(minutes)).await;
        assert_eq!(refused["userErrors"][0]["code"], "INVALID_INPUT", "{minutes}: {refused}");
        assert_eq!(refused["userErrors"][0]["field"], json!(["input", "durationMinutes"]));
    }
    // Where a 30-minute appointment could start: only run[3] is free, and alone it is too short.
    let starts = app.gql(None, AVAILABLE, json!({ "d": doctor, "t": tomorrow(), "m": 30 })).await;
    assert_eq!(starts["availableSlots"], json!([]));
    app.cancel(&patient(1), &id_of(&long)).await;
    let starts = app.gql(None, AVAILABLE, json!({ "d": doctor, "t": tomorrow(), "m": 30 })).await;
    let ids: Vec<&str> =
        starts["availableSlots"].as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [run[0].as_str(), run[1].as_str(), run[2].as_str()], "every seat of the run is back");
    app.assert_counts_consistent().await;
}

#[tokio::test]
async fn overlapping_longer_bookings_on_single_seats_never_deadlock() {
    let (app, _db) = app_with(&[]).await;
    let app = Arc::new(app);
    let (_, run) = doctor_with_run(&app, 12, 1).await;
    let n = 30;
    let barrier = Arc::new(Barrier::new(n));
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let (app, barrier, slot) = (Arc::clone(&app), Arc::clone(&barrier), run[i % 10].clone());
            tokio::spawn(async move {
                barrier.wait().await;
                book_for(&app, &patient(500 + i as u64), &slot, "k", Some(45)).await
            })
        })
        .collect();
    let mut taken = 0;
    for t in tasks {
        let answer = t.await.unwrap();
        match user_error(&answer) {
            None => taken += 3,
            Some(code) => assert_eq!(code, "SLOT_FULL", "{answer}"),
        }
    }
    let total: i64 = booked_counts(&app, &run).await.iter().sum();
    assert_eq!(total, taken, "each success took exactly its three seats");
    // However they land, no free run of three slots is left once two have (12 slots).
    assert!(taken >= 6, "the run fits at least two 45-minute appointments: {taken}");
    app.assert_counts_consistent().await;
}

#[tokio::test]
async fn closing_slots_cancels_their_appointments_for_the_clinic() {
    let (app, _db) = app_with(&[]).await;
    let (doctor, run) = doctor_with_run(&app, 4, 2).await;
    let a = id_of(&app.book(&patient(1), &run[1], "a", None).await);
    let b = id_of(&hold(&app, &patient(2), &run[1], "b", None).await);
    let long = id_of(&book_for(&app, &patient(3), &run[2], "c", Some(30)).await);
    let day = tomorrow();
    let range = json!({ "d": doctor, "f": format!("{day}T10:15:00Z"), "t": format!("{day}T10:45:00Z") });

    assert_eq!(app.error_code(Some(&doctor_token_of("999")), CLOSE, range.clone()).await, "FORBIDDEN");
    let closed = app.gql(Some(&crate::helpers::doctor(&doctor)), CLOSE, range.clone()).await["closeSlots"].clone();
    assert_eq!(closed["closed"], 2, "{closed}");
    let mut cancelled: Vec<&str> =
        closed["cancelledAppointments"].as_array().unwrap().iter().map(|a| a["id"].as_str().unwrap()).collect();
    cancelled.sort_unstable();
    let mut expected = [a.as_str(), b.as_str(), long.as_str()];
    expected.sort_unstable();
    assert_eq!(cancelled, expected);
    assert!(closed["cancelledAppointments"].as_array().unwrap().iter().all(|a| a["cancelledBy"] == "CLINIC"));
    // The longer appointment's seat outside the range is given back too.
    assert_eq!(app.slot(&run[3]).await["bookedCount"], 0);

    let again = app.gql(Some(&admin()), CLOSE, range).await["closeSlots"].clone();
    assert_eq!((again["closed"].as_i64(), again["cancelledAppointments"].as_array().map(Vec::len)), (Some(0), Some(0)));
    assert_eq!(user_error(&app.book(&patient(4), &run[1], "x", None).await), Some("SLOT_CLOSED"));
    let listed = app.gql(None, AVAILABLE, json!({ "d": doctor, "t": day, "m": null })).await;
    let ids: Vec<&str> =
        listed["availableSlots"].as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [run[0].as_str(), run[3].as_str()], "closed slots drop out of availableSlots");
    let bad = app
        .gql(
            Some(&admin()),
            CLOSE,
            json!({ "d": doctor, "f": format!("{day}T11:00:00Z"), "t": format!("{day}T10:00:00Z") }),
        )
        .await["closeSlots"]
        .clone();
    assert_eq!(user_error(&bad), Some("INVALID_INPUT"));
    app.assert_counts_consistent().await;
}

fn doctor_token_of(id: &str) -> String {
    crate::helpers::doctor(id)
}
