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
