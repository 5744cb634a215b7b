//! The paths errors name the value at fault by: an argument alone (`["id"]`), a field of the
//! `input` argument under it (`["input", "slotId"]`), whichever value and whether the answer is
//! a refusal (`userErrors[].field`) or ends the request (`extensions.field`).

use serde_json::{json, Value};

use crate::helpers::*;

/// `extensions.field` of the first top-level error.
async fn error_field(app: &TestApp, token: Option<&str>, query: &str) -> Value {
    let (_, body) = app.post(token, query, json!({})).await;
    assert_eq!(body["errors"][0]["extensions"]["code"], "INVALID_INPUT", "{query}: {body}");
    body["errors"][0]["extensions"]["field"].clone()
}

/// `userErrors[0].field` of the operation's payload (its only root field).
async fn refusal_field(app: &TestApp, token: &str, query: &str) -> Value {
    let data = app.gql(Some(token), query, json!({})).await;
    let payload = data.as_object().and_then(|o| o.values().next()).cloned().unwrap_or_default();
    assert_eq!(payload["userErrors"][0]["code"], "INVALID_INPUT", "{query}: {payload}");
    payload["userErrors"][0]["field"].clone()
}

#[tokio::test]
async fn errors_that_end_a_request_name_arguments_and_input_fields() {
    let (app, _db) = TestApp::spawn().await;
    let admin = admin();
    for (token, query, path) in [
        (None, r#"{doctor(id:"x"){id}}"#, json!(["id"])),
        (None, r#"{slot(id:"0"){id}}"#, json!(["id"])),
        (None, r#"{availableSlots(doctorId:"x",date:"2030-01-01"){id}}"#, json!(["doctorId"])),
        (None, r#"{availableSlots(doctorId:"1",date:"2030-01-01",durationMinutes:0){id}}"#, json!(["durationMinutes"])),
        (None, "{doctors(first:1000){edges{cursor}}}", json!(["first"])),
        (None, r#"{doctors(after:"zz"){edges{cursor}}}"#, json!(["after"])),
        (Some(admin.as_str()), r#"{patientContact(patientId:"x"){email}}"#, json!(["patientId"])),
        (Some(admin.as_str()), r#"{webhookDeliveries(endpointId:"x"){edges{cursor}}}"#, json!(["endpointId"])),
        (Some(admin.as_str()), r#"mutation{createDoctor(input:{name:""}){id}}"#, json!(["input", "name"])),
        (
            Some(admin.as_str()),
            r#"mutation{createDoctor(input:{name:"D",timezone:"Mars/Olympus"}){id}}"#,
            json!(["input", "timezone"]),
        ),
    ] {
        assert_eq!(error_field(&app, token, query).await, path, "{query}");
    }
}

#[tokio::test]
async fn refusals_name_arguments_and_input_fields() {
    let (app, _db) = TestApp::spawn().await;
    let (admin, me) = (admin(), patient(7));
    for (token, query, path) in [
        (
            &me,
            r#"mutation{bookAppointment(input:{slotId:"x",idempotencyKey:"k"}){userErrors{code field}}}"#,
            json!(["input", "slotId"]),
        ),
        (
            &me,
            r#"mutation{holdSlot(input:{slotId:"1",idempotencyKey:" "}){userErrors{code field}}}"#,
            json!(["input", "idempotencyKey"]),
        ),
        (
            &admin,
            r#"mutation{bookAppointment(input:{slotId:"1",idempotencyKey:"k"}){userErrors{code field}}}"#,
            json!(["input", "patientId"]),
        ),
        (&me, r#"mutation{cancelAppointment(id:"x"){userErrors{code field}}}"#, json!(["id"])),
        (&me, r#"mutation{confirmAppointment(id:"x"){userErrors{code field}}}"#, json!(["id"])),
        (&me, r#"mutation{leaveWaitlist(id:"x"){userErrors{code field}}}"#, json!(["id"])),
        (
            &me,
            r#"mutation{rescheduleAppointment(input:{appointmentId:"x",newSlotId:"1",idempotencyKey:"k"}){userErrors{code field}}}"#,
            json!(["input", "appointmentId"]),
        ),
        (&admin, r#"mutation{deleteWebhookEndpoint(id:"x"){userErrors{code field}}}"#, json!(["id"])),
        (&admin, r#"mutation{redeliverWebhook(deliveryId:"x"){userErrors{code field}}}"#, json!(["deliveryId"])),
    ] {
        assert_eq!(refusal_field(&app, token, query).await, path, "{query}");
    }
}
