//! Burst protection (issue 4): the slot-list cache, the per-patient rate limit, known-full
//! early rejects, the bulkhead, and Redis failing. Behaviour only, never timing.

use serde_json::{json, Value};

use crate::helpers::*;

const LIST: &str = "query($d:ID!,$t:Date!){availableSlots(doctorId:$d,date:$t){id available}}";

async fn list(app: &TestApp, doctor: &str) -> Vec<Value> {
    let data = app.gql(None, LIST, json!({ "d": doctor, "t": tomorrow() })).await;
    data["availableSlots"].as_array().cloned().unwrap_or_default()
}

/// A server that runs no statement of its own accord, on a fresh database.
async fn quiet_app() -> (TestApp, TestDatabase) {
    let db = TestDatabase::new().await;
    (TestApp::spawn_on(&db, &QUIET).await, db)
}

/// Waits until the outbox relay has taken every row (a publish leaves one, which it sends to
/// every instance), so that a count of statements after it is the requests' own.
async fn relayed(app: &TestApp) {
    use sea_orm::{EntityTrait, PaginatorTrait};
    for _ in 0..200 {
        let left = clinic_booking::db::entity::outbox::Entity::find().count(app.db.conn()).await.expect("count");
        if left == 0 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("the outbox relay never took the rows");
}

/// Reads `app`'s list of the doctor until a read runs no statement, `len` slots each time
/// (`why` says what serves it). The notice of an earlier commit may still be on its way back
/// from Redis and end the first answer kept after it, so a few pairs of reads are allowed; an
/// answer that is never kept fails.
async fn read_twice_from_cache(app: &TestApp, doctor: &str, len: usize, why: &str) {
    assert_eq!(list(app, doctor).await.len(), len);
    for _ in 0..20 {
        let before = app.statements();
        assert_eq!(list(app, doctor).await.len(), len);
        if app.statements() == before {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("{why}: every read ran statements");
}

/// Whether `app`'s list of the doctor comes to hold `len` slots within a few seconds (another
/// instance's commit reaches this one's rendered answers through pub/sub, asynchronously).
async fn list_reaches(app: &TestApp, doctor: &str, len: usize) -> bool {
    for _ in 0..200 {
        if list(app, doctor).await.len() == len {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test]
async fn a_cached_list_is_served_without_the_database_and_dropped_on_commit() {
    let (app, _db) = quiet_app().await;
    let (doctor, slot) = app.doctor_with_slot(1).await;
    relayed(&app).await;
    read_twice_from_cache(&app, &doctor, 1, "the second read comes from the cache").await;

    let booked = app.book(&patient(1), &slot, "k1", None).await;
    let id = booked["appointment"]["id"].as_str().expect("booked").to_owned();
    assert!(list(&app, &doctor).await.is_empty(), "the booking's commit dropped the cached list");

    assert_eq!(app.cancel(&patient(1), &id).await["cancelled"], true);
    assert_eq!(list(&app, &doctor).await.len(), 1, "the cancel's commit dropped it too");
}

#[tokio::test]
async fn a_kept_answer_still_checks_the_token_and_ends_with_a_new_schedule() {
    let (app, _db) = quiet_app().await;
    let (doctor, _slot) = app.doctor_with_slot(1).await;
    relayed(&app).await;
    read_twice_from_cache(&app, &doctor, 1, "the answer was kept").await;
    let (status, body) = app.post(Some("not-a-token"), LIST, json!({ "d": doctor, "t": tomorrow() })).await;
    assert_eq!((status, body["errors"][0]["extensions"]["code"].as_str()), (401, Some("UNAUTHENTICATED")));

    let date = tomorrow();
    app.publish(&doctor, &date, "10:00", "10:30", 15, 1).await;
    assert_eq!(list(&app, &doctor).await.len(), 3, "the publish dropped the kept answer");
}

#[tokio::test]
async fn instances_sharing_redis_see_each_others_commits() {
    if !has_redis() {
        return; // without Redis each process has its own cache (single-process mode)
    }
    let db = TestDatabase::new().await;
    let a = TestApp::spawn_on(&db, &QUIET).await;
    let b = TestApp::spawn_on(&db, &QUIET).await;
    let (doctor, slot) = a.doctor_with_slot(1).await;
    relayed(&a).await;
    read_twice_from_cache(&b, &doctor, 1, "B serves the shared cached list").await;

    let booked = a.book(&patient(1), &slot, "k1", None).await;
    assert!(booked["appointment"].is_object());
    assert!(list_reaches(&b, &doctor, 0).await, "B never saw A's booking");
    // B now knows the slot is full (A marked it); a cancel through B clears that for A.
    assert_eq!(user_error(&a.book(&patient(2), &slot, "k2", None).await), Some("SLOT_FULL"));
    let id = booked["appointment"]["id"].as_str().expect("id");
    assert_eq!(b.cancel(&patient(1), id).await["cancelled"], true);
    assert!(list_reaches(&a, &doctor, 1).await, "A never saw B's cancel");
    assert!(a.book(&patient(2), &slot, "k3", None).await["appointment"].is_object());
    a.assert_counts_consistent().await;
}

#[tokio::test]
async fn a_schedule_published_on_one_instance_ends_the_answers_another_keeps() {
    if !has_redis() {
        return; // without Redis each process has its own cache (single-process mode)
    }
    let db = TestDatabase::new().await;
    // B's kept answer would outlive the test: only the publish's notice over Redis can end it.
    let settings = [&QUIET[..], &[("ANSWER_CACHE_TTL_MS", "600000")]].concat();
    let a = TestApp::spawn_on(&db, &settings).await;
    let b = TestApp::spawn_on(&db, &settings).await;
    let (doctor, _slot) = a.doctor_with_slot(1).await;
    relayed(&a).await;
    read_twice_from_cache(&b, &doctor, 1, "B keeps its answer").await;

    a.publish(&doctor, &tomorrow(), "10:00", "10:30", 15, 1).await;
    assert!(list_reaches(&b, &doctor, 3).await, "B never heard of A's new slots");
    read_twice_from_cache(&b, &doctor, 3, "and keeps the new answer").await;
}

#[tokio::test]
async fn the_rate_limit_answers_429_and_lets_the_patient_in_after_the_window() {
    let db = TestDatabase::new().await;
    let app = TestApp::spawn_on(&db, &[("RATE_LIMIT_BOOKINGS", "2"), ("RATE_LIMIT_WINDOW_SECS", "1")]).await;
    let (_, slot) = app.doctor_with_slot(1).await;
    let p = partner("clinic-app");
    assert!(app.book(&p, &slot, "a", Some("10")).await["appointment"].is_object());
    assert_eq!(user_error(&app.book(&p, &slot, "b", Some("10")).await), Some("ALREADY_BOOKED"));

    let resp = app
        .client
        .post(format!("{}/graphql", app.address))
        .bearer_auth(&p)
        .json(&json!({ "query": BOOK, "variables": { "s": slot, "k": "c", "p": "10" } }))
        .send()
        .await
        .expect("sent");
    assert_eq!(resp.status().as_u16(), 429);
    let retry_after: u64 = resp.headers()["retry-after"].to_str().expect("text").parse().expect("seconds");
    assert_eq!(retry_after, 1);
    let body: Value = resp.json().await.expect("json");
    assert_eq!(body["errors"][0]["extensions"]["code"], "RATE_LIMITED");
    assert_eq!(body["errors"][0]["extensions"]["retryAfterSeconds"], 1);

    // The limit is per patient: the same partner books for someone else.
    assert_eq!(user_error(&app.book(&p, &slot, "d", Some("11")).await), Some("SLOT_FULL"));
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(user_error(&app.book(&p, &slot, "e", Some("10")).await), Some("ALREADY_BOOKED"));
}

#[tokio::test]
async fn a_rate_limit_counter_left_without_an_expiry_gets_the_window() {
    if !has_redis() {
        return; // the in-process count has no such state
    }
    let db = TestDatabase::new().await;
    let app = TestApp::spawn_on(&db, &[("RATE_LIMIT_BOOKINGS", "2"), ("RATE_LIMIT_WINDOW_SECS", "1")]).await;
    let (_, slot) = app.doctor_with_slot(1).await;
    // What a window that ends between the counter's `SET NX` and its `INCR` leaves behind: a
    // count with no expiry, which would hold the patient back for good.
    let client = redis::Client::open(db.redis_url.clone().expect("redis url")).expect("redis client");
    let mut conn = client.get_multiplexed_async_connection().await.expect("redis connection");
    let key = format!("{}:rl:10", db.redis_prefix);
    redis::cmd("SET").arg(&key).arg(1).query_async::<()>(&mut conn).await.expect("SET");
    let p = partner("clinic-app");
    assert!(app.book(&p, &slot, "a", Some("10")).await["appointment"].is_object(), "the second attempt");
    let ttl: i64 = redis::cmd("PTTL").arg(&key).query_async(&mut conn).await.expect("PTTL");
    assert!((1..=1000).contains(&ttl), "the counter expires with this window: {ttl}");
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(user_error(&app.book(&p, &slot, "b", Some("10")).await), Some("ALREADY_BOOKED"), "and lets go");
}

#[tokio::test]
async fn known_full_answers_without_the_transaction_keeps_replays_and_clears_on_cancel() {
    let (app, _db) = quiet_app().await;
    let (_, slot) = app.doctor_with_slot(1).await;
    let first = app.book(&patient(1), &slot, "k1", None).await;
    let id = first["appointment"]["id"].as_str().expect("booked").to_owned();
    assert_eq!(user_error(&app.book(&patient(2), &slot, "k", None).await), Some("SLOT_FULL"));
    // Let the outbox relay publish the first booking (it gathers commits for
    // `OUTBOX_GATHER_MS`, 10 ms by default), so its claim does not fall into the count below.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;

    let before = app.statements();
    assert_eq!(user_error(&app.book(&patient(3), &slot, "k", None).await), Some("SLOT_FULL"));
    // One indexed read (the database path takes six: begin, update, rollback and three reads);
    // the bound leaves room for the outbox relay's background statements.
    assert!(app.statements() - before < 4, "{} statements", app.statements() - before);

    // What outranks SLOT_FULL still does while the slot is known full.
    let replay = app.book(&patient(1), &slot, "k1", None).await;
    assert_eq!((replay["replayed"].clone(), replay["appointment"]["id"].clone()), (json!(true), json!(id)));
    assert_eq!(user_error(&app.book(&patient(1), &slot, "k2", None).await), Some("ALREADY_BOOKED"));
    let other = app.doctor_with_slot(1).await.1;
    assert_eq!(user_error(&app.book(&patient(1), &other, "k1", None).await), Some("IDEMPOTENCY_KEY_REUSED"));

    assert_eq!(app.cancel(&patient(1), &id).await["cancelled"], true);
    let after = app.book(&patient(2), &slot, "k9", None).await;
    assert!(after["appointment"].is_object(), "the cancel cleared the mark: {after}");
    app.assert_counts_consistent().await;
}

#[tokio::test]
async fn a_stale_known_full_mark_never_refuses_a_free_seat() {
    if !has_redis() {
        return; // the in-process marks cannot miss a cancel
    }
    let db = TestDatabase::new().await;
    let app = TestApp::spawn_on(&db, &[]).await;
    let (_, slot) = app.doctor_with_slot(1).await;
    let first = app.book(&patient(1), &slot, "k1", None).await;
    let id = first["appointment"]["id"].as_str().expect("booked").to_owned();
    assert_eq!(app.cancel(&patient(1), &id).await["cancelled"], true);
    // Put back the "full at version 1" mark, as if the cancel's clearing had been lost (it
    // commits while Redis is away): the seat is free, the mark says otherwise.
    let client = redis::Client::open(db.redis_url.clone().expect("redis url")).expect("redis client");
    let mut conn = client.get_multiplexed_async_connection().await.expect("redis connection");
    let start_us = (chrono::Utc::now() + chrono::Duration::days(1)).timestamp_micros();
    redis::cmd("SET")
        .arg(format!("{}:full:{slot}", db.redis_prefix))
        .arg(format!("F:1:{start_us}"))
        .arg("PX")
        .arg(30_000)
        .query_async::<()>(&mut conn)
        .await
        .expect("SET");
    let booked = app.book(&patient(2), &slot, "k2", None).await;
    assert!(booked["appointment"].is_object(), "the free seat is booked: {booked}");
    assert_eq!(user_error(&app.book(&patient(3), &slot, "k3", None).await), Some("SLOT_FULL"));
    app.assert_counts_consistent().await;
}

#[tokio::test]
async fn with_redis_unreachable_the_service_starts_and_books_correctly() {
    let db = TestDatabase::new().await;
    // Nothing listens on port 1: every Redis operation fails at once.
    let app = TestApp::spawn_on(&db, &[("REDIS_URL", "redis://127.0.0.1:1"), ("RATE_LIMIT_BOOKINGS", "3")]).await;
    let ready = app.client.get(format!("{}/readyz", app.address)).send().await.expect("readyz");
    assert_eq!(ready.status().as_u16(), 200);
    assert_eq!(ready.json::<Value>().await.expect("json")["status"], "degraded");

    let (doctor, slot) = app.doctor_with_slot(3).await;
    assert_eq!(list(&app, &doctor).await.len(), 1);
    let p = partner("clinic-app");
    let attempts = (0..10).map(|i| {
        let (app, p, slot) = (&app, &p, &slot);
        async move { app.book(p, slot, &format!("k{i}"), Some(&(100 + i).to_string())).await }
    });
    let answers = futures_util::future::join_all(attempts).await;
    let booked = answers.iter().filter(|a| a["appointment"].is_object()).count();
    let full = answers.iter().filter(|a| user_error(a) == Some("SLOT_FULL")).count();
    assert_eq!((booked, full), (3, 7), "{answers:?}");
    assert!(list(&app, &doctor).await.is_empty(), "the list is read from the database");
    // The rate limit falls back to this process.
    for key in ["r1", "r2"] {
        let (status, body) = app.post(Some(&p), BOOK, json!({ "s": slot, "k": key, "p": "100" })).await;
        assert!(status == 200 && body.get("errors").is_none(), "{body}");
    }
    assert_eq!(app.error_code(Some(&p), BOOK, json!({ "s": slot, "k": "r3", "p": "100" })).await, "RATE_LIMITED");
    app.assert_counts_consistent().await;
}

#[tokio::test]
async fn a_saturated_bulkhead_answers_overloaded_never_5xx() {
    let db = TestDatabase::new().await;
    let app = TestApp::spawn_on(
        &db,
        &[("BOOKING_CONCURRENCY", "1"), ("BOOKING_QUEUE_TIMEOUT_MS", "1"), ("RATE_LIMIT_BOOKINGS", "0")],
    )
    .await;
    let (_, slot) = app.doctor_with_slot(1_000_000).await;
    let p = partner("clinic-app");
    let mut overloaded = 0;
    let mut booked = 0;
    for round in 0..5 {
        let attempts = (0..30).map(|i| {
            let (app, p, slot) = (&app, &p, &slot);
            let patient = (round * 100 + i + 1).to_string();
            async move { app.post(Some(p), BOOK, json!({ "s": slot, "k": format!("k{patient}"), "p": patient })).await }
        });
        for (status, body) in futures_util::future::join_all(attempts).await {
            assert_eq!(status, 200, "{body}");
            match body["errors"][0]["extensions"]["code"].as_str() {
                Some("OVERLOADED") => {
                    assert_eq!(body["errors"][0]["extensions"]["retryAfterSeconds"], 1);
                    overloaded += 1;
                }
                // A request past the bulkhead that the pool gives no connection in time: part
                // four answers it UNAVAILABLE (retry with the same key), never a 5xx.
                Some("UNAVAILABLE") => {
                    assert_eq!(body["errors"][0]["extensions"]["retryAfterSeconds"], 2);
                }
                Some(other) => panic!("unexpected {other}: {body}"),
                None => {
                    assert!(body["data"]["bookAppointment"]["appointment"].is_object(), "{body}");
                    booked += 1;
                }
            }
        }
        if overloaded > 0 {
            break;
        }
    }
    assert!(overloaded > 0 && booked > 0, "overloaded {overloaded}, booked {booked}");
    assert_eq!(app.slot(&slot).await["bookedCount"], booked);
    app.assert_counts_consistent().await;
}

#[tokio::test]
async fn metrics_name_the_guards() {
    let (app, _db) = TestApp::spawn().await;
    let (doctor, slot) = app.doctor_with_slot(1).await;
    let metrics = || async {
        let text = app.client.get(format!("{}/metrics", app.address)).send().await.expect("metrics").text().await;
        text.expect("text")
    };
    // With Redis the publish's notice comes back to this instance too, a few milliseconds
    // later, and ends an answer kept before it: read until one is served.
    for _ in 0..100 {
        list(&app, &doctor).await;
        if metrics().await.contains("answer_cache_hits_total") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    app.book(&patient(1), &slot, "k", None).await;
    app.book(&patient(2), &slot, "k", None).await;
    app.book(&patient(3), &slot, "k", None).await;
    let text = metrics().await;
    for name in [
        "booking_attempts_total{operation=\"book\",outcome=\"BOOKED\"}",
        "booking_attempts_total{operation=\"book\",outcome=\"SLOT_FULL\"}",
        "slot_cache_requests_total{result=\"miss\"}",
        "answer_cache_hits_total",
        "known_full_rejects_total",
        "booking_bulkhead_in_use",
        "db_pool_in_use",
    ] {
        assert!(text.contains(name), "no {name} in /metrics");
    }
}
