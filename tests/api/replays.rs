//! A replay is not an attempt: retries of a booking that succeeded answer with the same
//! appointment whatever the per-patient rate limit says, also when they arrive together, and
//! they do not use up the limit. A retry after a refusal is a new attempt. With the default
//! limit (5 attempts per patient per 10 s), on one instance and on two sharing the database
//! (and Redis, when the run has it).

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::Barrier;

use crate::helpers::*;

/// One or two instances with the default rate limit.
async fn instances(two: bool) -> (Vec<Arc<TestApp>>, TestDatabase) {
    let db = TestDatabase::new().await;
    let mut apps = vec![Arc::new(TestApp::spawn_on(&db, &[]).await)];
    if two {
        apps.push(Arc::new(TestApp::spawn_on(&db, &[]).await));
    }
    (apps, db)
}

/// `n` posts of one booking released together, spread over `apps`; (status, body) each.
async fn together(apps: &[Arc<TestApp>], n: usize, token: &str, slot: &str, key: &str) -> Vec<(u16, Value)> {
    let barrier = Arc::new(Barrier::new(n));
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let (app, barrier) = (Arc::clone(&apps[i % apps.len()]), Arc::clone(&barrier));
            let (token, slot, key) = (token.to_owned(), slot.to_owned(), key.to_owned());
            tokio::spawn(async move {
                barrier.wait().await;
                app.post(Some(&token), BOOK, serde_json::json!({ "s": slot, "k": key, "p": "42" })).await
            })
        })
        .collect();
    let mut out = Vec::with_capacity(n);
    for t in tasks {
        out.push(t.await.expect("task"));
    }
    out
}

fn assert_one_appointment(answers: &[(u16, Value)]) -> String {
    for (status, body) in answers {
        assert_eq!(*status, 200, "a retry is never refused for the others' sake: {body}");
    }
    let ids: Vec<&str> =
        answers.iter().filter_map(|(_, b)| b["data"]["bookAppointment"]["appointment"]["id"].as_str()).collect();
    assert_eq!(ids.len(), answers.len(), "every retry answers with the appointment");
    assert!(ids.iter().all(|id| *id == ids[0]), "the same one: {ids:?}");
    let originals = answers.iter().filter(|(_, b)| b["data"]["bookAppointment"]["replayed"] == false).count();
    assert_eq!(originals, 1, "exactly one original");
    ids[0].to_owned()
}

#[tokio::test]
async fn fifty_concurrent_retries_cost_one_attempt() {
    let (apps, _db) = instances(false).await;
    let (_, slot) = apps[0].doctor_with_slot(1).await;
    let answers = together(&apps, 50, &partner("retrying"), &slot, "same-key").await;
    let id = assert_one_appointment(&answers);
    // Later retries meet the slot known full, and replay from there.
    for _ in 0..10 {
        let again = apps[0].book(&partner("retrying"), &slot, "same-key", Some("42")).await;
        assert_eq!((again["replayed"].as_bool(), again["appointment"]["id"].as_str()), (Some(true), Some(id.as_str())));
    }
    // The patient's limit is untouched by the replays: four new attempts still go through.
    for i in 0..4 {
        let (_, other) = apps[0].doctor_with_slot(1).await;
        let (status, body) = apps[0]
            .post(Some(&partner("retrying")), BOOK, serde_json::json!({ "s": other, "k": format!("n{i}"), "p": "42" }))
            .await;
        assert_eq!(status, 200, "attempt {i}: {body}");
    }
    apps[0].assert_counts_consistent().await;
}

#[tokio::test]
async fn fifty_concurrent_retries_on_two_instances_cost_one_attempt_each() {
    let (apps, _db) = instances(true).await;
    let (_, slot) = apps[0].doctor_with_slot(1).await;
    assert_one_appointment(&together(&apps, 50, &partner("retrying"), &slot, "same-key").await);
    apps[0].assert_counts_consistent().await;
}

#[tokio::test]
async fn retries_of_a_success_replay_past_an_exhausted_limit() {
    let (apps, _db) = instances(false).await;
    let app = &apps[0];
    let token = partner("busy");
    let (_, slot) = app.doctor_with_slot(1).await;
    let first = app.book(&token, &slot, "mine", Some("42")).await;
    assert!(first["appointment"].is_object());
    // The slot is now full (known-full) and the patient uses up the limit on other slots.
    let mut limited = false;
    for i in 0..6 {
        let (_, other) = app.doctor_with_slot(1).await;
        let (status, _) =
            app.post(Some(&token), BOOK, serde_json::json!({ "s": other, "k": format!("x{i}"), "p": "42" })).await;
        limited |= status == 429;
    }
    assert!(limited, "the limit is reached");
    // Over the limit, concurrent retries of the success still replay it.
    let answers = together(&apps, 20, &token, &slot, "mine").await;
    for (status, body) in &answers {
        assert_eq!(*status, 200, "{body}");
        assert_eq!(body["data"]["bookAppointment"]["replayed"], true, "{body}");
        assert_eq!(body["data"]["bookAppointment"]["appointment"]["id"], first["appointment"]["id"]);
    }
    // A new key is a new attempt, still refused.
    let (_, other) = app.doctor_with_slot(1).await;
    let (status, body) = app.post(Some(&token), BOOK, serde_json::json!({ "s": other, "k": "new", "p": "42" })).await;
    assert_eq!((status, body["errors"][0]["extensions"]["code"].as_str()), (429, Some("RATE_LIMITED")), "{body}");
    app.assert_counts_consistent().await;
}

#[tokio::test]
async fn a_retry_after_a_refusal_is_a_new_attempt() {
    let (apps, _db) = instances(false).await;
    let app = &apps[0];
    let (_, slot) = app.doctor_with_slot(1).await;
    app.book(&patient(1), &slot, "taken", None).await;
    // Patient 2 keeps retrying a booking that is refused (full): each retry counts.
    let mut statuses = Vec::new();
    for _ in 0..7 {
        let (status, body) = app.post(Some(&patient(2)), BOOK, serde_json::json!({ "s": slot, "k": "again" })).await;
        if status == 200 {
            assert_eq!(user_error(&body["data"]["bookAppointment"]), Some("SLOT_FULL"), "{body}");
        }
        statuses.push(status);
    }
    assert_eq!(&statuses[..5], [200; 5], "five attempts");
    assert!(statuses[5..].iter().all(|s| *s == 429), "then the limit: {statuses:?}");
    app.assert_counts_consistent().await;
}
