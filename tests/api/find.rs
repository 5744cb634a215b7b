//! `findSlots`: the earliest bookable slots across doctors. Each filter alone and combined,
//! doctors in different zones (and across a daylight-saving change) in one search, paging while
//! bookings fill and free slots, runs for `durationMinutes`, `onePerDoctor`, and the refusals.
//!
//! The expected answers come from an oracle over every slot of the doctors (`Doctor.slots`),
//! filtered here with chrono-tz in each doctor's zone.

use chrono::{DateTime, Datelike, Days, NaiveDate, Timelike, Utc};
use chrono_tz::Tz;
use serde_json::{json, Value};

use sea_orm::ConnectionTrait;

use crate::helpers::{admin, patient, TestApp};

const FIND: &str = "query($in:FindSlotsInput!,$first:Int,$after:String){findSlots(input:$in,first:$first,after:$after)\
    {edges{cursor node{id startAt doctor{id}}} nodes{id} pageInfo{hasNextPage hasPreviousPage endCursor}}}";

/// A doctor with this specialty and zone.
async fn doctor(app: &TestApp, specialty: &str, tz: &str) -> String {
    let data = app
        .gql(
            Some(&admin()),
            "mutation($s:String,$tz:String){createDoctor(input:{name:\"Dr Find\",specialty:$s,timezone:$tz}){id}}",
            json!({ "s": specialty, "tz": tz }),
        )
        .await;
    data["createDoctor"]["id"].as_str().unwrap().to_owned()
}

/// A day a few days ahead (UTC), `YYYY-MM-DD`.
fn day_ahead(n: u64) -> NaiveDate {
    Utc::now().date_naive() + Days::new(n)
}

fn midnight(d: NaiveDate) -> DateTime<Utc> {
    d.and_hms_opt(0, 0, 0).unwrap().and_utc()
}

/// One slot as the oracle sees it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Seen {
    start: DateTime<Utc>,
    doctor: i64,
    id: i64,
}

/// A search's answer, one page.
struct Page {
    slots: Vec<Seen>,
    has_next: bool,
    end_cursor: Option<String>,
}

async fn find(app: &TestApp, input: Value, first: Option<i32>, after: Option<&str>) -> Page {
    let data = app.gql(None, FIND, json!({ "in": input, "first": first, "after": after })).await;
    let c = &data["findSlots"];
    let slots: Vec<Seen> = c["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| Seen {
            start: DateTime::parse_from_rfc3339(e["node"]["startAt"].as_str().unwrap()).unwrap().with_timezone(&Utc),
            doctor: e["node"]["doctor"]["id"].as_str().unwrap().parse().unwrap(),
            id: e["node"]["id"].as_str().unwrap().parse().unwrap(),
        })
        .collect();
    let nodes: Vec<&str> = c["nodes"].as_array().unwrap().iter().map(|n| n["id"].as_str().unwrap()).collect();
    let ids: Vec<String> = slots.iter().map(|s| s.id.to_string()).collect();
    assert_eq!(nodes, ids, "nodes are the edges' nodes");
    Page {
        slots,
        has_next: c["pageInfo"]["hasNextPage"].as_bool().unwrap(),
        end_cursor: c["pageInfo"]["endCursor"].as_str().map(str::to_owned),
    }
}

/// Every page of a search, `first` at a time.
async fn find_all(app: &TestApp, input: &Value, first: i32) -> Vec<Seen> {
    let mut all = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..200 {
        let page = find(app, input.clone(), Some(first), after.as_deref()).await;
        assert!(page.slots.len() <= first as usize);
        all.extend(page.slots);
        if !page.has_next {
            return all;
        }
        after = page.end_cursor;
    }
    panic!("more than 200 pages");
}

/// The oracle: every slot of `doctors` on the days `dates` (each in the doctor's zone), with its
/// bookability, doctor's zone and specialty.
struct Known {
    start: DateTime<Utc>,
    doctor: i64,
    id: i64,
    bookable: bool,
    tz: Tz,
}

async fn known(app: &TestApp, doctors: &[String], dates: &[NaiveDate]) -> Vec<Known> {
    let mut out = Vec::new();
    for d in doctors {
        for date in dates {
            let data = app
                .gql(
                    None,
                    "query($id:ID!,$d:Date!){doctor(id:$id){timezone slots(date:$d){id startAt available closed}}}",
                    json!({ "id": d, "d": date.to_string() }),
                )
                .await;
            let tz: Tz = data["doctor"]["timezone"].as_str().unwrap().parse().unwrap();
            for s in data["doctor"]["slots"].as_array().unwrap() {
                let start = DateTime::parse_from_rfc3339(s["startAt"].as_str().unwrap()).unwrap().with_timezone(&Utc);
                out.push(Known {
                    start,
                    doctor: d.parse().unwrap(),
                    id: s["id"].as_str().unwrap().parse().unwrap(),
                    bookable: s["available"].as_i64().unwrap() > 0
                        && !s["closed"].as_bool().unwrap()
                        && start > Utc::now(),
                    tz,
                });
            }
        }
    }
    out
}

/// What a search with these filters must answer, by the oracle.
fn expected(
    all: &[Known],
    doctors: Option<&[&String]>,
    window: (DateTime<Utc>, DateTime<Utc>),
    weekdays: Option<&[chrono::Weekday]>,
    times: (Option<u32>, Option<u32>),
) -> Vec<Seen> {
    let mut v: Vec<Seen> = all
        .iter()
        .filter(|k| k.bookable && k.start >= window.0 && k.start < window.1)
        .filter(|k| doctors.is_none_or(|ds| ds.iter().any(|d| d.parse::<i64>().unwrap() == k.doctor)))
        .filter(|k| {
            let local = k.start.with_timezone(&k.tz);
            let minute = local.hour() * 60 + local.minute();
            weekdays.is_none_or(|w| w.contains(&local.weekday()))
                && times.0.is_none_or(|e| minute >= e)
                && times.1.is_none_or(|l| minute < l)
        })
        .map(|k| Seen { start: k.start, doctor: k.doctor, id: k.id })
        .collect();
    v.sort();
    v.dedup();
    v
}

fn weekday_name(d: chrono::Weekday) -> &'static str {
    ["MONDAY", "TUESDAY", "WEDNESDAY", "THURSDAY", "FRIDAY", "SATURDAY", "SUNDAY"][d.num_days_from_monday() as usize]
}

#[tokio::test]
async fn every_filter_alone_and_combined_across_zones() {
    let (app, _db) = TestApp::spawn().await;
    let derm_utc = doctor(&app, "dermatology", "UTC").await;
    let derm_tokyo = doctor(&app, "Dermatology", "Asia/Tokyo").await;
    let cardio_ny = doctor(&app, "cardiology", "America/New_York").await;
    let day = day_ahead(3);
    let mut slots = Vec::new();
    for d in [&derm_utc, &derm_tokyo, &cardio_ny] {
        for date in [day, day + Days::new(1)] {
            slots.push(app.publish(d, &date.to_string(), "07:00", "13:00", 60, 1).await);
        }
    }
    // A full slot and a closed one never match.
    app.book(&patient(77), &slots[0][1], "full", None).await;
    let (from, to) = (midnight(day) - chrono::TimeDelta::hours(12), midnight(day) + chrono::TimeDelta::hours(60));
    app.gql(
        Some(&admin()),
        "mutation($d:ID!,$f:DateTime!,$t:DateTime!){closeSlots(input:{doctorId:$d,from:$f,to:$t}){closed}}",
        json!({ "d": cardio_ny, "f": from.to_rfc3339(), "t": (midnight(day) + chrono::TimeDelta::hours(13)).to_rfc3339() }),
    )
    .await;

    let all_doctors = [derm_utc.clone(), derm_tokyo.clone(), cardio_ny.clone()];
    let oracle = known(&app, &all_doctors, &[day - Days::new(1), day, day + Days::new(1), day + Days::new(2)]).await;
    let window = (from, to);
    let base = json!({ "from": from.to_rfc3339(), "to": to.to_rfc3339() });
    let with = |extra: Value| {
        let mut v = base.clone();
        v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        v
    };

    // No filter: every bookable slot of every doctor in the window (and nobody else's: none).
    let everything = find_all(&app, &base, 7).await;
    assert_eq!(everything, expected(&oracle, None, window, None, (None, None)));
    assert!(everything.len() > 20, "{}", everything.len());
    assert!(!everything.iter().any(|s| s.id.to_string() == slots[0][1]), "a full slot never matches");

    // Specialty, case-insensitively.
    let derm = [&derm_utc, &derm_tokyo];
    let got = find_all(&app, &with(json!({ "specialty": "DERMATOLOGY" })), 5).await;
    assert_eq!(got, expected(&oracle, Some(&derm), window, None, (None, None)));
    assert!(find(&app, with(json!({ "specialty": "surgery" })), None, None).await.slots.is_empty());
    // A specialty alone reads its own index on PostgreSQL; with doctorIds, each doctor's slots:
    // the two plans give the same answer, also with local filters and a doctor's specialty
    // changed after its slots were made (the slots follow it).
    let ids = json!({ "specialty": "dermatology", "doctorIds": [derm_utc, derm_tokyo] });
    assert_eq!(find_all(&app, &with(ids), 5).await, got);
    let filtered = json!({ "weekdays": [weekday_name(day.weekday())], "earliestTime": "08:00", "latestTime": "12:00" });
    let mut by_index = filtered.clone();
    by_index.as_object_mut().unwrap().insert("specialty".into(), json!("dermatology"));
    let mut by_doctor = by_index.clone();
    by_doctor.as_object_mut().unwrap().insert("doctorIds".into(), json!([derm_utc, derm_tokyo]));
    let got_filtered = find_all(&app, &with(by_index), 2).await;
    assert_eq!(got_filtered, find_all(&app, &with(by_doctor), 2).await);
    assert_eq!(got_filtered, expected(&oracle, Some(&derm), window, Some(&[day.weekday()]), (Some(480), Some(720))));
    assert!(!got_filtered.is_empty());
    let conn = app.db.conn();
    if conn.get_database_backend() == sea_orm::DbBackend::Postgres {
        // Requests unlike earlier ones (first, case), so no answer kept from before can serve them.
        let set = |s: &str| format!("UPDATE doctor SET specialty = '{s}' WHERE id = {derm_tokyo}");
        conn.execute_unprepared(&set("Surgery")).await.unwrap();
        let surgery = find_all(&app, &with(json!({ "specialty": "Surgery" })), 4).await;
        assert_eq!(surgery, expected(&oracle, Some(&[&derm_tokyo]), window, None, (None, None)));
        let derm_now = find_all(&app, &with(json!({ "specialty": "dermatology" })), 4).await;
        assert_eq!(derm_now, expected(&oracle, Some(&[&derm_utc]), window, None, (None, None)));
        conn.execute_unprepared(&set("Dermatology")).await.unwrap();
    }

    // Doctors.
    let got = find_all(&app, &with(json!({ "doctorIds": [cardio_ny] })), 4).await;
    assert_eq!(got, expected(&oracle, Some(&[&cardio_ny]), window, None, (None, None)));
    assert!(find(&app, with(json!({ "doctorIds": [] })), None, None).await.slots.is_empty());
    assert!(find(&app, with(json!({ "doctorIds": ["999999"] })), None, None).await.slots.is_empty());

    // Weekdays, in each doctor's zone.
    let days = [day.weekday()];
    let got = find_all(&app, &with(json!({ "weekdays": [weekday_name(day.weekday())] })), 6).await;
    assert_eq!(got, expected(&oracle, None, window, Some(&days), (None, None)));
    assert!(!got.is_empty());

    // Local times of day, in each doctor's zone.
    let got = find_all(&app, &with(json!({ "earliestTime": "09:00", "latestTime": "11:00" })), 3).await;
    assert_eq!(got, expected(&oracle, None, window, None, (Some(540), Some(660))));
    assert_eq!(got.len(), expected(&oracle, None, window, None, (Some(540), Some(660))).len());
    let got = find_all(&app, &with(json!({ "earliestTime": "12:00" })), 10).await;
    assert_eq!(got, expected(&oracle, None, window, None, (Some(720), None)));
    let got = find_all(&app, &with(json!({ "latestTime": "08:00" })), 10).await;
    assert_eq!(got, expected(&oracle, None, window, None, (None, Some(480))));

    // All of them at once.
    let next = [day.succ_opt().unwrap().weekday()];
    let input = with(json!({
        "specialty": "dermatology", "doctorIds": [derm_tokyo, cardio_ny], "weekdays": [weekday_name(next[0])],
        "earliestTime": "08:00", "latestTime": "12:00"
    }));
    let got = find_all(&app, &input, 2).await;
    assert_eq!(got, expected(&oracle, Some(&[&derm_tokyo]), window, Some(&next), (Some(480), Some(720))));
    assert_eq!(got.len(), 4, "{got:?}");
}

/// The first day after today on which `tz`'s offset at noon differs from the day before's.
fn next_offset_change(tz: Tz) -> NaiveDate {
    use chrono::{Offset, TimeZone};
    let noon = |d: NaiveDate| tz.from_utc_datetime(&d.and_hms_opt(12, 0, 0).unwrap()).offset().fix();
    let mut d = Utc::now().date_naive() + Days::new(2);
    while noon(d) == noon(d - Days::new(1)) {
        d = d + Days::new(1);
    }
    d
}

#[tokio::test]
async fn tokyo_and_new_york_in_one_search_across_a_dst_change() {
    let (app, _db) = TestApp::spawn().await;
    let ny: Tz = "America/New_York".parse().unwrap();
    let change = next_offset_change(ny);
    let tokyo_doctor = doctor(&app, "rheumatology", "Asia/Tokyo").await;
    let ny_doctor = doctor(&app, "rheumatology", "America/New_York").await;
    // The night of the change in New York (a day of 23 or 25 hours), and the same local night
    // in Tokyo (no DST).
    let ny_slots = app.publish(&ny_doctor, &change.to_string(), "00:00", "04:00", 60, 1).await;
    assert!(ny_slots.len() == 3 || ny_slots.len() == 5, "{}", ny_slots.len());
    app.publish(&tokyo_doctor, &change.to_string(), "00:00", "04:00", 60, 1).await;
    let from = midnight(change) - chrono::TimeDelta::days(1);
    let to = midnight(change) + chrono::TimeDelta::days(2);
    let oracle = known(&app, &[tokyo_doctor.clone(), ny_doctor.clone()], &[change]).await;
    let input = json!({
        "from": from.to_rfc3339(), "to": to.to_rfc3339(), "specialty": "Rheumatology",
        "weekdays": [weekday_name(change.weekday())], "earliestTime": "01:00", "latestTime": "03:00"
    });
    let got = find_all(&app, &input, 2).await;
    assert_eq!(got, expected(&oracle, None, (from, to), Some(&[change.weekday()]), (Some(60), Some(180))));
    let ny_id: i64 = ny_doctor.parse().unwrap();
    let ny_local: Vec<String> = got
        .iter()
        .filter(|s| s.doctor == ny_id)
        .map(|s| s.start.with_timezone(&ny).format("%H:%M").to_string())
        .collect();
    // Spring forward: 02:00 does not exist; fall back: 01:00 comes twice.
    let expected_ny: &[&str] = if ny_slots.len() == 3 { &["01:00"] } else { &["01:00", "01:00", "02:00"] };
    assert_eq!(ny_local, expected_ny);
    assert_eq!(got.iter().filter(|s| s.doctor != ny_id).count(), 2, "Tokyo's 01:00 and 02:00");
}

#[tokio::test]
async fn paging_while_bookings_fill_and_free_slots_never_repeats_or_skips() {
    let (app, _db) = TestApp::spawn().await;
    let day = day_ahead(2);
    let mut slots = Vec::new();
    let mut doctors = Vec::new();
    for tz in ["UTC", "Europe/Paris", "UTC"] {
        let d = doctor(&app, "pediatrics", tz).await;
        slots.extend(app.publish(&d, &day.to_string(), "09:00", "12:00", 15, 1).await);
        doctors.push(d);
    }
    let input = json!({ "from": midnight(day).to_rfc3339(), "to": (midnight(day) + chrono::TimeDelta::days(1)).to_rfc3339(),
                        "specialty": "pediatrics" });
    let before = find_all(&app, &input, 100).await;
    assert_eq!(before.len(), slots.len());
    // Page through 5 at a time; after each page, book two slots further on and cancel one of
    // the earlier bookings (a slot that frees behind or ahead of the cursor).
    let mut shown: Vec<Seen> = Vec::new();
    let mut touched = std::collections::HashSet::new();
    let mut booked: Vec<(String, String)> = Vec::new();
    let mut after: Option<String> = None;
    let mut round = 0u64;
    loop {
        let page = find(&app, input.clone(), Some(5), after.as_deref()).await;
        shown.extend(page.slots.iter().cloned());
        if !page.has_next {
            break;
        }
        after = page.end_cursor;
        round += 1;
        let ahead: Vec<&Seen> = before.iter().filter(|s| s > &shown.last().unwrap()).collect();
        for (i, s) in ahead.iter().skip(2).step_by(5).take(2).enumerate() {
            let p = patient(100 + round * 10 + i as u64);
            let b = app.book(&p, &s.id.to_string(), &format!("k{round}-{i}"), None).await;
            if let Some(id) = b["appointment"]["id"].as_str() {
                booked.push((p, id.to_owned()));
                touched.insert(s.id);
            }
        }
        if round.is_multiple_of(2) {
            if let Some((p, id)) = booked.first().cloned() {
                app.cancel(&p, &id).await;
                booked.remove(0);
            }
        }
    }
    let mut ids: Vec<i64> = shown.iter().map(|s| s.id).collect();
    let in_order = shown.windows(2).all(|w| w[0] < w[1]);
    assert!(in_order, "pages follow one order: {shown:?}");
    ids.sort_unstable();
    let n = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), n, "no slot shown twice");
    for s in before.iter().filter(|s| !touched.contains(&s.id)) {
        assert!(ids.binary_search(&s.id).is_ok(), "slot {} was free throughout and must be shown", s.id);
    }
}

#[tokio::test]
async fn duration_minutes_keeps_the_starts_whose_whole_run_is_bookable() {
    let (app, _db) = TestApp::spawn().await;
    let day = day_ahead(2);
    let d = doctor(&app, "neurology", "Europe/Berlin").await;
    let other = doctor(&app, "neurology", "UTC").await;
    let slots = app.publish(&d, &day.to_string(), "09:00", "10:30", 15, 1).await;
    app.publish(&other, &day.to_string(), "09:00", "09:30", 15, 2).await;
    // 09:45 is full: the runs through it are not bookable.
    app.book(&patient(5), &slots[3], "k", None).await;
    let input = json!({ "from": midnight(day).to_rfc3339(), "to": (midnight(day) + chrono::TimeDelta::days(1)).to_rfc3339(),
                        "specialty": "neurology", "durationMinutes": 30 });
    let got = find_all(&app, &input, 1).await;
    let mine: Vec<String> = got.iter().filter(|s| s.doctor.to_string() == d).map(|s| s.id.to_string()).collect();
    assert_eq!(mine, [slots[0].clone(), slots[1].clone(), slots[4].clone()]);
    // The same starts as availableSlots(durationMinutes) gives for the day.
    let data = app
        .gql(
            None,
            "query($d:ID!,$day:Date!){availableSlots(doctorId:$d,date:$day,durationMinutes:30){id}}",
            json!({ "d": d, "day": day.to_string() }),
        )
        .await;
    let listed: Vec<&str> =
        data["availableSlots"].as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(mine, listed);
    // The other doctor's 09:00 covers 30 minutes; its 09:15 runs past its hours.
    assert_eq!(got.iter().filter(|s| s.doctor.to_string() == other).count(), 1);
    // onePerDoctor with a duration: each doctor's first start with a bookable run.
    let mut one = input.clone();
    one["onePerDoctor"] = json!(true);
    one["earliestTime"] = json!("09:30");
    let firsts = find_all(&app, &one, 10).await;
    assert_eq!(firsts.iter().map(|s| s.id.to_string()).collect::<Vec<_>>(), [slots[4].clone()]);
}

#[tokio::test]
async fn one_per_doctor_gives_each_doctors_next_free_slot() {
    let (app, _db) = TestApp::spawn().await;
    let day = day_ahead(2);
    let mut firsts = Vec::new();
    let mut all = Vec::new();
    for (i, tz) in ["UTC", "Asia/Tokyo", "America/New_York"].iter().enumerate() {
        let d = doctor(&app, "ophthalmology", tz).await;
        let start = format!("{:02}:00", 8 + i);
        let s = app.publish(&d, &day.to_string(), &start, "14:00", 30, 1).await;
        firsts.push(s[0].clone());
        all.push(s);
    }
    // The first doctor's first slot fills: its next one stands for it.
    app.book(&patient(9), &all[0][0], "k", None).await;
    let input = json!({ "from": midnight(day - Days::new(1)).to_rfc3339(), "to": midnight(day + Days::new(2)).to_rfc3339(),
                        "specialty": "ophthalmology", "onePerDoctor": true });
    let got = find_all(&app, &input, 2).await;
    let mut want = vec![all[0][1].clone(), all[1][0].clone(), all[2][0].clone()];
    let ids: Vec<String> = got.iter().map(|s| s.id.to_string()).collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    want.sort();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(sorted, want);
    assert!(got.windows(2).all(|w| w[0] < w[1]), "by start, doctor, slot");
    // Mornings only, in each doctor's zone: New York's first is 10:00 local.
    let mut morning = input.clone();
    morning["latestTime"] = json!("09:30");
    let got = find_all(&app, &morning, 20).await;
    assert_eq!(got.len(), 2, "New York's doctor starts at 10:00: {got:?}");
}

#[tokio::test]
async fn bad_values_are_invalid_input_naming_the_field() {
    let (app, _db) = TestApp::spawn().await;
    let from = midnight(day_ahead(1));
    let base = json!({ "from": from.to_rfc3339(), "to": (from + chrono::TimeDelta::days(7)).to_rfc3339() });
    // (input fields, first, after, the field path named)
    type Case<'a> = (Value, Option<i32>, Option<&'a str>, Vec<&'a str>);
    let cases: Vec<Case> = vec![
        (json!({ "to": from.to_rfc3339() }), None, None, vec!["input", "to"]),
        (
            json!({ "to": (from + chrono::TimeDelta::days(31) + chrono::TimeDelta::seconds(1)).to_rfc3339() }),
            None,
            None,
            vec!["input", "to"],
        ),
        (
            json!({ "doctorIds": (1..=101).map(|i| i.to_string()).collect::<Vec<_>>() }),
            None,
            None,
            vec!["input", "doctorIds"],
        ),
        (json!({ "earliestTime": "8:00" }), None, None, vec!["input", "earliestTime"]),
        (json!({ "latestTime": "25:00" }), None, None, vec!["input", "latestTime"]),
        (json!({ "earliestTime": "12:00", "latestTime": "09:00" }), None, None, vec!["input", "latestTime"]),
        (json!({ "durationMinutes": 0 }), None, None, vec!["input", "durationMinutes"]),
        (json!({}), Some(0), None, vec!["first"]),
        (json!({}), Some(101), None, vec!["first"]),
        (json!({}), None, Some("not-a-cursor"), vec!["after"]),
    ];
    for (extra, first, after, path) in cases {
        let mut input = base.clone();
        input.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let (_, body) = app.post(None, FIND, json!({ "in": input, "first": first, "after": after })).await;
        assert_eq!(body["errors"][0]["extensions"]["code"], "INVALID_INPUT", "{extra} {first:?}: {body}");
        assert_eq!(body["errors"][0]["extensions"]["field"], json!(path), "{extra}: {body}");
    }
    // Exactly 31 days, 100 doctors, 24:00 and first 1 or 100 are fine.
    let mut ok = base.clone();
    ok["to"] = json!((from + chrono::TimeDelta::days(31)).to_rfc3339());
    ok["doctorIds"] = json!((1..=100).map(|i| i.to_string()).collect::<Vec<_>>());
    ok["latestTime"] = json!("24:00");
    for first in [1, 100] {
        assert!(find(&app, ok.clone(), Some(first), None).await.slots.is_empty());
    }
    // A from already past counts as now.
    let mut past = base.clone();
    past["from"] = json!((Utc::now() - chrono::TimeDelta::days(2)).to_rfc3339());
    past["to"] = json!((Utc::now() + chrono::TimeDelta::days(1)).to_rfc3339());
    assert!(find(&app, past, None, None).await.slots.is_empty());
}

/// The ids of the one page `input` finds, `first` long.
async fn page_ids(app: &TestApp, input: &Value, first: i32) -> Vec<String> {
    find(app, input.clone(), Some(first), None).await.slots.iter().map(|s| s.id.to_string()).collect()
}

#[tokio::test]
async fn a_repeated_search_sees_every_change_it_depends_on() {
    // The same request body again may be answered from memory: each change of a slot it covers
    // (a booking, a cancel, a new doctor of the specialty publishing) must show at once.
    let (app, _db) = TestApp::spawn().await;
    let day = day_ahead(2);
    let a = doctor(&app, "radiology", "UTC").await;
    let slots = app.publish(&a, &day.to_string(), "09:00", "10:00", 15, 1).await;
    let other = doctor(&app, "urology", "UTC").await;
    let theirs = app.publish(&other, &day.to_string(), "08:00", "08:15", 15, 1).await;
    let window =
        json!({ "from": midnight(day).to_rfc3339(), "to": (midnight(day) + chrono::TimeDelta::days(1)).to_rfc3339() });
    let with = |extra: Value| {
        let mut input = window.clone();
        input.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        input
    };
    let by_specialty = with(json!({ "specialty": "radiology" }));
    let by_doctor = with(json!({ "doctorIds": [a] }));
    let everyone = with(json!({}));
    let one_each = with(json!({ "specialty": "radiology", "onePerDoctor": true }));
    for _ in 0..2 {
        assert_eq!(page_ids(&app, &by_specialty, 2).await, slots[0..2]);
        assert_eq!(page_ids(&app, &by_doctor, 2).await, slots[0..2]);
        assert_eq!(page_ids(&app, &everyone, 2).await, [theirs[0].clone(), slots[0].clone()]);
        assert_eq!(page_ids(&app, &one_each, 5).await, slots[0..1]);
    }

    // A booking of one of its doctors' slots.
    let booked = app.book(&patient(1), &slots[0], "k1", None).await;
    let appointment = booked["appointment"]["id"].as_str().unwrap().to_owned();
    assert_eq!(page_ids(&app, &by_specialty, 2).await, slots[1..3]);
    assert_eq!(page_ids(&app, &by_doctor, 2).await, slots[1..3]);
    assert_eq!(page_ids(&app, &everyone, 2).await, [theirs[0].clone(), slots[1].clone()]);
    assert_eq!(page_ids(&app, &one_each, 5).await, slots[1..2]);

    // Another specialty's booking changes only what covers it.
    app.book(&patient(2), &theirs[0], "k2", None).await;
    assert_eq!(page_ids(&app, &everyone, 2).await, slots[1..3]);
    assert_eq!(page_ids(&app, &by_specialty, 2).await, slots[1..3]);

    // A doctor created since, of the same specialty (spelt otherwise), publishing earlier slots.
    let b = doctor(&app, "Radiology", "Asia/Tokyo").await;
    let early = app.publish(&b, &day.to_string(), "16:00", "16:30", 15, 1).await;
    // 16:00 in Tokyo is 07:00 UTC: before every slot of `a`.
    assert_eq!(page_ids(&app, &by_specialty, 2).await, early);
    assert_eq!(page_ids(&app, &one_each, 5).await, [early[0].clone(), slots[1].clone()]);
    assert_eq!(page_ids(&app, &by_doctor, 2).await, slots[1..3], "doctorIds names a only");

    // A cancel frees the first slot again.
    app.cancel(&patient(1), &appointment).await;
    assert_eq!(page_ids(&app, &by_doctor, 2).await, slots[0..2]);
    assert_eq!(page_ids(&app, &by_specialty, 3).await, [early[0].clone(), early[1].clone(), slots[0].clone()]);
    assert_eq!(page_ids(&app, &everyone, 3).await, [early[0].clone(), early[1].clone(), slots[0].clone()]);

    // Over two days: a page that reads into the second sees a booking there at once; one that
    // stopped on the first is unchanged by it.
    let next_day = app.publish(&a, &(day + Days::new(1)).to_string(), "09:00", "09:30", 15, 1).await;
    let to = midnight(day) + chrono::TimeDelta::days(2);
    let two_days = json!({ "from": midnight(day).to_rfc3339(), "to": to.to_rfc3339(), "specialty": "radiology" });
    let whole = page_ids(&app, &two_days, 50).await;
    assert!(whole.ends_with(&next_day), "{whole:?}");
    let short = page_ids(&app, &two_days, 2).await;
    app.book(&patient(3), &next_day[0], "k3", None).await;
    assert_eq!(page_ids(&app, &two_days, 2).await, short);
    let whole_now = page_ids(&app, &two_days, 50).await;
    assert_eq!(whole_now, whole.iter().filter(|id| **id != next_day[0]).cloned().collect::<Vec<_>>());
    // Each doctor's first, one of them only on the second day: taking it shows at once.
    let c = doctor(&app, "radiology", "UTC").await;
    let only = app.publish(&c, &(day + Days::new(1)).to_string(), "12:00", "12:15", 15, 1).await;
    let mut firsts = two_days.clone();
    firsts["onePerDoctor"] = json!(true);
    assert_eq!(page_ids(&app, &firsts, 5).await, [early[0].clone(), slots[0].clone(), only[0].clone()]);
    app.book(&patient(4), &only[0], "k4", None).await;
    assert_eq!(page_ids(&app, &firsts, 5).await, [early[0].clone(), slots[0].clone()]);
}

#[tokio::test]
async fn a_repeated_answer_sees_every_change_of_the_fields_it_selects_inside() {
    // The same request body again may be answered from memory: a doctor's fields selected
    // inside a search or a slot list (another day's slots, its working hours, its time off)
    // must show a change at once, like the slots the search itself read.
    let (app, _db) = TestApp::spawn().await;
    let day = day_ahead(2);
    // A day the search does not cover (its window ends at the next midnight).
    let next = day + Days::new(2);
    let a = doctor(&app, "radiology", "UTC").await;
    app.publish(&a, &day.to_string(), "09:00", "09:15", 15, 1).await;
    let later = app.publish(&a, &next.to_string(), "09:00", "09:15", 15, 1).await;
    let window = json!({ "in": {
        "from": midnight(day).to_rfc3339(),
        "to": (midnight(day) + chrono::TimeDelta::days(1)).to_rfc3339(),
        "specialty": "radiology",
    }});
    let one_day = json!({ "d": a, "t": day.to_string() });
    let search =
        |inside: &str| format!("query($in:FindSlotsInput!){{findSlots(input:$in){{nodes{{id doctor{{{inside}}}}}}}}}");
    let list = |inside: &str| {
        format!("query($d:ID!,$t:Date!){{availableSlots(doctorId:$d,date:$t){{id doctor{{{inside}}}}}}}")
    };
    let asked = |query: String, variables: Value| {
        let app = &app;
        async move {
            let data = app.gql(None, &query, variables).await;
            let rows = if query.contains("findSlots") { &data["findSlots"]["nodes"] } else { &data["availableSlots"] };
            rows[0]["doctor"].clone()
        }
    };

    // Another day's slots.
    let slots = format!("slots(date:\"{next}\"){{id bookedCount}}");
    for _ in 0..2 {
        assert_eq!(asked(search(&slots), window.clone()).await["slots"][0]["bookedCount"], 0);
        assert_eq!(asked(list(&slots), one_day.clone()).await["slots"][0]["bookedCount"], 0);
    }
    app.book(&patient(1), &later[0], "k1", None).await;
    assert_eq!(asked(search(&slots), window.clone()).await["slots"][0]["bookedCount"], 1, "findSlots");
    assert_eq!(asked(list(&slots), one_day.clone()).await["slots"][0]["bookedCount"], 1, "availableSlots");

    // Working hours (and how far they have made slots), past the horizon: no slot changes.
    let hours = "workingHours{validFrom} scheduledThrough";
    for _ in 0..2 {
        assert_eq!(asked(search(hours), window.clone()).await["workingHours"], json!([]));
        assert_eq!(asked(list(hours), one_day.clone()).await["workingHours"], json!([]));
    }
    let far = Utc::now().date_naive() + Days::new(60);
    let weekly: Vec<Value> = ["MONDAY", "TUESDAY", "WEDNESDAY", "THURSDAY", "FRIDAY", "SATURDAY", "SUNDAY"]
        .iter()
        .map(|d| json!({ "weekday": d, "startTime": "09:00", "endTime": "10:00", "slotMinutes": 30 }))
        .collect();
    let set = "mutation($in:SetWorkingHoursInput!){setWorkingHours(input:$in){userErrors{code}}}";
    let input = json!({ "in": { "doctorId": a, "validFrom": far.to_string(), "weekly": weekly } });
    assert_eq!(app.gql(Some(&admin()), set, input).await["setWorkingHours"]["userErrors"], json!([]));
    let pattern = json!([{ "validFrom": far.to_string() }]);
    assert_eq!(asked(search(hours), window.clone()).await["workingHours"], pattern, "findSlots");
    assert_eq!(asked(list(hours), one_day.clone()).await["workingHours"], pattern, "availableSlots");

    // Time off, where it closes nothing.
    let off = "timeOff{reason}";
    for _ in 0..2 {
        assert_eq!(asked(search(off), window.clone()).await["timeOff"], json!([]));
        assert_eq!(asked(list(off), one_day.clone()).await["timeOff"], json!([]));
    }
    let add = "mutation($in:AddTimeOffInput!){addTimeOff(input:$in){userErrors{code}}}";
    let from = midnight(far + Days::new(30));
    let input = json!({ "in": {
        "doctorId": a, "from": from.to_rfc3339(), "to": (from + chrono::TimeDelta::days(1)).to_rfc3339(), "reason": "away",
    }});
    assert_eq!(app.gql(Some(&admin()), add, input).await["addTimeOff"]["userErrors"], json!([]));
    let away = json!([{ "reason": "away" }]);
    assert_eq!(asked(search(off), window.clone()).await["timeOff"], away, "findSlots");
    assert_eq!(asked(list(off), one_day.clone()).await["timeOff"], away, "availableSlots");
}
