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
