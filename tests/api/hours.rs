//! Working hours, the planning horizon and time off (contract, part three): patterns make the
//! slots, any number of horizon passes make each slot once, a pattern change racing bookings
//! never leaves a seat in a removed slot, time off closes and keeps the horizon out.

use std::{collections::BTreeSet, sync::Arc};

use chrono::{Datelike, NaiveDate};
use clinic_booking::booking::BookingService;
use serde_json::{json, Value};
use tokio::sync::Barrier;

use crate::helpers::*;

const SET: &str = "mutation($in:SetWorkingHoursInput!){setWorkingHours(input:$in){workingHours{validFrom validUntil \
    weekly{weekday startTime endTime slotMinutes capacity}} created removed conflicts{id status} \
    userErrors{code field message}}}";
const DOCTOR: &str = "query($id:ID!,$d:Date!){doctor(id:$id){scheduledThrough workingHours{validFrom validUntil \
    weekly{weekday startTime endTime}} slots(date:$d){id startAt endAt capacity closed}}}";
const ADD_OFF: &str = "mutation($in:AddTimeOffInput!){addTimeOff(input:$in){timeOff{id from to reason doctor{id}} \
    closed cancelledAppointments{id status cancelledBy} userErrors{code field}}}";
const REMOVE_OFF: &str =
    "mutation($id:ID!){removeTimeOff(id:$id){timeOff{id} removed reopened userErrors{code field}}}";

/// The day `n` days after today (UTC).
fn day(n: u64) -> NaiveDate {
    chrono::Utc::now().date_naive() + chrono::Days::new(n)
}

/// Today in the zone `tz`.
fn today_in(tz: &str) -> NaiveDate {
    chrono::Utc::now().with_timezone(&tz.parse::<chrono_tz::Tz>().unwrap()).date_naive()
}

/// Slots in the database, all doctors'.
async fn slot_count(app: &TestApp) -> i64 {
    use sea_orm::{ConnectionTrait, Statement};
    let stmt = Statement::from_string(app.db.conn().get_database_backend(), "SELECT COUNT(*) FROM time_slot");
    app.db.conn().query_one_raw(stmt).await.unwrap().unwrap().try_get_by_index::<i64>(0).unwrap()
}

fn text(d: NaiveDate) -> String {
    d.format("%Y-%m-%d").to_string()
}

/// Every weekday, `start`–`end`, `minutes`-minute slots.
fn every_day(start: &str, end: &str, minutes: i32) -> Vec<Value> {
    ["MONDAY", "TUESDAY", "WEDNESDAY", "THURSDAY", "FRIDAY", "SATURDAY", "SUNDAY"]
        .iter()
        .map(|d| json!({ "weekday": d, "startTime": start, "endTime": end, "slotMinutes": minutes }))
        .collect()
}

fn weekday_of(d: NaiveDate) -> &'static str {
    ["MONDAY", "TUESDAY", "WEDNESDAY", "THURSDAY", "FRIDAY", "SATURDAY", "SUNDAY"]
        [d.weekday().num_days_from_monday() as usize]
}

async fn set_hours(app: &TestApp, token: &str, doctor: &str, from: NaiveDate, weekly: Vec<Value>) -> Value {
    let input = json!({ "doctorId": doctor, "validFrom": text(from), "weekly": weekly });
    app.gql(Some(token), SET, json!({ "in": input })).await["setWorkingHours"].clone()
}

async fn doctor_day(app: &TestApp, doctor: &str, d: NaiveDate) -> Value {
    app.gql(None, DOCTOR, json!({ "id": doctor, "d": text(d) })).await["doctor"].clone()
}

fn slot_ids(doctor: &Value) -> Vec<String> {
    doctor["slots"].as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap().to_owned()).collect()
}

async fn app_with(extra: &[(&str, &str)]) -> (TestApp, TestDatabase) {
    let db = TestDatabase::new().await;
    let mut settings = vec![("RATE_LIMIT_BOOKINGS", "0")];
    settings.extend_from_slice(extra);
    (TestApp::spawn_on(&db, &settings).await, db)
}

/// A service on the test server's database, as another instance would run it.
fn instance(app: &TestApp, days: u32) -> BookingService {
    BookingService::new(app.db.clone(), Arc::new(tokio::sync::Notify::new())).with_horizon_days(days)
}

#[tokio::test]
async fn working_hours_make_the_days_up_to_the_horizon_once() {
    let (app, _db) = app_with(&[("SCHEDULE_HORIZON_DAYS", "3")]).await;
    let doctor = app.create_doctor("UTC").await;
    assert!(doctor_day(&app, &doctor, day(1)).await["scheduledThrough"].is_null(), "null before any hours");
    let set = set_hours(&app, &admin(), &doctor, day(1), every_day("09:00", "10:00", 15)).await;
    assert_eq!(set["userErrors"], json!([]), "{set}");
    assert_eq!(set["created"], 12, "days 1 to 3, four slots each: {set}");
    assert_eq!(set["workingHours"]["validFrom"], text(day(1)));
    assert_eq!(set["workingHours"]["weekly"].as_array().unwrap().len(), 7);
    assert_eq!(set["workingHours"]["weekly"][0]["slotMinutes"], 15);
    let read = doctor_day(&app, &doctor, day(2)).await;
    assert_eq!(read["scheduledThrough"], text(day(3)));
    assert_eq!(read["slots"].as_array().unwrap().len(), 4);
    assert_eq!(read["slots"][0]["startAt"], format!("{}T09:00:00+00:00", text(day(2))));
    assert!(doctor_day(&app, &doctor, day(4)).await["slots"].as_array().unwrap().is_empty(), "beyond the horizon");
    assert!(doctor_day(&app, &doctor, day(0)).await["slots"].as_array().unwrap().is_empty(), "before validFrom");

    // The same pattern from the same day again changes nothing.
    let again = set_hours(&app, &doctor_token(&doctor), &doctor, day(1), every_day("09:00", "10:00", 15)).await;
    assert_eq!((again["created"].as_i64(), again["removed"].as_i64()), (Some(0), Some(0)), "{again}");
    // A pass of the horizon finds nothing to do.
    assert_eq!(instance(&app, 3).roll_horizon(None).await.unwrap().created, 0);

    // A later pattern ends this one the day before.
    let later = set_hours(&app, &admin(), &doctor, day(3), every_day("09:00", "09:30", 15)).await;
    assert_eq!((later["created"].as_i64(), later["removed"].as_i64()), (Some(0), Some(2)), "{later}");
    let patterns = doctor_day(&app, &doctor, day(1)).await["workingHours"].clone();
    assert_eq!(patterns[0]["validUntil"], text(day(2)), "{patterns}");
    assert_eq!(patterns[1]["validFrom"], text(day(3)));
    assert!(patterns[1]["validUntil"].is_null());
    app.assert_counts_consistent().await;
}

fn doctor_token(id: &str) -> String {
    doctor(id)
}

#[tokio::test]
async fn bad_working_hours_are_refused_and_change_nothing() {
    let (app, _db) = app_with(&[("SCHEDULE_HORIZON_DAYS", "2")]).await;
    let doctor = app.create_doctor("UTC").await;
    let other = app.create_doctor("UTC").await;
    let overlap = vec![
        json!({ "weekday": "MONDAY", "startTime": "09:00", "endTime": "12:00" }),
        json!({ "weekday": "MONDAY", "startTime": "11:00", "endTime": "13:00" }),
    ];
    let empty = vec![json!({ "weekday": "MONDAY", "startTime": "09:00", "endTime": "09:10", "slotMinutes": 15 })];
    let backwards = vec![json!({ "weekday": "MONDAY", "startTime": "10:00", "endTime": "09:00" })];
    let no_seat = vec![json!({ "weekday": "MONDAY", "startTime": "09:00", "endTime": "10:00", "capacity": 0 })];
    for weekly in [overlap, empty, backwards, no_seat] {
        let refused = set_hours(&app, &admin(), &doctor, day(1), weekly).await;
        assert_eq!(user_error(&refused), Some("INVALID_INPUT"), "{refused}");
        assert_eq!(refused["userErrors"][0]["field"], json!(["input", "weekly"]), "{refused}");
    }
    let past = set_hours(&app, &admin(), &doctor, day(0) - chrono::Days::new(1), every_day("09:00", "10:00", 15)).await;
    assert_eq!(user_error(&past), Some("INVALID_INPUT"));
    assert_eq!(past["userErrors"][0]["field"], json!(["input", "validFrom"]));
    let unknown = set_hours(&app, &admin(), "999999", day(1), vec![]).await;
    assert_eq!(user_error(&unknown), Some("INVALID_INPUT"));
    let read = doctor_day(&app, &doctor, day(1)).await;
    assert_eq!((read["workingHours"].clone(), read["scheduledThrough"].clone()), (json!([]), Value::Null));
    assert!(read["slots"].as_array().unwrap().is_empty());

    // Others than that doctor and admins: FORBIDDEN, top-level.
    let input = json!({ "in": { "doctorId": doctor, "validFrom": text(day(1)), "weekly": [] } });
    for token in [doctor_token(&other), patient(7), partner("p1")] {
        assert_eq!(app.error_code(Some(&token), SET, input.clone()).await, "FORBIDDEN");
    }
    assert_eq!(app.error_code(None, SET, input).await, "UNAUTHENTICATED");
}

/// The next last Sunday of `month` (3 or 10) at least two days ahead.
fn next_last_sunday(month: u32) -> NaiveDate {
    let mut year = day(0).year();
    loop {
        let first_next = if month == 12 {
            NaiveDate::from_ymd_opt(year + 1, 1, 1)
        } else {
            NaiveDate::from_ymd_opt(year, month + 1, 1)
        }
        .unwrap();
        let mut d = first_next.pred_opt().unwrap();
        while d.weekday() != chrono::Weekday::Sun {
            d = d.pred_opt().unwrap();
        }
        if d >= day(2) {
            return d;
        }
        year += 1;
    }
}

#[tokio::test]
async fn the_horizon_lays_dst_days_out_as_publish_schedule_does() {
    // A year ahead, so both of Berlin's changes fall within the horizon.
    let (app, _db) = app_with(&[("SCHEDULE_HORIZON_DAYS", "366")]).await;
    let hours = app.create_doctor("Europe/Berlin").await;
    let published = app.create_doctor("Europe/Berlin").await;
    let sunday = vec![json!({ "weekday": "SUNDAY", "startTime": "01:00", "endTime": "04:00", "slotMinutes": 60 })];
    let set = set_hours(&app, &admin(), &hours, today_in("Europe/Berlin"), sunday).await;
    assert_eq!(set["userErrors"], json!([]), "{set}");
    let spring = next_last_sunday(3);
    let autumn = next_last_sunday(10);
    for (date, expected) in [(spring, 2), (autumn, 4), (spring + chrono::Days::new(7), 3)] {
        app.publish(&published, &text(date), "01:00", "04:00", 60, 1).await;
        let made = doctor_day(&app, &hours, date).await["slots"].clone();
        let by_publish = doctor_day(&app, &published, date).await["slots"].clone();
        let starts = |v: &Value| -> Vec<(Value, Value)> {
            v.as_array().unwrap().iter().map(|s| (s["startAt"].clone(), s["endAt"].clone())).collect()
        };
        assert_eq!(starts(&made).len(), expected, "{date}: {made}");
        assert_eq!(starts(&made), starts(&by_publish), "{date}: the same slots as publishSchedule");
    }
}

#[tokio::test]
async fn two_instances_rolling_at_once_make_each_slot_once() {
    let (app, _db) = app_with(&[("SCHEDULE_HORIZON_DAYS", "0"), ("SCHEDULE_HORIZON_POLL_SECS", "3600")]).await;
    let mut doctors = Vec::new();
    for tz in ["UTC", "Asia/Tokyo", "America/New_York", "Europe/Paris", "Australia/Sydney", "UTC"] {
        let d = app.create_doctor(tz).await;
        let set = set_hours(&app, &admin(), &d, today_in(tz), every_day("08:00", "12:00", 30)).await;
        assert_eq!(set["userErrors"], json!([]), "{set}");
        doctors.push(d);
    }
    let before = slot_count(&app).await;
    let barrier = Arc::new(Barrier::new(2));
    let passes = (0..2).map(|_| {
        let service = instance(&app, 4);
        let barrier = Arc::clone(&barrier);
        tokio::spawn(async move {
            barrier.wait().await;
            service.roll_horizon(None).await.unwrap()
        })
    });
    let reports: Vec<_> = futures_util::future::join_all(passes).await.into_iter().map(Result::unwrap).collect();
    let created: u64 = reports.iter().map(|r| r.created).sum();
    // The four days after today in each doctor's zone, 8 slots a day.
    assert_eq!(created, 6 * 4 * 8, "{reports:?}");
    assert_eq!(slot_count(&app).await - before, 6 * 4 * 8, "each slot made by exactly one pass");
    for d in &doctors {
        let read = doctor_day(&app, d, day(2)).await;
        assert_eq!(read["slots"].as_array().unwrap().len(), 8, "{read}");
    }
    assert_eq!(instance(&app, 4).roll_horizon(None).await.unwrap().created, 0, "nothing left to make");
}

#[tokio::test]
async fn a_pass_cut_short_is_finished_by_the_next_with_each_slot_once() {
    let (app, _db) = app_with(&[("SCHEDULE_HORIZON_DAYS", "0"), ("SCHEDULE_HORIZON_POLL_SECS", "3600")]).await;
    let mut doctors = Vec::new();
    for _ in 0..6 {
        let d = app.create_doctor("UTC").await;
        set_hours(&app, &admin(), &d, day(1), every_day("09:00", "10:00", 15)).await;
        doctors.push(d);
    }
    let service = instance(&app, 3);
    let first = service.roll_horizon(Some(2)).await.unwrap();
    assert_eq!((first.doctors, first.created), (2, 2 * 3 * 4), "stopped after two doctors");
    let through: Vec<Value> = futures_util::future::join_all(doctors.iter().map(|d| doctor_day(&app, d, day(1))))
        .await
        .into_iter()
        .map(|d| d["scheduledThrough"].clone())
        .collect();
    assert_eq!(through.iter().filter(|t| **t == json!(text(day(3)))).count(), 2, "{through:?}");
    let rest = service.roll_horizon(None).await.unwrap();
    assert_eq!((rest.doctors, rest.created), (4, 4 * 3 * 4), "the next pass finishes the others only");
    for d in &doctors {
        assert_eq!(doctor_day(&app, d, day(3)).await["slots"].as_array().unwrap().len(), 4);
    }
}

#[tokio::test]
async fn every_instance_rolls_the_horizon_by_itself() {
    let database = TestDatabase::new().await;
    let first = TestApp::spawn_on(&database, &[("SCHEDULE_HORIZON_DAYS", "1")]).await;
    let doctor = first.create_doctor("UTC").await;
    set_hours(&first, &admin(), &doctor, day(1), every_day("09:00", "10:00", 15)).await;
    assert_eq!(doctor_day(&first, &doctor, day(1)).await["scheduledThrough"], text(day(1)));
    // A second instance with a longer horizon extends it at start-up.
    let second = TestApp::spawn_on(&database, &[("SCHEDULE_HORIZON_DAYS", "3")]).await;
    let mut through = Value::Null;
    for _ in 0..100 {
        through = doctor_day(&second, &doctor, day(1)).await["scheduledThrough"].clone();
        if through == json!(text(day(3))) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(through, json!(text(day(3))));
    assert_eq!(doctor_day(&first, &doctor, day(3)).await["slots"].as_array().unwrap().len(), 4);
}

#[tokio::test]
async fn a_pattern_change_racing_bookings_never_leaves_a_seat_in_a_removed_slot() {
    let (app, _db) = app_with(&[("SCHEDULE_HORIZON_DAYS", "1")]).await;
    let doctor = app.create_doctor("UTC").await;
    let target = day(1);
    let weekday = weekday_of(target);
    let wide = vec![json!({ "weekday": weekday, "startTime": "09:00", "endTime": "22:30" })];
    let set = set_hours(&app, &admin(), &doctor, target, wide).await;
    assert_eq!(set["created"], 54, "{set}");
    let slots = slot_ids(&doctor_day(&app, &doctor, target).await);
    let narrow = vec![json!({ "weekday": weekday, "startTime": "09:00", "endTime": "10:00" })];
    const AVAILABLE: &str = "query($d:ID!,$t:Date!){availableSlots(doctorId:$d,date:$t){id}}";
    let list = json!({ "d": doctor, "t": text(target) });
    assert_eq!(app.gql(None, AVAILABLE, list.clone()).await["availableSlots"].as_array().unwrap().len(), 54);

    let barrier = Arc::new(Barrier::new(51));
    let app = Arc::new(app);
    let bookings: Vec<_> = (0..50u64)
        .map(|i| {
            let (app, barrier, slot) = (Arc::clone(&app), Arc::clone(&barrier), slots[4 + i as usize].clone());
            tokio::spawn(async move {
                barrier.wait().await;
                (slot.clone(), app.book(&patient(100 + i), &slot, "race", None).await)
            })
        })
        .collect();
    let change = {
        let (app, barrier, doctor) = (Arc::clone(&app), Arc::clone(&barrier), doctor.clone());
        tokio::spawn(async move {
            barrier.wait().await;
            set_hours(&app, &admin(), &doctor, target, narrow).await
        })
    };
    let mut booked = BTreeSet::new();
    for b in bookings {
        let (slot, payload) = b.await.unwrap();
        match payload["appointment"]["id"].as_str() {
            Some(id) => {
                booked.insert(id.to_owned());
                let kept =
                    app.gql(None, "query($id:ID!){slot(id:$id){closed bookedCount}}", json!({ "id": slot })).await;
                assert_eq!(kept["slot"]["bookedCount"], 1, "a booked slot is kept: {kept}");
            }
            None => assert_eq!(user_error(&payload), Some("SLOT_NOT_FOUND"), "{payload}"),
        }
    }
    let change = change.await.unwrap();
    assert_eq!(change["userErrors"], json!([]), "{change}");
    let conflicts: BTreeSet<String> =
        change["conflicts"].as_array().unwrap().iter().map(|a| a["id"].as_str().unwrap().to_owned()).collect();
    assert_eq!(conflicts, booked, "every seat taken in a slot the new pattern lacks is a conflict");
    assert_eq!(change["removed"].as_u64().unwrap() + booked.len() as u64, 50, "{change}");
    let available = app.gql(None, AVAILABLE, list).await["availableSlots"].clone();
    assert_eq!(available.as_array().unwrap().len(), 4, "the cached list follows the change: {available}");
    let left = doctor_day(&app, &doctor, target).await["slots"].clone();
    assert_eq!(left.as_array().unwrap().len(), 4 + booked.len(), "{left}");
    assert_eq!(left.as_array().unwrap().iter().filter(|s| s["closed"] == true).count(), booked.len());
    for s in &slots[4..] {
        let found = app.gql(None, "query($id:ID!){slot(id:$id){id}}", json!({ "id": s })).await;
        if found["slot"].is_null() {
            let late = app.book(&patient(999), s, &format!("late-{s}"), None).await;
            assert_eq!(user_error(&late), Some("SLOT_NOT_FOUND"), "a removed slot refuses bookings");
        }
    }
    app.assert_counts_consistent().await;
}

#[tokio::test]
async fn publish_schedule_slots_are_never_touched_by_a_pattern() {
    let (app, _db) = app_with(&[("SCHEDULE_HORIZON_DAYS", "2")]).await;
    let doctor = app.create_doctor("UTC").await;
    let published = app.publish(&doctor, &text(day(1)), "18:00", "19:00", 15, 1).await;
    set_hours(&app, &admin(), &doctor, day(1), every_day("09:00", "10:00", 15)).await;
    let cleared = set_hours(&app, &admin(), &doctor, day(1), vec![]).await;
    assert_eq!(cleared["removed"], 8, "{cleared}");
    assert_eq!(slot_ids(&doctor_day(&app, &doctor, day(1)).await), published, "publishSchedule's slots stay");
}

#[tokio::test]
async fn clinic_time_off_closes_every_zone_and_keeps_the_horizon_out() {
    let (app, _db) = app_with(&[("SCHEDULE_HORIZON_DAYS", "2"), ("SCHEDULE_HORIZON_POLL_SECS", "3600")]).await;
    let zones = ["UTC", "Asia/Tokyo", "America/New_York"];
    let mut doctors = Vec::new();
    for tz in zones {
        let d = app.create_doctor(tz).await;
        set_hours(&app, &admin(), &d, today_in(tz), every_day("00:00", "24:00", 60)).await;
        doctors.push(d);
    }
    // A booking in the range, by instant: tomorrow 02:00Z to 05:00Z.
    let from = format!("{}T02:00:00Z", text(day(1)));
    let to = format!("{}T05:00:00Z", text(day(1)));
    let utc_slots = doctor_day(&app, &doctors[0], day(1)).await["slots"].clone();
    let booked_slot = utc_slots[3]["id"].as_str().unwrap().to_owned(); // 03:00Z
    let booking = app.book(&patient(5), &booked_slot, "k", None).await;
    let appointment = booking["appointment"]["id"].as_str().unwrap().to_owned();

    let input = json!({ "in": { "from": from, "to": to, "reason": "strike" } });
    assert_eq!(app.error_code(Some(&doctor(&doctors[0])), ADD_OFF, input.clone()).await, "FORBIDDEN");
    let bad = json!({ "in": { "from": to, "to": from } });
    assert_eq!(user_error(&app.gql(Some(&admin()), ADD_OFF, bad).await["addTimeOff"]), Some("INVALID_INPUT"));
    let added = app.gql(Some(&admin()), ADD_OFF, input).await["addTimeOff"].clone();
    assert_eq!(added["closed"], 9, "three hours of three doctors: {added}");
    assert!(added["timeOff"]["doctor"].is_null());
    assert_eq!(
        added["cancelledAppointments"],
        json!([{ "id": appointment, "status": "CANCELLED", "cancelledBy": "CLINIC" }])
    );
    let off_id = added["timeOff"]["id"].as_str().unwrap().to_owned();
    let listed = app.gql(None, "{clinicTimeOff{id reason}}", json!({})).await;
    assert_eq!(listed["clinicTimeOff"], json!([{ "id": off_id, "reason": "strike" }]));
    let of_doctor = app.gql(None, "query($id:ID!){doctor(id:$id){timeOff{id}}}", json!({ "id": doctors[1] })).await;
    assert_eq!(of_doctor["doctor"]["timeOff"], json!([{ "id": off_id }]));

    // Time off beyond the horizon: a longer horizon makes nothing in it.
    let later_from = format!("{}T00:00:00Z", text(day(4)));
    let later_to = format!("{}T00:00:00Z", text(day(5)));
    let later = app
        .gql(Some(&admin()), ADD_OFF, json!({ "in": { "doctorId": doctors[0], "from": later_from, "to": later_to } }))
        .await["addTimeOff"]
        .clone();
    assert_eq!(later["closed"], 0, "{later}");
    instance(&app, 5).roll_horizon(None).await.unwrap();
    let day4 = doctor_day(&app, &doctors[0], day(4)).await["slots"].clone();
    assert!(day4.as_array().unwrap().is_empty(), "no slot made in time off: {day4}");
    assert_eq!(doctor_day(&app, &doctors[1], day(4)).await["slots"].as_array().unwrap().len(), 24);

    // Removing it: the slots come back (the cancelled appointment stays cancelled).
    let later_id = later["timeOff"]["id"].as_str().unwrap().to_owned();
    let removed =
        app.gql(Some(&doctor(&doctors[0])), REMOVE_OFF, json!({ "id": later_id })).await["removeTimeOff"].clone();
    assert_eq!((removed["removed"].clone(), removed["reopened"].clone()), (json!(true), json!(24)), "{removed}");
    assert_eq!(doctor_day(&app, &doctors[0], day(4)).await["slots"].as_array().unwrap().len(), 24);
    assert_eq!(app.error_code(Some(&doctor(&doctors[0])), REMOVE_OFF, json!({ "id": off_id })).await, "FORBIDDEN");
    let reopened = app.gql(Some(&admin()), REMOVE_OFF, json!({ "id": off_id })).await["removeTimeOff"].clone();
    assert_eq!(reopened["reopened"], 9, "{reopened}");
    assert_eq!(app.slot(&booked_slot).await["available"], 1);
    let again = app.gql(Some(&admin()), REMOVE_OFF, json!({ "id": off_id })).await["removeTimeOff"].clone();
    assert_eq!((again["removed"].clone(), again["reopened"].clone()), (json!(false), json!(0)));
    let status =
        app.gql(Some(&admin()), "query($id:ID!){appointment(id:$id){status}}", json!({ "id": appointment })).await;
    assert_eq!(status["appointment"]["status"], "CANCELLED");
    app.assert_counts_consistent().await;
}

#[tokio::test]
async fn a_doctor_takes_time_off_for_itself_only() {
    let (app, _db) = app_with(&[("SCHEDULE_HORIZON_DAYS", "1")]).await;
    let doctor_id = app.create_doctor("Europe/Paris").await;
    let other = app.create_doctor("UTC").await;
    set_hours(&app, &admin(), &doctor_id, day(1), every_day("09:00", "12:00", 60)).await;
    let from = format!("{}T00:00:00Z", text(day(1)));
    let to = format!("{}T00:00:00Z", text(day(2)));
    let mine = json!({ "in": { "doctorId": doctor_id, "from": from, "to": to } });
    let theirs = json!({ "in": { "doctorId": other, "from": from, "to": to } });
    assert_eq!(app.error_code(Some(&doctor(&doctor_id)), ADD_OFF, theirs).await, "FORBIDDEN");
    assert_eq!(app.error_code(Some(&patient(3)), ADD_OFF, mine.clone()).await, "FORBIDDEN");
    let added = app.gql(Some(&doctor(&doctor_id)), ADD_OFF, mine).await["addTimeOff"].clone();
    assert_eq!(added["closed"], 3, "{added}");
    let closed = doctor_day(&app, &doctor_id, day(1)).await["slots"].clone();
    assert!(closed.as_array().unwrap().iter().all(|s| s["closed"] == true), "{closed}");
}

#[tokio::test]
async fn fhir_schedules_carry_the_planning_horizon() {
    let (app, _db) = app_with(&[("SCHEDULE_HORIZON_DAYS", "2")]).await;
    let doctor = app.create_doctor("Asia/Tokyo").await;
    let plain = app.create_doctor("UTC").await;
    let today = today_in("Asia/Tokyo");
    set_hours(&app, &admin(), &doctor, today, every_day("09:00", "10:00", 15)).await;
    let read = |id: String| {
        let url = format!("{}/fhir/Schedule/{id}", app.address);
        let client = app.client.clone();
        async move { client.get(url).send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let schedule = read(doctor.clone()).await;
    let horizon = json!({
        "start": format!("{}T00:00:00.000+09:00", text(today)),
        "end": format!("{}T00:00:00.000+09:00", text(today + chrono::Days::new(3))),
    });
    assert_eq!(schedule["planningHorizon"], horizon, "today through the end of scheduledThrough: {schedule}");
    assert!(read(plain.clone()).await.get("planningHorizon").is_none(), "none without working hours");

    // The feed's Schedule file says the same.
    let manifest: Value =
        app.client.get(format!("{}/fhir/$bulk-publish", app.address)).send().await.unwrap().json().await.unwrap();
    let url = manifest["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["type"] == "Schedule")
        .map(|o| o["url"].as_str().unwrap().to_owned())
        .unwrap();
    let file = app.client.get(url).send().await.unwrap().text().await.unwrap();
    let line =
        file.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).find(|s| s["id"] == json!(doctor)).unwrap();
    assert_eq!(line["planningHorizon"], horizon, "{line}");
}
