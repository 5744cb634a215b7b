//! Publishing schedules: re-runs, time zones and daylight-saving days, bad input.

use serde_json::{json, Value};

use crate::helpers::*;

const PUBLISH: &str = "mutation($in:PublishScheduleInput!){publishSchedule(input:$in){created existing slots{id startAt endAt capacity}}}";

fn input(doctor: &str, date: &str, start: &str, end: &str) -> Value {
    json!({ "in": { "doctorId": doctor, "date": date, "startTime": start, "endTime": end } })
}

#[tokio::test]
async fn republishing_keeps_and_counts_existing_slots() {
    let (app, _db) = TestApp::spawn().await;
    let d = app.create_doctor("UTC").await;
    let first = app.gql(Some(&admin()), PUBLISH, input(&d, &tomorrow(), "09:00", "10:00")).await;
    assert_eq!(
        (first["publishSchedule"]["created"].as_i64(), first["publishSchedule"]["existing"].as_i64()),
        (Some(4), Some(0))
    );
    assert_eq!(first["publishSchedule"]["slots"][0]["capacity"], 1);
    let again = app.gql(Some(&admin()), PUBLISH, input(&d, &tomorrow(), "09:30", "11:00")).await;
    assert_eq!(
        (again["publishSchedule"]["created"].as_i64(), again["publishSchedule"]["existing"].as_i64()),
        (Some(4), Some(2))
    );
    let all = app
        .gql(None, "query($d:ID!,$t:Date!){doctor(id:$d){slots(date:$t){startAt}}}", json!({ "d": d, "t": tomorrow() }))
        .await;
    assert_eq!(all["doctor"]["slots"].as_array().unwrap().len(), 8);
}

#[tokio::test]
async fn daylight_saving_days_have_fewer_or_more_slots() {
    let (app, _db) = TestApp::spawn().await;
    let d = app.create_doctor("America/New_York").await;
    // 2030-03-10: 02:00 EST jumps to 03:00 EDT; 2030-11-03: 02:00 EDT goes back to 01:00 EST.
    let spring = app
        .gql(Some(&admin()), PUBLISH, json!({ "in": { "doctorId": d, "date": "2030-03-10", "startTime": "00:00", "endTime": "04:00", "slotMinutes": 60 } }))
        .await;
    let starts: Vec<&str> =
        spring["publishSchedule"]["slots"].as_array().unwrap().iter().map(|s| s["startAt"].as_str().unwrap()).collect();
    assert_eq!(starts, ["2030-03-10T05:00:00+00:00", "2030-03-10T06:00:00+00:00", "2030-03-10T07:00:00+00:00"]);
    let fall = app
        .gql(Some(&admin()), PUBLISH, json!({ "in": { "doctorId": d, "date": "2030-11-03", "startTime": "00:00", "endTime": "04:00", "slotMinutes": 60 } }))
        .await;
    assert_eq!(fall["publishSchedule"]["slots"].as_array().unwrap().len(), 5);

    // Listing by date means the doctor's day: 23:00 local on the 9th is not on the 10th.
    app.gql(Some(&admin()), PUBLISH, json!({ "in": { "doctorId": d, "date": "2030-03-09", "startTime": "23:00", "endTime": "24:00", "slotMinutes": 60 } }))
        .await;
    let q =
        "query($d:ID!,$t:Date!){doctor(id:$d){slots(date:$t){startAt}} availableSlots(doctorId:$d,date:$t){startAt}}";
    let day = app.gql(None, q, json!({ "d": d, "t": "2030-03-10" })).await;
    assert_eq!(day["doctor"]["slots"].as_array().unwrap().len(), 3);
    assert_eq!(day["availableSlots"].as_array().unwrap().len(), 3);
    let before = app.gql(None, q, json!({ "d": d, "t": "2030-03-09" })).await;
    assert_eq!(before["doctor"]["slots"][0]["startAt"], "2030-03-10T04:00:00+00:00");
}

#[tokio::test]
async fn bad_schedule_input_is_invalid_input() {
    let (app, _db) = TestApp::spawn().await;
    let d = app.create_doctor("UTC").await;
    let t = tomorrow();
    let cases = [
        json!({ "doctorId": d, "date": t, "startTime": "10:00", "endTime": "10:00" }),
        json!({ "doctorId": d, "date": t, "startTime": "11:00", "endTime": "10:00" }),
        json!({ "doctorId": d, "date": t, "startTime": "9:00", "endTime": "10:00" }),
        json!({ "doctorId": d, "date": t, "startTime": "09:00", "endTime": "25:00" }),
        json!({ "doctorId": d, "date": t, "startTime": "09:00", "endTime": "10:00", "slotMinutes": 0 }),
        json!({ "doctorId": d, "date": t, "startTime": "09:00", "endTime": "10:00", "capacity": 0 }),
        json!({ "doctorId": d, "date": t, "startTime": "09:00", "endTime": "10:00", "capacity": -5 }),
        json!({ "doctorId": d, "date": "2020-01-01", "startTime": "09:00", "endTime": "10:00" }),
        json!({ "doctorId": "999999", "date": t, "startTime": "09:00", "endTime": "10:00" }),
        json!({ "doctorId": "abc", "date": t, "startTime": "09:00", "endTime": "10:00" }),
    ];
    for case in cases {
        assert_eq!(app.error_code(Some(&admin()), PUBLISH, json!({ "in": case })).await, "INVALID_INPUT", "{case}");
    }
    for bad_date in ["2030-1-1", "2030-01-01T00:00:00Z", "tomorrow", "2030-02-30"] {
        let code = app
            .error_code(
                Some(&admin()),
                PUBLISH,
                json!({ "in": { "doctorId": d, "date": bad_date, "startTime": "09:00", "endTime": "10:00" } }),
            )
            .await;
        assert_eq!(code, "BAD_REQUEST", "{bad_date}");
    }
    let bad_tz = "mutation{createDoctor(input:{name:\"x\",timezone:\"Mars/Olympus\"}){id}}";
    assert_eq!(app.error_code(Some(&admin()), bad_tz, json!({})).await, "INVALID_INPUT");
    let empty_name = "mutation{createDoctor(input:{name:\"  \"}){id}}";
    assert_eq!(app.error_code(Some(&admin()), empty_name, json!({})).await, "INVALID_INPUT");
}

#[tokio::test]
async fn past_slots_are_listed_but_never_bookable() {
    let (app, _db) = TestApp::spawn().await;
    let d = app.create_doctor("UTC").await;
    let today = chrono::Utc::now().date_naive().format("%Y-%m-%d").to_string();
    let slots = app.publish(&d, &today, "00:00", "00:15", 15, 1).await;
    assert_eq!(user_error(&app.book(&patient(1), &slots[0], "k", None).await), Some("SLOT_IN_PAST"));
    let q = "query($d:ID!,$t:Date!){doctor(id:$d){slots(date:$t){id}} availableSlots(doctorId:$d,date:$t){id}}";
    let listed = app.gql(None, q, json!({ "d": d, "t": today })).await;
    assert_eq!(listed["doctor"]["slots"].as_array().unwrap().len(), 1);
    assert_eq!(listed["availableSlots"], json!([]));
}
