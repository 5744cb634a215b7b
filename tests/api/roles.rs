//! The role rules of the contract, checked on every operation and every object.

use serde_json::json;

use crate::helpers::*;

const MY: &str = "{myAppointments{id patientId status slot{id doctor{id}}}}";
const ONE: &str = "query($id:ID!){appointment(id:$id){id patientId}}";

#[tokio::test]
async fn anonymous_reads_public_data_only() {
    let (app, _db) = TestApp::spawn().await;
    let (doctor, slot) = app.doctor_with_slot(1).await;
    let id = app.book(&patient(5), &slot, "k", None).await["appointment"]["id"].as_str().unwrap().to_owned();

    let data = app
        .gql(
            None,
            "query($d:ID!,$t:Date!){doctor(id:$d){name} availableSlots(doctorId:$d,date:$t){id} slot(id:\"1\"){id}}",
            json!({ "d": doctor, "t": tomorrow() }),
        )
        .await;
    assert_eq!(data["doctor"]["name"], "Dr Test");
    assert_eq!(app.gql(None, ONE, json!({ "id": id })).await["appointment"], serde_json::Value::Null);
    assert_eq!(app.error_code(None, MY, json!({})).await, "UNAUTHENTICATED");
    assert_eq!(app.error_code(None, BOOK, json!({ "s": slot, "k": "x", "p": "5" })).await, "UNAUTHENTICATED");
    assert_eq!(
        app.error_code(None, "mutation{cancelAppointment(id:\"1\"){cancelled}}", json!({})).await,
        "UNAUTHENTICATED"
    );
    assert_eq!(
        app.error_code(None, "mutation{createDoctor(input:{name:\"x\"}){id}}", json!({})).await,
        "UNAUTHENTICATED"
    );
}

#[tokio::test]
async fn invalid_tokens_are_refused_on_every_operation() {
    let (app, _db) = TestApp::spawn().await;
    let forged = {
        // Right claims, wrong secret.
        use clinic_booking::auth::{Claims, TokenIssuer};
        let claims =
            Claims { sub: "1".into(), role: "admin".into(), exp: chrono::Utc::now().timestamp() + 60, doctor_id: None };
        TokenIssuer::new(&clinic_booking::config::Secret::new("some-other-secret-of-length"))
            .unwrap()
            .issue(&claims)
            .unwrap()
    };
    let alg_none = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiIxIiwicm9sZSI6ImFkbWluIiwiZXhwIjo0MTAyNDQ0ODAwfQ.";
    for token in [expired_admin(), forged, alg_none.to_owned(), "not-a-jwt".to_owned()] {
        let (status, body) = app.post(Some(&token), "{doctors{edges{cursor}}}", json!({})).await;
        assert_eq!(status, 401, "{body}");
        assert_eq!(body["errors"][0]["extensions"]["code"], "UNAUTHENTICATED");
        assert!(body.get("data").is_none());
    }
    let resp = app
        .client
        .post(format!("{}/graphql", app.address))
        .header("Authorization", "Basic dXNlcjpwYXNz")
        .json(&json!({ "query": "{doctors{edges{cursor}}}" }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
}

#[tokio::test]
async fn only_admins_create_doctors_and_doctors_publish_their_own() {
    let (app, _db) = TestApp::spawn().await;
    let d1 = app.create_doctor("UTC").await;
    let d2 = app.create_doctor("UTC").await;
    let create = "mutation{createDoctor(input:{name:\"x\"}){id}}";
    for token in [patient(1), partner("p"), doctor(&d1)] {
        assert_eq!(app.error_code(Some(&token), create, json!({})).await, "FORBIDDEN");
    }
    let publish = "mutation($d:ID!,$t:Date!){publishSchedule(input:{doctorId:$d,date:$t,startTime:\"09:00\",endTime:\"10:00\"}){created}}";
    let vars = |d: &str| json!({ "d": d, "t": tomorrow() });
    assert_eq!(app.gql(Some(&doctor(&d1)), publish, vars(&d1)).await["publishSchedule"]["created"], 4);
    assert_eq!(app.error_code(Some(&doctor(&d1)), publish, vars(&d2)).await, "FORBIDDEN");
    for token in [patient(1), partner("p")] {
        assert_eq!(app.error_code(Some(&token), publish, vars(&d1)).await, "FORBIDDEN");
    }
}

#[tokio::test]
async fn patients_book_and_see_only_their_own() {
    let (app, _db) = TestApp::spawn().await;
    let (_, slot) = app.doctor_with_slot(5).await;
    let mine = app.book(&patient(1), &slot, "k", Some("1")).await;
    assert!(mine["appointment"].is_object(), "a patient may pass its own id: {mine}");
    let id = mine["appointment"]["id"].as_str().unwrap().to_owned();
    assert_eq!(app.error_code(Some(&patient(1)), BOOK, json!({ "s": slot, "k": "k2", "p": "2" })).await, "FORBIDDEN");

    // Partner-made appointments in the patient's name are the patient's too.
    let by_partner = app.book(&partner("clinic"), &slot, "pk", Some("1")).await;
    assert_eq!(user_error(&by_partner), Some("ALREADY_BOOKED"));
    let (_, slot2) = app.doctor_with_slot(1).await;
    let by_partner = app.book(&partner("clinic"), &slot2, "pk", Some("1")).await;
    let partner_made = by_partner["appointment"]["id"].as_str().unwrap().to_owned();
    let listed = app.gql(Some(&patient(1)), MY, json!({})).await["myAppointments"].clone();
    let ids: Vec<&str> = listed.as_array().unwrap().iter().map(|a| a["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 2);
    assert!(ids.contains(&id.as_str()) && ids.contains(&partner_made.as_str()));

    // Another patient sees nothing of it and cannot cancel it.
    assert_eq!(app.gql(Some(&patient(2)), ONE, json!({ "id": id })).await["appointment"], serde_json::Value::Null);
    assert_eq!(app.gql(Some(&patient(2)), MY, json!({})).await["myAppointments"], json!([]));
    assert_eq!(user_error(&app.cancel(&patient(2), &id).await), Some("APPOINTMENT_NOT_FOUND"));
    assert_eq!(app.gql(Some(&patient(1)), ONE, json!({ "id": id })).await["appointment"]["patientId"], "1");
    assert_eq!(app.cancel(&patient(1), &partner_made).await["cancelled"], true, "the holder may cancel");
}

#[tokio::test]
async fn doctors_see_appointments_in_their_slots_only() {
    let (app, _db) = TestApp::spawn().await;
    let (d1, s1) = app.doctor_with_slot(2).await;
    let (_, s2) = app.doctor_with_slot(2).await;
    let a1 = app.book(&patient(1), &s1, "k1", None).await["appointment"]["id"].as_str().unwrap().to_owned();
    let a2 = app.book(&patient(1), &s2, "k2", None).await["appointment"]["id"].as_str().unwrap().to_owned();
    let doc = doctor(&d1);
    assert_eq!(app.gql(Some(&doc), ONE, json!({ "id": a1 })).await["appointment"]["id"], a1.as_str());
    assert_eq!(app.gql(Some(&doc), ONE, json!({ "id": a2 })).await["appointment"], serde_json::Value::Null);
    let mine = app.gql(Some(&doc), MY, json!({})).await["myAppointments"].clone();
    assert_eq!(mine.as_array().unwrap().len(), 1);
    assert_eq!(app.error_code(Some(&doc), BOOK, json!({ "s": s1, "k": "d", "p": "3" })).await, "FORBIDDEN");
    assert_eq!(
        app.error_code(Some(&doc), "mutation($id:ID!){cancelAppointment(id:$id){cancelled}}", json!({ "id": a1 }))
            .await,
        "FORBIDDEN"
    );
}

#[tokio::test]
async fn partners_act_for_patients_and_see_what_they_made() {
    let (app, _db) = TestApp::spawn().await;
    let (_, slot) = app.doctor_with_slot(5).await;
    let (p1, p2) = (partner("one"), partner("two"));
    let missing = app.book(&p1, &slot, "k", None).await;
    assert_eq!(user_error(&missing), Some("INVALID_INPUT"));
    assert_eq!(missing["userErrors"][0]["field"], json!(["input", "patientId"]));
    assert_eq!(user_error(&app.book(&admin(), &slot, "k", None).await), Some("INVALID_INPUT"));

    let id = app.book(&p1, &slot, "k", Some("77")).await["appointment"]["id"].as_str().unwrap().to_owned();
    // Keys are scoped to the caller: the other partner's identical key is a different key.
    let other = app.book(&p2, &slot, "k", Some("78")).await;
    assert_eq!(other["replayed"], false);
    assert_ne!(other["appointment"]["id"], id.as_str());

    assert_eq!(app.gql(Some(&p2), ONE, json!({ "id": id })).await["appointment"], serde_json::Value::Null);
    assert_eq!(user_error(&app.cancel(&p2, &id).await), Some("APPOINTMENT_NOT_FOUND"));
    assert_eq!(app.gql(Some(&p1), MY, json!({})).await["myAppointments"].as_array().unwrap().len(), 1);
    assert_eq!(app.gql(Some(&admin()), ONE, json!({ "id": id })).await["appointment"]["patientId"], "77");
    assert_eq!(app.cancel(&p1, &id).await["cancelled"], true);
}
