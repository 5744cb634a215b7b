//! Booking, replay and cancel: the happy paths and each refusal.

use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn book_replay_cancel_and_rebook() {
    let (app, _db) = TestApp::spawn().await;
    let (_, slot) = app.doctor_with_slot(1).await;
    let p = patient(77);

    let first = app.book(&p, &slot, "key-1", None).await;
    assert_eq!(first["replayed"], false);
    assert_eq!(first["appointment"]["status"], "BOOKED");
    assert_eq!(first["appointment"]["patientId"], "77");
    let id = first["appointment"]["id"].as_str().unwrap().to_owned();

    let again = app.book(&p, &slot, "key-1", None).await;
    assert_eq!(again["replayed"], true);
    assert_eq!(again["appointment"]["id"], id.as_str());
    assert_eq!(app.slot(&slot).await["bookedCount"], 1);

    let cancelled = app.cancel(&p, &id).await;
    assert_eq!(cancelled["cancelled"], true);
    assert_eq!(cancelled["appointment"]["status"], "CANCELLED");
    let twice = app.cancel(&p, &id).await;
    assert_eq!(twice["cancelled"], false);
    assert_eq!(app.slot(&slot).await, json!({ "bookedCount": 0, "capacity": 1, "available": 1, "version": 2 }));

    // The old key replays the cancelled appointment; a new key books again.
    let replay = app.book(&p, &slot, "key-1", None).await;
    assert_eq!(
        (replay["replayed"].clone(), replay["appointment"]["status"].clone()),
        (json!(true), json!("CANCELLED"))
    );
    let rebook = app.book(&p, &slot, "key-2", None).await;
    assert_eq!(rebook["appointment"]["status"], "BOOKED");
    app.assert_counts_consistent().await;
}

#[tokio::test]
async fn each_refusal_has_its_code() {
    let (app, _db) = TestApp::spawn().await;
    let (_, slot) = app.doctor_with_slot(1).await;
    let booked = app.book(&patient(1), &slot, "k", None).await;
    assert!(booked["appointment"].is_object());

    assert_eq!(user_error(&app.book(&patient(2), &slot, "k", None).await), Some("SLOT_FULL"));
    assert_eq!(user_error(&app.book(&patient(1), &slot, "k2", None).await), Some("ALREADY_BOOKED"));
    assert_eq!(user_error(&app.book(&patient(1), "999999", "k3", None).await), Some("SLOT_NOT_FOUND"));
    let other = app.doctor_with_slot(1).await.1;
    assert_eq!(user_error(&app.book(&patient(1), &other, "k", None).await), Some("IDEMPOTENCY_KEY_REUSED"));
    for (slot_id, key) in
        [("abc", "k9"), (slot.as_str(), ""), (slot.as_str(), "has space"), (slot.as_str(), &"x".repeat(65))]
    {
        let payload = app.book(&patient(3), slot_id, key, None).await;
        assert_eq!(user_error(&payload), Some("INVALID_INPUT"), "{slot_id:?} {key:?}: {payload}");
    }
}

#[tokio::test]
async fn capacity_is_shared_and_already_booked_wins_over_full() {
    let (app, _db) = TestApp::spawn().await;
    let (_, slot) = app.doctor_with_slot(2).await;
    let p = partner("clinic-app");
    assert!(app.book(&p, &slot, "a", Some("10")).await["appointment"].is_object());
    assert_eq!(user_error(&app.book(&p, &slot, "b", Some("10")).await), Some("ALREADY_BOOKED"));
    assert!(app.book(&p, &slot, "c", Some("11")).await["appointment"].is_object());
    assert_eq!(user_error(&app.book(&p, &slot, "d", Some("10")).await), Some("ALREADY_BOOKED"));
    assert_eq!(user_error(&app.book(&p, &slot, "e", Some("12")).await), Some("SLOT_FULL"));
    app.assert_counts_consistent().await;
}

#[tokio::test]
async fn internal_failures_are_masked_and_roll_back() {
    use sea_orm::ConnectionTrait;
    let (app, _db) = TestApp::spawn().await;
    let (_, slot) = app.doctor_with_slot(2).await;
    let kept = app.book(&patient(1), &slot, "k1", None).await["appointment"]["id"].as_str().unwrap().to_owned();
    // Break the schema under the running server: the outbox insert of the next booking fails.
    app.db.conn().execute_unprepared("DROP TABLE outbox").await.unwrap();

    let (status, body) = app.post(Some(&patient(2)), BOOK, json!({ "s": slot, "k": "k2", "p": null })).await;
    assert_eq!(status, 200);
    let error = &body["errors"][0];
    assert_eq!(error["extensions"]["code"], "INTERNAL", "{body}");
    assert_eq!(error["message"], "internal error", "no detail leaks: {body}");
    assert!(error["extensions"]["requestId"].is_string());
    let (_, body) = app
        .post(Some(&patient(1)), "mutation($id:ID!){cancelAppointment(id:$id){cancelled}}", json!({ "id": kept }))
        .await;
    assert_eq!(body["errors"][0]["extensions"]["code"], "INTERNAL");

    // Both transactions rolled back: one seat taken, by the first booking, still BOOKED.
    assert_eq!(app.slot(&slot).await["bookedCount"], 1);
    let still = app.gql(Some(&patient(1)), "query($id:ID!){appointment(id:$id){status}}", json!({ "id": kept })).await;
    assert_eq!(still["appointment"]["status"], "BOOKED");
    app.assert_counts_consistent().await;
}

/// The settings of a server whose requests wait at most a second for the database.
const QUEUE_TIMEOUT: (&str, &str) = ("BOOKING_QUEUE_TIMEOUT_MS", "1000");

#[tokio::test]
async fn a_foreign_lock_on_the_sqlite_file_makes_bookings_overloaded_not_wait() {
    use sqlx::{Connection, Executor};
    let database = TestDatabase::new().await;
    let Some(file) = database.url.strip_prefix("sqlite://") else {
        println!("skipped: SQLite only (another process locking the database file)");
        return;
    };
    let app = TestApp::spawn_on(&database, &[QUEUE_TIMEOUT]).await;
    let (_, slot) = app.doctor_with_slot(10).await;
    let booked = app.book(&patient(1), &slot, "before", None).await;
    let to_cancel = booked["appointment"]["id"].as_str().unwrap().to_owned();

    // Another process takes the file's write lock, as `sqlite3` in a shell would.
    let mut other = sqlx::SqliteConnection::connect(&format!("sqlite://{file}")).await.unwrap();
    other.execute("BEGIN IMMEDIATE").await.unwrap();
    let hold =
        "mutation($s:ID!,$k:String!){holdSlot(input:{slotId:$s,idempotencyKey:$k}){appointment{id} userErrors{code}}}";
    let cancel = "mutation($id:ID!){cancelAppointment(id:$id){cancelled userErrors{code}}}";
    for (what, token, query, variables) in [
        ("book", patient(2), BOOK, json!({ "s": slot, "k": "during-1" })),
        ("hold", patient(3), hold, json!({ "s": slot, "k": "during-2" })),
        ("cancel", patient(1), cancel, json!({ "id": to_cancel })),
    ] {
        let started = std::time::Instant::now();
        let (status, body) = app.post(Some(&token), query, variables).await;
        let waited = started.elapsed();
        assert_eq!(status, 200, "{what}: {body}");
        assert_eq!(body["errors"][0]["extensions"]["code"], "OVERLOADED", "{what}: {body}");
        assert_eq!(body["errors"][0]["extensions"]["retryAfterSeconds"], 1, "{what}: {body}");
        // A sanity bound, well under the 30 s busy timeout: it did not wait for the lock.
        assert!(waited < std::time::Duration::from_secs(10), "{what} answered after {waited:?}");
    }

    // FHIR's `$book` is the same booking: 503 with the same code.
    let body = json!({ "resourceType": "Parameters", "parameter": [
        { "name": "slot", "valueReference": { "reference": format!("Slot/{slot}") } },
    ] });
    let fhir = app
        .client
        .post(format!("{}/fhir/Appointment/$book", app.address))
        .bearer_auth(patient(4))
        .header("content-type", "application/fhir+json")
        .header("idempotency-key", "during-fhir")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(fhir.status(), 503);
    assert_eq!(fhir.headers()["retry-after"], "1");
    let outcome: serde_json::Value = fhir.json().await.unwrap();
    assert_eq!(outcome["issue"][0]["details"]["coding"][0]["code"], "OVERLOADED", "{outcome}");

    // The lock goes: bookings and cancels work again, and nothing was taken meanwhile.
    other.execute("ROLLBACK").await.unwrap();
    other.close().await.unwrap();
    let after = app.book(&patient(2), &slot, "after", None).await;
    assert_eq!(after["appointment"]["status"], "BOOKED", "{after}");
    assert_eq!(app.cancel(&patient(1), &to_cancel).await["cancelled"], true);
    assert_eq!(app.slot(&slot).await["bookedCount"], 1);
    app.assert_counts_consistent().await;
}
