//! The direct paths (`graphql::answer`: `BookPlan` for bookings, `ListPlan` for slot lists)
//! answer exactly as the executor does: every outcome, sent through both, gives the same status
//! and the same bytes.

use async_graphql::parser::parse_query;
use clinic_booking::graphql::answer::{BookPlan, ListPlan};
use serde_json::{json, Value};

use crate::helpers::*;

/// Booking documents with a `@DIRECTIVE` marker: removed, the direct path answers them (once
/// their shape passed validation); replaced by `@include(if: true)`, which changes nothing
/// in the answer, the executor does.
const DOCUMENTS: [&str; 3] = [
    "mutation($s:ID!,$k:String!,$p:ID){b: bookAppointment(input:{slotId:$s,idempotencyKey:$k,patientId:$p}) @DIRECTIVE \
     {__typename errs: userErrors{field message code __typename} again: replayed \
      appointment{createdAt cancelledAt status patientId id __typename startAt endAt expiresAt cancelledBy}}}",
    "mutation Book($k:String!,$s:ID!,$p:ID){bookAppointment(input:{patientId:$p,idempotencyKey:$k,slotId:$s}) @DIRECTIVE \
     {replayed userErrors{code}}}",
    "mutation($s:ID!,$k:String!,$p:ID!){bookAppointment(input:{slotId:$s,idempotencyKey:$k,patientId:$p}) @DIRECTIVE \
     {userErrors{message} appointment{id status}}}",
];

fn direct(doc: &str) -> String {
    doc.replace(" @DIRECTIVE", "")
}

fn executor(doc: &str) -> String {
    doc.replace("@DIRECTIVE", "@include(if: true)")
}

/// Sends `doc` through both paths; returns the direct path's answer after checking that the
/// executor's is the same (status and bytes).
async fn both(app: &TestApp, token: Option<&str>, doc: &str, vars: Value) -> (u16, String) {
    // The first request of a shape is validated in full by the executor; the second takes the
    // direct path.
    let mut answers = Vec::new();
    for query in [direct(doc), direct(doc), executor(doc)] {
        let (status, body) = app.post(token, &query, vars.clone()).await;
        answers.push((status, body.to_string()));
    }
    assert_eq!(answers[1], answers[2], "direct and executor answers differ for {vars}");
    answers.swap_remove(1)
}

#[tokio::test]
async fn the_plan_takes_exactly_the_documents_it_can_answer() {
    for doc in DOCUMENTS {
        let parsed = parse_query(direct(doc)).unwrap();
        assert!(BookPlan::compile(&parsed).is_some(), "{doc}");
        let parsed = parse_query(executor(doc)).unwrap();
        assert!(BookPlan::compile(&parsed).is_none(), "{doc}");
    }
    for doc in [
        // something the outcome does not hold
        "mutation{bookAppointment(input:{slotId:\"1\",idempotencyKey:\"k\"}){appointment{slot{id}}}}",
        "mutation{bookAppointment(input:{slotId:\"1\",idempotencyKey:\"k\"}){appointment{slots{id}}}}",
        // a longer appointment
        "mutation{bookAppointment(input:{slotId:\"1\",idempotencyKey:\"k\",durationMinutes:30}){replayed}}",
        // a response key twice (the executor merges them)
        "mutation{bookAppointment(input:{slotId:\"1\",idempotencyKey:\"k\"}){replayed replayed}}",
        // a fragment
        "mutation{bookAppointment(input:{slotId:\"1\",idempotencyKey:\"k\"}){...P}} fragment P on BookAppointmentPayload{replayed}",
        // a default value
        "mutation($k:String!=\"k\"){bookAppointment(input:{slotId:\"1\",idempotencyKey:$k}){replayed}}",
        // two fields, or two operations
        "mutation{a:bookAppointment(input:{slotId:\"1\",idempotencyKey:\"k\"}){replayed} b:bookAppointment(input:{slotId:\"1\",idempotencyKey:\"j\"}){replayed}}",
        "mutation A{bookAppointment(input:{slotId:\"1\",idempotencyKey:\"k\"}){replayed}} query B{__typename}",
        // the input as one variable
        "mutation($in:BookAppointmentInput!){bookAppointment(input:$in){replayed}}",
    ] {
        assert!(BookPlan::compile(&parse_query(doc).unwrap()).is_none(), "{doc}");
    }
}

#[tokio::test]
async fn every_outcome_reads_the_same_through_the_direct_path_and_the_executor() {
    let database = TestDatabase::new().await;
    // Each case is sent three times per document: no rate limit in the way.
    let app = TestApp::spawn_on(&database, &[("RATE_LIMIT_BOOKINGS", "0")]).await;
    let doctor_id = app.create_doctor("UTC").await;
    let partner = partner("partner-direct");
    for (i, doc) in DOCUMENTS.into_iter().enumerate() {
        let key = |name: &str| format!("{name}-{i}");
        let (_, wide) = app.doctor_with_slot(100).await;
        let (_, full) = app.doctor_with_slot(1).await;
        let holder = format!("{}", 7000 + i);
        let vars = |slot: &str, k: &str, p: Option<&str>| json!({ "s": slot, "k": key(k), "p": p });

        // A success through the direct path, then its replays through both.
        let warm = format!("{}", 9000 + i);
        let first = app.post(Some(&partner), &direct(doc), vars(&wide, "warm", Some(&warm))).await;
        assert_eq!(first.0, 200, "{}", first.1);
        let (_, booked) = app.post(Some(&partner), &direct(doc), vars(&wide, "new", Some(&holder))).await;
        let (status, replay) = both(&app, Some(&partner), doc, vars(&wide, "new", Some(&holder))).await;
        assert_eq!(status, 200);
        if doc.contains("replayed") {
            assert!(replay.contains(":true"), "{replay}");
            assert_eq!(booked.to_string().replace(":false", ":true"), replay, "the success and its replay");
        } else {
            assert_eq!(booked.to_string(), replay, "the success and its replay");
        }

        // The replay of a success cancelled since (status, cancelledAt, cancelledBy).
        let (_, gone) =
            app.post(Some(&partner), &direct(doc), vars(&wide, "gone", Some(&format!("{}", 6000 + i)))).await;
        if let Some(id) = gone.pointer("/data/bookAppointment/appointment/id").and_then(Value::as_str) {
            app.cancel(&partner, id).await;
            let (status, replay) =
                both(&app, Some(&partner), doc, vars(&wide, "gone", Some(&format!("{}", 6000 + i)))).await;
            assert_eq!(status, 200);
            assert!(replay.contains("CANCELLED"), "{replay}");
        }

        // Refusals, each repeatable.
        app.post(Some(&partner), &direct(doc), vars(&full, "hold", Some(&holder))).await;
        let other = format!("{}", 8000 + i);
        for (what, v) in [
            ("SLOT_FULL", vars(&full, "full", Some(&other))),
            ("ALREADY_BOOKED", vars(&full, "seat", Some(&holder))),
            ("IDEMPOTENCY_KEY_REUSED", vars(&full, "new", Some(&holder))),
            ("SLOT_NOT_FOUND", vars("999999999", "missing", Some(&other))),
            ("INVALID_INPUT", vars("not-an-id", "bad", Some(&other))),
            ("INVALID_INPUT", vars(&wide, "no-patient", None)),
        ] {
            if what == "INVALID_INPUT" && doc.contains("$p:ID!") && v["p"].is_null() {
                continue; // refused by validation, before either path
            }
            let (status, answer) = both(&app, Some(&partner), doc, v).await;
            assert_eq!(status, 200);
            if doc.contains("code") {
                assert!(answer.contains(what), "{what}: {answer}");
            }
        }

        // Top-level errors: no caller, a caller who may not book.
        let (status, answer) = both(&app, None, doc, vars(&wide, "anonymous", Some(&other))).await;
        assert!(answer.contains("UNAUTHENTICATED") && answer.contains("\"data\":null"), "{status} {answer}");
        let (_, answer) = both(&app, Some(&doctor(&doctor_id)), doc, vars(&wide, "doctor", Some(&other))).await;
        assert!(answer.contains("FORBIDDEN"), "{answer}");
    }
    app.assert_counts_consistent().await;
}

/// Slot-list documents with the same `@DIRECTIVE` marker; `DOCTOR` and `DATE` stand for
/// literals.
const LISTS: [&str; 3] = [
    "query($d:ID!,$t:Date!){availableSlots(doctorId:$d,date:$t) @DIRECTIVE {id startAt available}}",
    "query L($t:Date!,$d:ID!){s: availableSlots(date:$t,doctorId:$d) @DIRECTIVE \
     {__typename v: version closed available bookedCount capacity endAt startAt id}}",
    "{availableSlots(doctorId:\"DOCTOR\",date:\"DATE\") @DIRECTIVE {startAt id}}",
];

#[tokio::test]
async fn the_list_plan_takes_exactly_the_documents_it_can_answer() {
    for doc in LISTS {
        let doc = &doc.replace("DOCTOR", "7").replace("DATE", "2030-01-31");
        let plan = ListPlan::compile(&parse_query(direct(doc)).unwrap());
        assert!(plan.is_some(), "{doc}");
        assert!(ListPlan::compile(&parse_query(executor(doc)).unwrap()).is_none(), "{doc}");
        let vars = serde_json::from_value(json!({ "d": "7", "t": "2030-01-31" })).unwrap();
        let bound = plan.as_ref().and_then(|p| p.bind(&vars));
        assert!(bound.is_some_and(|(_, date)| date.to_string() == "2030-01-31"), "{doc}");
    }
    for doc in [
        // something the slot does not hold itself
        "{availableSlots(doctorId:\"1\",date:\"2030-01-01\"){id doctor{name}}}",
        // a duration, or an argument that needs coercion
        "{availableSlots(doctorId:\"1\",date:\"2030-01-01\",durationMinutes:30){id}}",
        "{availableSlots(doctorId:1,date:\"2030-01-01\"){id}}",
        // a response key twice, a fragment, two root fields, a default value
        "{availableSlots(doctorId:\"1\",date:\"2030-01-01\"){id id}}",
        "{availableSlots(doctorId:\"1\",date:\"2030-01-01\"){...S}} fragment S on Slot{id}",
        "{availableSlots(doctorId:\"1\",date:\"2030-01-01\"){id} __typename}",
        "query($t:Date!=\"2030-01-01\"){availableSlots(doctorId:\"1\",date:$t){id}}",
        // not a query
        "mutation{bookAppointment(input:{slotId:\"1\",idempotencyKey:\"k\"}){replayed}}",
    ] {
        assert!(ListPlan::compile(&parse_query(doc).unwrap()).is_none(), "{doc}");
    }
}

#[tokio::test]
async fn slot_lists_read_the_same_through_the_direct_path_and_the_executor() {
    let database = TestDatabase::new().await;
    // No kept answers: every repeat of a list is answered again.
    let app = TestApp::spawn_on(&database, &[("ANSWER_CACHE_TTL_MS", "0")]).await;
    let doctor_id = app.create_doctor("Europe/Berlin").await;
    let day = tomorrow();
    let slots = app.publish(&doctor_id, &day, "09:00", "11:00", 30, 2).await;
    app.book(&patient(1), &slots[0], "one", None).await;
    app.book(&patient(2), &slots[0], "two", None).await;
    app.book(&patient(3), &slots[1], "three", None).await;
    let closed = json!({ "d": doctor_id, "f": format!("{day}T09:50:00+01:00"), "t": format!("{day}T10:10:00+01:00") });
    app.gql(
        Some(&admin()),
        "mutation($d:ID!,$f:DateTime!,$t:DateTime!){closeSlots(input:{doctorId:$d,from:$f,to:$t}){closed}}",
        closed,
    )
    .await;
    for doc in LISTS {
        for (doctor, date) in [
            (doctor_id.as_str(), day.as_str()),
            ("999999999", day.as_str()),
            ("not-an-id", day.as_str()),
            (doctor_id.as_str(), "2001-01-01"),
            (doctor_id.as_str(), "2030-02-30"),
        ] {
            let doc = doc.replace("DOCTOR", doctor).replace("DATE", date);
            let (status, answer) = both(&app, None, &doc, json!({ "d": doctor, "t": date })).await;
            if doctor == doctor_id && date == day {
                assert_eq!(status, 200);
                assert!(answer.contains(&slots[1]) && !answer.contains(&format!("\"{}\"", slots[0])), "{answer}");
            }
        }
    }
}

#[tokio::test]
async fn a_slot_list_whose_read_fails_reads_the_same_through_the_direct_path_and_the_executor() {
    // The direct path answers a failed read itself, as the executor would, instead of handing
    // the request to the executor to read (and fail) again.
    let database = TestDatabase::new().await;
    let app = TestApp::spawn_on(&database, &[("ANSWER_CACHE_TTL_MS", "0")]).await;
    let doctor_id = app.create_doctor("UTC").await;
    let day = tomorrow();
    app.publish(&doctor_id, &day, "09:00", "10:00", 30, 1).await;
    let conn = sea_orm::Database::connect(&database.url).await.unwrap();
    sea_orm::ConnectionTrait::execute_unprepared(&conn, "ALTER TABLE time_slot RENAME TO time_slot_gone")
        .await
        .unwrap();
    for doc in LISTS {
        let doc = doc.replace("DOCTOR", &doctor_id).replace("DATE", &day);
        let mut answers = Vec::new();
        for query in [direct(&doc), direct(&doc), executor(&doc)] {
            let (status, mut body) = app.post(None, &query, json!({ "d": doctor_id, "t": day })).await;
            // Each INTERNAL error names its own request.
            let ext = &mut body["errors"][0]["extensions"];
            assert!(ext["requestId"].is_string(), "{body}");
            ext.as_object_mut().unwrap().remove("requestId");
            answers.push((status, body.to_string()));
        }
        assert_eq!(answers[1], answers[2], "direct and executor answers differ for {doc}");
        assert!(answers[1].1.contains("\"data\":null") && answers[1].1.contains("INTERNAL"), "{}", answers[1].1);
    }
    sea_orm::ConnectionTrait::execute_unprepared(&conn, "ALTER TABLE time_slot_gone RENAME TO time_slot")
        .await
        .unwrap();
}
