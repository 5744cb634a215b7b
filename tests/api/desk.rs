//! The day at the front desk: check-in, completion and no-show (their windows, roles, races
//! and seats), the three webhook events, FHIR statuses, the day sheet, and the no-show limit.
//!
//! A visit that has to have started (a no-show) is a slot published a minute ahead and waited
//! for: the server's clock is the real one.

use std::sync::Arc;

use chrono::{DateTime, DurationRound, TimeDelta, Timelike, Utc};
use serde_json::{json, Value};
use tokio::sync::Barrier;

use crate::{
    helpers::{admin, doctor, partner, patient, tomorrow, user_error, TestApp, TestDatabase, BOOK},
    webhooks::{verifier, verify, Receiver, Reply, LOCAL},
};

const FIELDS: &str = "appointment{id status arrivedAt completedAt} changed userErrors{code field}";

/// Runs one desk mutation (`checkInAppointment`, `completeAppointment`, `markNoShow`) as
/// `token`; returns the status and the whole answer.
async fn post_move(app: &TestApp, token: Option<&str>, op: &str, id: &str) -> (u16, Value) {
    app.post(token, &format!("mutation($id:ID!){{{op}(id:$id){{{FIELDS}}}}}"), json!({ "id": id })).await
}

/// Runs one desk mutation that must not fail at the top level; returns its payload.
async fn desk(app: &TestApp, token: &str, op: &str, id: &str) -> Value {
    let (status, body) = post_move(app, Some(token), op, id).await;
    assert!(status == 200 && body.get("errors").is_none(), "{op}: {status} {body}");
    body["data"][op].clone()
}

/// The top-level error code of a desk mutation.
async fn desk_error(app: &TestApp, token: Option<&str>, op: &str, id: &str) -> String {
    let (_, body) = post_move(app, token, op, id).await;
    body["errors"][0]["extensions"]["code"].as_str().unwrap_or_else(|| panic!("no error in {body}")).to_owned()
}

/// A UTC doctor with one slot of `capacity` starting `ahead` from now plus 15–75 s (a whole
/// minute), five minutes long (less before midnight); returns (doctor, slot, start).
async fn slot_ahead(app: &TestApp, ahead: TimeDelta, capacity: i32) -> (String, String, DateTime<Utc>) {
    let start = (Utc::now() + ahead + TimeDelta::seconds(75)).duration_trunc(TimeDelta::minutes(1)).unwrap();
    let minute = start.hour() * 60 + start.minute();
    let end = (minute + 5).min(24 * 60);
    let doctor_id = app.create_doctor("UTC").await;
    let date = start.date_naive().format("%Y-%m-%d").to_string();
    let clock = |m: u32| format!("{:02}:{:02}", m / 60, m % 60);
    let slots = app.publish(&doctor_id, &date, &clock(minute), &clock(end), (end - minute) as i32, capacity).await;
    (doctor_id, slots[0].clone(), start)
}

/// Sleeps until just after `at`.
async fn wait_until(at: DateTime<Utc>) {
    let left = (at - Utc::now() + TimeDelta::milliseconds(300)).to_std().unwrap_or_default();
    tokio::time::sleep(left).await;
}

/// Books `slot` for `patient_id` as that patient; returns the appointment id.
async fn booked(app: &TestApp, slot: &str, patient_id: u64, key: &str) -> String {
    let b = app.book(&patient(patient_id), slot, key, None).await;
    b["appointment"]["id"].as_str().unwrap_or_else(|| panic!("booked: {b}")).to_owned()
}

async fn fhir_status(app: &TestApp, id: &str) -> String {
    let resp =
        app.client.get(format!("{}/fhir/Appointment/{id}", app.address)).bearer_auth(admin()).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let v: Value = resp.json().await.unwrap();
    v["status"].as_str().unwrap().to_owned()
}

async fn no_show_count(app: &TestApp, token: &str, patient_id: u64) -> Value {
    let q = "query($p:ID){patientContact(patientId:$p){patientId noShowCount}}";
    app.gql(Some(token), q, json!({ "p": patient_id.to_string() })).await["patientContact"]["noShowCount"].clone()
}

#[tokio::test]
async fn check_in_then_complete_keeps_the_seat_and_each_repeat_changes_nothing() {
    let (app, _db) = TestApp::spawn().await;
    let (d, slot, _) = slot_ahead(&app, TimeDelta::minutes(30), 2).await;
    let id = booked(&app, &slot, 77, "k1").await;
    let before = app.slot(&slot).await;
    let doc = doctor(&d);

    // Completing needs an arrival.
    let p = desk(&app, &doc, "completeAppointment", &id).await;
    assert_eq!((user_error(&p), p["changed"].clone()), (Some("APPOINTMENT_NOT_ACTIVE"), json!(false)), "{p}");

    let p = desk(&app, &doc, "checkInAppointment", &id).await;
    assert_eq!(p["changed"], true, "{p}");
    assert_eq!(p["appointment"]["status"], "ARRIVED");
    assert!(p["appointment"]["arrivedAt"].is_string() && p["appointment"]["completedAt"].is_null(), "{p}");
    let again = desk(&app, &admin(), "checkInAppointment", &id).await;
    assert_eq!((again["changed"].clone(), again["appointment"]["status"].clone()), (json!(false), json!("ARRIVED")));
    assert_eq!(again["appointment"]["arrivedAt"], p["appointment"]["arrivedAt"]);
    assert_eq!(fhir_status(&app, &id).await, "arrived");

    // Not any more cancellable, reschedulable or a no-show.
    let c = app.cancel(&patient(77), &id).await;
    assert_eq!((user_error(&c), c["cancelled"].clone()), (Some("APPOINTMENT_NOT_ACTIVE"), json!(false)), "{c}");
    let p = desk(&app, &doc, "markNoShow", &id).await;
    assert_eq!(user_error(&p), Some("APPOINTMENT_NOT_ACTIVE"), "{p}");

    let p = desk(&app, &admin(), "completeAppointment", &id).await;
    assert_eq!((p["changed"].clone(), p["appointment"]["status"].clone()), (json!(true), json!("FULFILLED")));
    assert!(p["appointment"]["completedAt"].is_string(), "{p}");
    let again = desk(&app, &doc, "completeAppointment", &id).await;
    assert_eq!((again["changed"].clone(), again["appointment"]["status"].clone()), (json!(false), json!("FULFILLED")));
    let p = desk(&app, &doc, "checkInAppointment", &id).await;
    assert_eq!(user_error(&p), Some("APPOINTMENT_NOT_ACTIVE"), "{p}");
    assert_eq!(fhir_status(&app, &id).await, "fulfilled");

    // The seat stays taken, and live availability saw no change at all.
    assert_eq!(app.slot(&slot).await, before);
    assert_eq!(before["bookedCount"], 1);
    app.assert_counts_consistent().await;
    // The patient sees its own status; a cancelled appointment is not the desk's to move.
    let mine = app.gql(Some(&patient(77)), "{myAppointments{id status}}", json!({})).await;
    assert_eq!(mine["myAppointments"], json!([{ "id": id, "status": "FULFILLED" }]));
    let other = booked(&app, &slot, 78, "k2").await;
    app.cancel(&patient(78), &other).await;
    let p = desk(&app, &doc, "checkInAppointment", &other).await;
    assert_eq!(user_error(&p), Some("APPOINTMENT_NOT_ACTIVE"), "{p}");
}

#[tokio::test]
async fn only_admins_and_the_appointments_doctor_move_it() {
    let (app, _db) = TestApp::spawn().await;
    let (d, slot, _) = slot_ahead(&app, TimeDelta::minutes(30), 3).await;
    let (other_doctor, _) = app.doctor_with_slot(1).await;
    let own = booked(&app, &slot, 77, "k1").await;
    let acme = partner("acme");
    let by_partner = app.book(&acme, &slot, "k2", Some("78")).await["appointment"]["id"].as_str().unwrap().to_owned();
    for op in ["checkInAppointment", "completeAppointment", "markNoShow"] {
        // Those who may not see it: as if it did not exist.
        for token in [doctor(&other_doctor), patient(79), partner("other")] {
            let p = desk(&app, &token, op, &own).await;
            assert_eq!((user_error(&p), p["appointment"].clone()), (Some("APPOINTMENT_NOT_FOUND"), Value::Null));
        }
        // Those who see it but are not the desk.
        assert_eq!(desk_error(&app, Some(&patient(77)), op, &own).await, "FORBIDDEN");
        assert_eq!(desk_error(&app, Some(&acme), op, &by_partner).await, "FORBIDDEN");
        assert_eq!(desk_error(&app, None, op, &own).await, "UNAUTHENTICATED");
        let p = desk(&app, &admin(), op, "999999").await;
        assert_eq!(user_error(&p), Some("APPOINTMENT_NOT_FOUND"));
        let p = desk(&app, &admin(), op, "x").await;
        assert_eq!(user_error(&p), Some("INVALID_INPUT"));
    }
    // Nothing moved.
    let p = desk(&app, &doctor(&d), "checkInAppointment", &own).await;
    assert_eq!(p["changed"], true, "{p}");
}

#[tokio::test]
async fn check_in_opens_an_hour_ahead_and_a_no_show_waits_for_the_start() {
    let (app, _db) = TestApp::spawn().await;
    let d = app.create_doctor("UTC").await;
    let later = app.publish(&d, &tomorrow(), "12:00", "12:15", 15, 1).await;
    let far = booked(&app, &later[0], 77, "far").await;
    let p = desk(&app, &doctor(&d), "checkInAppointment", &far).await;
    assert_eq!((user_error(&p), p["userErrors"][0]["field"].clone()), (Some("INVALID_INPUT"), json!(["id"])));

    let (d, slot, start) = slot_ahead(&app, TimeDelta::zero(), 1).await;
    let id = booked(&app, &slot, 78, "soon").await;
    let p = desk(&app, &doctor(&d), "markNoShow", &id).await;
    assert_eq!(user_error(&p), Some("INVALID_INPUT"), "before the start: {p}");
    wait_until(start).await;
    let p = desk(&app, &doctor(&d), "markNoShow", &id).await;
    assert_eq!((p["changed"].clone(), p["appointment"]["status"].clone()), (json!(true), json!("NOSHOW")), "{p}");
    assert!(p["appointment"]["arrivedAt"].is_null());
    let again = desk(&app, &admin(), "markNoShow", &id).await;
    assert_eq!(again["changed"], false);
    let p = desk(&app, &doctor(&d), "checkInAppointment", &id).await;
    assert_eq!(user_error(&p), Some("APPOINTMENT_NOT_ACTIVE"));
    assert_eq!(fhir_status(&app, &id).await, "noshow");
    assert_eq!(app.slot(&slot).await["bookedCount"], 1, "a no-show keeps its seat");
    app.assert_counts_consistent().await;
}

#[tokio::test]
async fn twenty_desks_checking_in_at_once_change_it_once() {
    let (app, _db) = TestApp::spawn().await;
    let app = Arc::new(app);
    let (d, slot, _) = slot_ahead(&app, TimeDelta::minutes(30), 1).await;
    let id = booked(&app, &slot, 77, "k").await;
    let barrier = Arc::new(Barrier::new(20));
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let (app, barrier, id) = (Arc::clone(&app), Arc::clone(&barrier), id.clone());
            let token = if i % 2 == 0 { doctor(&d) } else { admin() };
            tokio::spawn(async move {
                barrier.wait().await;
                desk(&app, &token, "checkInAppointment", &id).await
            })
        })
        .collect();
    let mut changed = 0;
    for t in tasks {
        let p = t.await.unwrap();
        assert_eq!(p["appointment"]["status"], "ARRIVED", "{p}");
        changed += usize::from(p["changed"] == true);
    }
    assert_eq!(changed, 1);
    app.assert_counts_consistent().await;
}

#[tokio::test]
async fn a_cancel_racing_a_check_in_one_wins_and_the_other_is_refused() {
    let (app, _db) = TestApp::spawn().await;
    let app = Arc::new(app);
    let (d, slot, _) = slot_ahead(&app, TimeDelta::minutes(30), 8).await;
    for round in 0..8u64 {
        let id = booked(&app, &slot, 100 + round, &format!("k{round}")).await;
        let barrier = Arc::new(Barrier::new(2));
        let cancel = {
            let (app, barrier, id) = (Arc::clone(&app), Arc::clone(&barrier), id.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                app.cancel(&patient(100 + round), &id).await
            })
        };
        let check_in = {
            let (app, barrier, id, d) = (Arc::clone(&app), Arc::clone(&barrier), id.clone(), d.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                desk(&app, &doctor(&d), "checkInAppointment", &id).await
            })
        };
        let (c, k) = (cancel.await.unwrap(), check_in.await.unwrap());
        let cancelled = c["cancelled"] == true;
        let arrived = k["changed"] == true;
        assert!(cancelled != arrived, "exactly one wins: {c} {k}");
        if cancelled {
            assert_eq!(user_error(&k), Some("APPOINTMENT_NOT_ACTIVE"), "{k}");
        } else {
            assert_eq!(user_error(&c), Some("APPOINTMENT_NOT_ACTIVE"), "{c}");
        }
    }
    app.assert_counts_consistent().await;
}

#[tokio::test]
async fn partners_get_the_desks_events_and_patients_no_messages() {
    let python = verifier();
    let database = TestDatabase::new().await;
    let app = TestApp::spawn_on(&database, LOCAL).await;
    let mine = Receiver::start(vec![], Reply::Status(204)).await;
    let theirs = Receiver::start(vec![], Reply::Status(204)).await;
    let acme = partner("acme");
    let (_, secret) = app.endpoint(&acme, &mine.url(), None).await;
    app.endpoint(&partner("other"), &theirs.url(), None).await;
    let (d, slot, start) = slot_ahead(&app, TimeDelta::zero(), 2).await;
    let mut ids = Vec::new();
    for (key, patient_id) in [("a", "77"), ("b", "78")] {
        let set = "mutation($p:ID){setPatientContact(input:{patientId:$p,email:\"p@example.org\"}){userErrors{code}}}";
        app.gql(Some(&acme), set, json!({ "p": patient_id })).await;
        let b = app.book(&acme, &slot, key, Some(patient_id)).await;
        ids.push(b["appointment"]["id"].as_str().unwrap().to_owned());
    }
    let doc = doctor(&d);
    assert_eq!(desk(&app, &doc, "checkInAppointment", &ids[0]).await["changed"], true);
    assert_eq!(desk(&app, &doc, "completeAppointment", &ids[0]).await["changed"], true);
    wait_until(start).await;
    assert_eq!(desk(&app, &doc, "markNoShow", &ids[1]).await["changed"], true);

    let got = mine.wait_for(5).await;
    let of = |kind: &str| got.iter().find(|r| r.json()["type"] == kind).unwrap_or_else(|| panic!("no {kind}"));
    for (kind, id, status) in [
        ("appointment.arrived", &ids[0], "ARRIVED"),
        ("appointment.fulfilled", &ids[0], "FULFILLED"),
        ("appointment.noshow", &ids[1], "NOSHOW"),
    ] {
        let a = of(kind).json()["data"]["appointment"].clone();
        assert_eq!((a["id"].as_str(), a["status"].as_str()), (Some(id.as_str()), Some(status)), "{a}");
        assert_eq!(a["doctorId"], json!(d));
        if let Some(python) = &python {
            assert_eq!(verify(python, &[(of(kind), &secret)]), vec!["ok".to_owned()]);
        }
    }
    let arrived = of("appointment.arrived").json()["data"]["appointment"].clone();
    assert!(arrived["arrivedAt"].is_string() && arrived["completedAt"].is_null(), "as the event left it: {arrived}");
    assert!(of("appointment.fulfilled").json()["data"]["appointment"]["completedAt"].is_string());
    assert_eq!(got.len(), 5, "two bookings and three desk events");
    assert!(theirs.requests().is_empty(), "another partner's endpoint hears nothing of them");

    // The patients were told of their bookings only.
    use sea_orm::{ConnectionTrait, Statement};
    let conn = app.db.conn();
    let sql = "SELECT COUNT(*) AS n FROM patient_message WHERE event IN ('ARRIVED', 'FULFILLED', 'NOSHOW')";
    let row = conn.query_one_raw(Statement::from_string(conn.get_database_backend(), sql)).await.unwrap().unwrap();
    assert_eq!(row.try_get::<i64>("", "n").unwrap(), 0);
    let sql = "SELECT COUNT(*) AS n FROM patient_message WHERE event = 'BOOKED'";
    let row = conn.query_one_raw(Statement::from_string(conn.get_database_backend(), sql)).await.unwrap().unwrap();
    assert_eq!(row.try_get::<i64>("", "n").unwrap(), 2);
}

const SHEET: &str = "query($d:ID!,$t:Date!){daySheet(doctorId:$d,date:$t){id status patientId slot{id startAt}}}";

#[tokio::test]
async fn the_day_sheet_lists_the_doctors_local_day_by_start_then_id() {
    let database = TestDatabase::new().await;
    let app = TestApp::spawn_on(&database, &[("HOLD_TTL_SECS", "1"), ("HOLD_EXPIRY_POLL_MS", "100")]).await;
    let d = app.create_doctor("America/New_York").await;
    let day = tomorrow();
    let next_day = (Utc::now().date_naive() + chrono::Days::new(2)).format("%Y-%m-%d").to_string();
    // 21:00–22:00 in New York is already the next day in UTC: still this day's sheet.
    let slots = app.publish(&d, &day, "21:00", "22:00", 20, 3).await;
    let other_day = app.publish(&d, &next_day, "09:00", "09:20", 20, 1).await;
    let (other_doctor, elsewhere) = app.doctor_with_slot(1).await;
    let late = booked(&app, &slots[2], 77, "a").await;
    let first = booked(&app, &slots[0], 78, "b").await;
    let second = booked(&app, &slots[0], 79, "c").await;
    let cancelled = booked(&app, &slots[1], 80, "d").await;
    app.cancel(&patient(80), &cancelled).await;
    let hold = "mutation($s:ID!,$k:String!){holdSlot(input:{slotId:$s,idempotencyKey:$k}){appointment{id}}}";
    let held = app.gql(Some(&patient(81)), hold, json!({ "s": slots[1], "k": "e" })).await;
    let expired = held["holdSlot"]["appointment"]["id"].as_str().unwrap().to_owned();
    booked(&app, &other_day[0], 82, "f").await;
    booked(&app, &elsewhere, 83, "g").await;
    for _ in 0..200 {
        let q = "query($id:ID!){appointment(id:$id){status}}";
        let a = app.gql(Some(&admin()), q, json!({ "id": expired })).await;
        if a["appointment"]["status"] == "EXPIRED" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    let sheet = app.gql(Some(&doctor(&d)), SHEET, json!({ "d": d, "t": day })).await["daySheet"].clone();
    let ids: Vec<&str> = sheet.as_array().unwrap().iter().map(|a| a["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [first.as_str(), second.as_str(), cancelled.as_str(), late.as_str()], "{sheet}");
    assert_eq!(sheet[2]["status"], "CANCELLED");
    assert_eq!(sheet[0]["patientId"], "78");
    assert_eq!(app.gql(Some(&admin()), SHEET, json!({ "d": d, "t": day })).await["daySheet"], sheet);
    let empty = app.gql(Some(&admin()), SHEET, json!({ "d": "999999", "t": day })).await;
    assert_eq!(empty["daySheet"], json!([]));

    for token in [doctor(&other_doctor), patient(77), partner("acme")] {
        assert_eq!(app.error_code(Some(&token), SHEET, json!({ "d": d, "t": day })).await, "FORBIDDEN");
    }
    assert_eq!(app.error_code(None, SHEET, json!({ "d": d, "t": day })).await, "UNAUTHENTICATED");
}

#[tokio::test]
async fn a_patient_at_the_no_show_limit_is_refused_new_seats_but_not_by_admins() {
    let database = TestDatabase::new().await;
    let app = TestApp::spawn_on(&database, &[("NO_SHOW_LIMIT", "1")]).await;
    let p = patient(77);
    app.gql(Some(&p), "mutation{setPatientContact(input:{phone:\"+15555550100\"}){userErrors{code}}}", json!({})).await;
    assert_eq!(no_show_count(&app, &p, 77).await, 0);
    let (d, slot, start) = slot_ahead(&app, TimeDelta::zero(), 1).await;
    let missed = booked(&app, &slot, 77, "missed").await;
    // Booked before the no-show: a retry still replays it.
    wait_until(start).await;
    assert_eq!(desk(&app, &doctor(&d), "markNoShow", &missed).await["changed"], true);
    assert_eq!(no_show_count(&app, &p, 77).await, 1);
    assert_eq!(no_show_count(&app, &admin(), 77).await, 1);
    // `me` says the same to the patient, and nothing to anyone else.
    let me = |token: String| {
        let app = &app;
        async move { app.gql(Some(&token), "{me{noShowCount}}", json!({})).await["me"]["noShowCount"].clone() }
    };
    assert_eq!(me(p.clone()).await, 1);
    assert!(me(admin()).await.is_null());

    let later = app.publish(&d, &tomorrow(), "10:00", "11:00", 15, 2).await;
    let b = app.book(&p, &later[0], "next", None).await;
    assert_eq!((user_error(&b), b["appointment"].clone()), (Some("NO_SHOW_LIMIT_REACHED"), Value::Null), "{b}");
    let hold = "mutation($s:ID!,$k:String!,$p:ID){holdSlot(input:{slotId:$s,idempotencyKey:$k,patientId:$p})\
                {appointment{id status} userErrors{code}}}";
    let h = app.gql(Some(&p), hold, json!({ "s": later[1], "k": "hold" })).await;
    assert_eq!(user_error(&h["holdSlot"]), Some("NO_SHOW_LIMIT_REACHED"));
    let b = app.book(&partner("acme"), &later[0], "pk", Some("77")).await;
    assert_eq!(user_error(&b), Some("NO_SHOW_LIMIT_REACHED"));
    // A retry of the earlier booking is still its replay.
    let again = app.gql(Some(&p), BOOK, json!({ "s": slot, "k": "missed" })).await["bookAppointment"].clone();
    assert_eq!((again["replayed"].clone(), again["appointment"]["id"].clone()), (json!(true), json!(missed)));
    // No seat was taken by the refusals.
    assert_eq!(app.slot(&later[0]).await["bookedCount"], 0);
    // An admin books for the patient; other patients book as before.
    let b = app.book(&admin(), &later[0], "ak", Some("77")).await;
    assert_eq!(b["appointment"]["status"], "BOOKED", "{b}");
    let b = app.book(&patient(78), &later[1], "other", None).await;
    assert_eq!(b["appointment"]["status"], "BOOKED", "{b}");
    app.assert_counts_consistent().await;
}
