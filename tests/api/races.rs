//! Concurrency: many tasks released together by a barrier against the real database, on one
//! instance and on two instances sharing the database.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::Barrier;

use crate::helpers::*;

/// Rate limiting is off here: these tests hammer one patient on purpose. And the bulkhead lets
/// bookings wait as long as the client does: these tests are about races, not about shedding
/// load (burst.rs tests `OVERLOADED`), and on a loaded machine 200 bookings at once outwait its
/// default 2 s.
const NO_LIMIT: &[(&str, &str)] = &[("RATE_LIMIT_BOOKINGS", "0"), ("BOOKING_QUEUE_TIMEOUT_MS", "30000")];

/// One or two instances on one fresh database.
async fn instances(two: bool) -> (Vec<Arc<TestApp>>, TestDatabase) {
    let db = TestDatabase::new().await;
    let mut apps = vec![Arc::new(TestApp::spawn_on(&db, NO_LIMIT).await)];
    if two {
        apps.push(Arc::new(TestApp::spawn_on(&db, NO_LIMIT).await));
    }
    (apps, db)
}

/// Runs `n` bookings released together; task `i` books as `token(i)` with key `key(i)`.
async fn race<T, K>(apps: &[Arc<TestApp>], n: usize, slot: &str, token: T, key: K, patient: Option<&str>) -> Vec<Value>
where
    T: Fn(usize) -> String,
    K: Fn(usize) -> String,
{
    let barrier = Arc::new(Barrier::new(n));
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let (app, barrier) = (Arc::clone(&apps[i % apps.len()]), Arc::clone(&barrier));
        let (slot, token, key, patient) = (slot.to_owned(), token(i), key(i), patient.map(str::to_owned));
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            app.book(&token, &slot, &key, patient.as_deref()).await
        }));
    }
    let mut out = Vec::with_capacity(n);
    for t in tasks {
        out.push(t.await.expect("task"));
    }
    out
}

fn booked(answers: &[Value]) -> usize {
    answers.iter().filter(|a| a["appointment"].is_object()).count()
}

async fn many_patients_one_seat(two: bool) {
    let (apps, _db) = instances(two).await;
    let (_, slot) = apps[0].doctor_with_slot(1).await;
    let answers = race(&apps, 200, &slot, |i| patient(1000 + i as u64), |i| format!("k{i}"), None).await;
    assert_eq!(booked(&answers), 1);
    assert!(answers.iter().filter(|a| a["appointment"].is_null()).all(|a| user_error(a) == Some("SLOT_FULL")));
    assert_eq!(apps[0].slot(&slot).await["bookedCount"], 1);
    apps[0].assert_counts_consistent().await;
}

async fn many_patients_ten_seats(two: bool) {
    let (apps, _db) = instances(two).await;
    let (_, slot) = apps[0].doctor_with_slot(10).await;
    let answers = race(&apps, 200, &slot, |i| patient(5000 + i as u64), |i| format!("k{i}"), None).await;
    assert_eq!(booked(&answers), 10);
    assert_eq!(apps[0].slot(&slot).await["bookedCount"], 10);
    apps[0].assert_counts_consistent().await;
}

/// One patient asking for one seat many times at once, each with its own key, on a slot with
/// room for all of them: the overlap rule alone keeps the patient to one seat, and every other
/// attempt reads as `ALREADY_BOOKED` with its seat given back.
async fn one_patient_many_keys(two: bool) {
    let (apps, _db) = instances(two).await;
    let (_, slot) = apps[0].doctor_with_slot(20).await;
    let token = patient(77);
    let answers = race(&apps, 20, &slot, |_| token.clone(), |i| format!("k{i}"), None).await;
    assert_eq!(booked(&answers), 1, "{answers:?}");
    let refused = answers.iter().filter(|a| a["appointment"].is_null());
    assert!(refused.clone().all(|a| user_error(a) == Some("ALREADY_BOOKED")), "{answers:?}");
    assert_eq!(refused.count(), 19);
    assert_eq!(apps[0].slot(&slot).await["bookedCount"], 1);
    apps[0].assert_counts_consistent().await;
}

/// Every one of 50 concurrent retries of one request answers with the same appointment.
fn all_answer_one_appointment(answers: &[Value]) {
    let ids: Vec<&str> = answers.iter().filter_map(|a| a["appointment"]["id"].as_str()).collect();
    assert_eq!(ids.len(), 50, "every retry answers with the appointment: {answers:?}");
    assert!(ids.iter().all(|id| *id == ids[0]));
}

async fn concurrent_retries_one_key(two: bool) {
    let (apps, _db) = instances(two).await;
    let (_, slot) = apps[0].doctor_with_slot(1).await;
    let token = partner("retrying-client");
    let answers = race(&apps, 50, &slot, |_| token.clone(), |_| "same-key".into(), Some("42")).await;
    all_answer_one_appointment(&answers);
    assert_eq!(answers.iter().filter(|a| a["replayed"] == false).count(), 1, "exactly one original");
    assert_eq!(apps[0].slot(&slot).await["bookedCount"], 1);
    apps[0].assert_counts_consistent().await;
}

async fn concurrent_cancels(two: bool) {
    let (apps, _db) = instances(two).await;
    let (_, slot) = apps[0].doctor_with_slot(3).await;
    let token = patient(9);
    let id = apps[0].book(&token, &slot, "k", None).await["appointment"]["id"].as_str().expect("booked").to_owned();
    let barrier = Arc::new(Barrier::new(20));
    let mut tasks = Vec::new();
    for i in 0..20 {
        let (app, barrier, token, id) =
            (Arc::clone(&apps[i % apps.len()]), Arc::clone(&barrier), token.clone(), id.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            app.cancel(&token, &id).await
        }));
    }
    let mut cancelled = 0;
    for t in tasks {
        let answer = t.await.expect("task");
        assert_eq!(answer["appointment"]["status"], "CANCELLED");
        cancelled += usize::from(answer["cancelled"] == true);
    }
    assert_eq!(cancelled, 1, "the seat is released exactly once");
    let state = apps[0].slot(&slot).await;
    assert_eq!((state["bookedCount"].as_i64(), state["version"].as_i64()), (Some(0), Some(2)));
    apps[0].assert_counts_consistent().await;
}

#[tokio::test]
async fn two_hundred_patients_one_seat() {
    many_patients_one_seat(false).await;
}

#[tokio::test]
async fn two_hundred_patients_one_seat_two_instances() {
    many_patients_one_seat(true).await;
}

#[tokio::test]
async fn two_hundred_patients_ten_seats() {
    many_patients_ten_seats(false).await;
}

#[tokio::test]
async fn two_hundred_patients_ten_seats_two_instances() {
    many_patients_ten_seats(true).await;
}

#[tokio::test]
async fn one_patient_twenty_keys_one_seat() {
    one_patient_many_keys(false).await;
}

#[tokio::test]
async fn one_patient_twenty_keys_one_seat_two_instances() {
    one_patient_many_keys(true).await;
}

#[tokio::test]
async fn fifty_concurrent_retries_make_one_appointment() {
    concurrent_retries_one_key(false).await;
}

#[tokio::test]
async fn fifty_concurrent_retries_make_one_appointment_two_instances() {
    concurrent_retries_one_key(true).await;
}

#[tokio::test]
async fn twenty_concurrent_cancels_release_once() {
    concurrent_cancels(false).await;
}

#[tokio::test]
async fn twenty_concurrent_cancels_release_once_two_instances() {
    concurrent_cancels(true).await;
}

#[tokio::test]
async fn mixed_storm_keeps_counts_equal_to_bookings() {
    // Bookings, retries and cancels interleaved on several slots at once.
    let (apps, _db) = instances(true).await;
    let doctor = apps[0].create_doctor("UTC").await;
    let slots = apps[0].publish(&doctor, &tomorrow(), "10:00", "11:00", 15, 3).await;
    let barrier = Arc::new(Barrier::new(120));
    let mut tasks = Vec::new();
    for i in 0..120usize {
        let (app, barrier) = (Arc::clone(&apps[i % 2]), Arc::clone(&barrier));
        let slot = slots[i % slots.len()].clone();
        tasks.push(tokio::spawn(async move {
            let token = patient(100 + (i % 30) as u64);
            barrier.wait().await;
            let answer = app.book(&token, &slot, &format!("k{}", i % 60), None).await;
            if i % 3 == 0 {
                if let Some(id) = answer["appointment"]["id"].as_str() {
                    app.cancel(&token, id).await;
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    apps[0].assert_counts_consistent().await;
}

/// Every kind of write at once from two instances on one database: publishing schedules,
/// creating doctors, booking and cancelling. On SQLite these all contend for the one write lock;
/// each must wait its turn (or, at worst, answer the retryable `OVERLOADED`), never `INTERNAL`.
#[tokio::test]
async fn concurrent_writes_of_every_kind_never_fail() {
    const TASKS: usize = 160;
    let (apps, _db) = instances(true).await;
    let mut doctors = Vec::new();
    let mut slots = Vec::new();
    for _ in 0..4 {
        let doctor = apps[0].create_doctor("UTC").await;
        slots.extend(apps[0].publish(&doctor, &tomorrow(), "08:00", "09:00", 15, 3).await);
        doctors.push(doctor);
    }
    let barrier = Arc::new(Barrier::new(TASKS));
    let mut tasks = Vec::new();
    for i in 0..TASKS {
        let (app, barrier) = (Arc::clone(&apps[i % 2]), Arc::clone(&barrier));
        let (doctor, slot) = (doctors[i % doctors.len()].clone(), slots[i % slots.len()].clone());
        tasks.push(tokio::spawn(async move {
            let date = (chrono::Utc::now().date_naive() + chrono::Days::new(2 + (i / 4) as u64)).to_string();
            let (token, query, vars) = match i % 4 {
                0 => (
                    admin(),
                    "mutation($in:PublishScheduleInput!){publishSchedule(input:$in){created}}",
                    serde_json::json!({ "in": { "doctorId": doctor, "date": date, "startTime": "09:00",
                                                "endTime": "17:00", "slotMinutes": 10, "capacity": 2 } }),
                ),
                1 => (
                    admin(),
                    "mutation{createDoctor(input:{name:\"Dr Load\",specialty:\"general\"}){id}}",
                    serde_json::json!({}),
                ),
                _ => (patient(7000 + i as u64), BOOK, serde_json::json!({ "s": slot, "k": format!("k{i}") })),
            };
            barrier.wait().await;
            let mut answers = vec![app.post(Some(&token), query, vars).await];
            let booked = answers[0].1["data"]["bookAppointment"]["appointment"]["id"].as_str().map(str::to_owned);
            if let (3, Some(id)) = (i % 4, booked) {
                answers.push(
                    app.post(
                        Some(&token),
                        "mutation($id:ID!){cancelAppointment(id:$id){cancelled}}",
                        serde_json::json!({ "id": id }),
                    )
                    .await,
                );
            }
            answers
        }));
    }
    let mut failures = Vec::new();
    for t in tasks {
        for (status, body) in t.await.expect("task") {
            let code = body["errors"][0]["extensions"]["code"].as_str();
            if status != 200 || code.is_some_and(|c| c != "OVERLOADED") {
                failures.push(format!("{status}: {body}"));
            }
        }
    }
    assert!(failures.is_empty(), "{} of the writes failed: {failures:#?}", failures.len());
    apps[0].assert_counts_consistent().await;
}

/// The booking lane (off by default) ends the races the same way: ten seats for 200 patients,
/// and 50 concurrent retries of one key, with the seat operations on a runtime of their own.
#[tokio::test]
async fn with_the_booking_lane_the_races_end_the_same() {
    let db = TestDatabase::new().await;
    let settings = [NO_LIMIT, &[("BOOKING_LANE_THREADS", "2")]].concat();
    let apps = vec![Arc::new(TestApp::spawn_on(&db, &settings).await)];
    let (_, slot) = apps[0].doctor_with_slot(10).await;
    let answers = race(&apps, 200, &slot, |i| patient(7000 + i as u64), |i| format!("k{i}"), None).await;
    assert_eq!(booked(&answers), 10);
    let (_, one) = apps[0].doctor_with_slot(1).await;
    let token = partner("lane-client");
    let answers = race(&apps, 50, &one, |_| token.clone(), |_| "lane-key".into(), Some("43")).await;
    all_answer_one_appointment(&answers);
    apps[0].assert_counts_consistent().await;
}
