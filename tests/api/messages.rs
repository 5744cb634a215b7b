//! Telling people: contact details by role, and the emails and SMS that committed appointment
//! events send, through a real SMTP server and a real HTTP SMS gateway on 127.0.0.1 (or as
//! files in dev mode).

use std::time::Duration;

use chrono::{DurationRound, Utc};
use clinic_booking::db::{entity::patient_message, messages};
use serde_json::{json, Value};

use crate::{
    helpers::{admin, clock, doctor, partner, patient, user_error, TestApp, TestDatabase},
    servers::{eventually, free_port, SmsGateway, SmtpSink},
};

const SET: &str = "mutation($in:PatientContactInput!){setPatientContact(input:$in)\
    {contact{patientId email phone locale} userErrors{code field message}}}";
const GET: &str = "query($p:ID){patientContact(patientId:$p){patientId email phone locale}}";
/// The sender the tests configure.
const FROM: &str = "no-reply@clinic.test";
/// For the tests that count a booking's messages: the test slots lie tomorrow at quarter hours
/// from midnight on, so whether a reminder is still ahead (and recorded beside the
/// confirmation) would depend on the time of day the tests run.
const NO_REMINDERS: (&str, &str) = ("REMINDER_BEFORE_SECS", "0");

async fn set_contact(app: &TestApp, token: &str, input: Value) -> Value {
    app.gql(Some(token), SET, json!({ "in": input })).await["setPatientContact"].clone()
}

async fn get_contact(app: &TestApp, token: &str, patient_id: Option<&str>) -> Value {
    app.gql(Some(token), GET, json!({ "p": patient_id })).await["patientContact"].clone()
}

/// The messages recorded about an appointment, oldest first.
async fn recorded(app: &TestApp, appointment_id: &str) -> Vec<patient_message::Model> {
    messages::of_appointment(app.db.conn(), appointment_id.parse().unwrap()).await.unwrap()
}

/// Every message recorded so far.
async fn all_recorded(app: &TestApp) -> Vec<patient_message::Model> {
    use sea_orm::EntityTrait;
    patient_message::Entity::find().all(app.db.conn()).await.unwrap()
}

/// Books `slot` for patient `id` (as that patient) and returns the appointment id.
async fn book(app: &TestApp, id: u64, slot: &str, key: &str) -> String {
    let booked = app.book(&patient(id), slot, key, None).await;
    assert_eq!(user_error(&booked), None, "{booked}");
    booked["appointment"]["id"].as_str().unwrap().to_owned()
}

fn calendar_line(calendar: &str, name: &str) -> String {
    calendar
        .split("\r\n")
        .find_map(|l| l.strip_prefix(&format!("{name}:")).map(str::to_owned))
        .unwrap_or_else(|| panic!("{name} in {calendar}"))
}

#[tokio::test]
async fn contact_details_are_validated_and_updated_field_by_field() {
    let (app, _db) = TestApp::spawn().await;
    let me = patient(301);
    let set =
        set_contact(&app, &me, json!({ "email": "ada@example.org", "phone": "+33612345678", "locale": "fr-CA" })).await;
    assert_eq!(set["userErrors"], json!([]));
    assert_eq!(
        set["contact"],
        json!({ "patientId": "301", "email": "ada@example.org", "phone": "+33612345678", "locale": "fr-CA" })
    );

    // Every invalid field is reported, with its path, and nothing changes.
    let bad =
        set_contact(&app, &me, json!({ "email": "Ada <ada@example.org>", "phone": "0612345678", "locale": "fr_CA" }))
            .await;
    assert_eq!(bad["contact"], Value::Null);
    let fields: Vec<&Value> = bad["userErrors"].as_array().unwrap().iter().map(|e| &e["field"]).collect();
    assert_eq!(fields, [&json!(["input", "email"]), &json!(["input", "phone"]), &json!(["input", "locale"])]);
    assert!(bad["userErrors"].as_array().unwrap().iter().all(|e| e["code"] == "INVALID_INPUT"));
    for (field, value) in [
        ("email", "ada@localhost"),
        ("email", "\"a b\"@example.org"),
        ("email", "ada@[127.0.0.1]"),
        ("email", ""),
        ("email", "adé@example.org"),
        ("phone", "+33 6 12 34 56 78"),
        ("phone", "+1234567"),
    ] {
        let refused = set_contact(&app, &me, json!({ field: value })).await;
        assert_eq!(user_error(&refused), Some("INVALID_INPUT"), "{field}={value:?}: {refused}");
        assert_eq!(refused["userErrors"][0]["field"], json!(["input", field]));
    }
    assert_eq!(get_contact(&app, &me, None).await["email"], "ada@example.org");

    // A field left out keeps its value; an explicit null removes it.
    let phone_only = set_contact(&app, &me, json!({ "phone": "+12025550123" })).await;
    assert_eq!(phone_only["contact"]["email"], "ada@example.org");
    assert_eq!(phone_only["contact"]["phone"], "+12025550123");
    let cleared = set_contact(&app, &me, json!({ "email": null, "locale": null })).await;
    assert_eq!(
        cleared["contact"],
        json!({ "patientId": "301", "email": null, "phone": "+12025550123", "locale": null })
    );
    assert_eq!(get_contact(&app, &me, Some("301")).await, cleared["contact"]);

    // Setting contact details sends nothing by itself.
    assert!(all_recorded(&app).await.is_empty());
}

#[tokio::test]
async fn contact_details_follow_the_roles() {
    let (app, _db) = TestApp::spawn().await;
    set_contact(&app, &patient(401), json!({ "email": "p401@example.org" })).await;

    // Anonymous callers and doctors never see or set them.
    let anonymous = app.post(None, GET, json!({ "p": "401" })).await.1;
    assert_eq!(anonymous["errors"][0]["extensions"]["code"], "UNAUTHENTICATED");
    let anonymous_set = app.post(None, SET, json!({ "in": { "patientId": "401", "email": "x@example.org" } })).await.1;
    assert_eq!(anonymous_set["errors"][0]["extensions"]["code"], "UNAUTHENTICATED");
    assert_eq!(app.error_code(Some(&doctor("1")), GET, json!({ "p": "401" })).await, "FORBIDDEN");
    assert_eq!(
        app.error_code(Some(&doctor("1")), SET, json!({ "in": { "patientId": "401", "email": "x@example.org" } }))
            .await,
        "FORBIDDEN"
    );

    // A patient writes only its own and sees only its own.
    assert_eq!(
        app.error_code(Some(&patient(402)), SET, json!({ "in": { "patientId": "401", "email": "x@example.org" } }))
            .await,
        "FORBIDDEN"
    );
    assert_eq!(get_contact(&app, &patient(402), Some("401")).await, Value::Null);
    assert_eq!(get_contact(&app, &patient(402), None).await, Value::Null, "nothing on file");
    let own = set_contact(&app, &patient(402), json!({ "patientId": "402", "phone": "+4930123456" })).await;
    assert_eq!(own["contact"]["phone"], "+4930123456");

    // Partners and admins name the patient.
    let nameless = set_contact(&app, &partner("p1"), json!({ "email": "x@example.org" })).await;
    assert_eq!(nameless["userErrors"][0]["field"], json!(["input", "patientId"]));
    assert_eq!(user_error(&nameless), Some("INVALID_INPUT"));
    assert_eq!(app.error_code(Some(&admin()), GET, json!({ "p": null })).await, "INVALID_INPUT");

    // A partner may write for any patient: it writes details kept for itself, and reads back
    // only those, never the patient's own or another partner's.
    let written = set_contact(&app, &partner("p1"), json!({ "patientId": "401", "phone": "+33612345678" })).await;
    let kept = json!({ "patientId": "401", "email": null, "phone": "+33612345678", "locale": null });
    assert_eq!(written["contact"], kept);
    assert_eq!(get_contact(&app, &partner("p1"), Some("401")).await, kept);
    let (_, slot) = app.doctor_with_slot(1).await;
    let booked = app.book(&partner("p1"), &slot, "contact-roles", Some("401")).await;
    assert_eq!(user_error(&booked), None);
    assert_eq!(get_contact(&app, &partner("p1"), Some("401")).await, kept, "booking changes nothing");
    assert_eq!(get_contact(&app, &partner("p2"), Some("401")).await, Value::Null);
    // The patient's own details are untouched by the partner's write.
    let own = json!({ "patientId": "401", "email": "p401@example.org", "phone": null, "locale": null });
    assert_eq!(get_contact(&app, &patient(401), None).await, own);
    // Admins see the patient's own, and with `partner` what a partner keeps.
    assert_eq!(get_contact(&app, &admin(), Some("401")).await, own);
    let as_admin = "query($p:ID,$b:String){patientContact(patientId:$p,partner:$b){patientId email phone locale}}";
    let kept_by = |b: &str| json!({ "p": "401", "b": b });
    assert_eq!(app.gql(Some(&admin()), as_admin, kept_by("p1")).await["patientContact"], kept);
    assert_eq!(app.gql(Some(&admin()), as_admin, kept_by("p2")).await["patientContact"], Value::Null);
    assert_eq!(app.gql(Some(&partner("p1")), as_admin, kept_by("p1")).await["patientContact"], kept);
    assert_eq!(app.error_code(Some(&partner("p1")), as_admin, kept_by("p2")).await, "FORBIDDEN");
    assert_eq!(app.error_code(Some(&patient(401)), as_admin, kept_by("p1")).await, "FORBIDDEN");
    assert_eq!(get_contact(&app, &admin(), Some("999")).await, Value::Null);
    assert_eq!(app.error_code(Some(&admin()), GET, json!({ "p": "abc" })).await, "INVALID_INPUT");
}

#[tokio::test]
async fn a_partners_contact_serves_only_that_partners_appointments() {
    let database = TestDatabase::new().await;
    let app = TestApp::spawn_on(&database, &[NO_REMINDERS, ("RATE_LIMIT_BOOKINGS", "0")]).await;
    let (a, b) = (partner("alpha"), partner("beta"));
    set_contact(&app, &patient(501), json!({ "email": "own@example.org", "phone": "+33611111111" })).await;
    // Partner B writes its own details for the patient; it cannot read or replace the patient's.
    let b_kept = set_contact(&app, &b, json!({ "patientId": "501", "email": "inbox@beta.example" })).await;
    assert_eq!(b_kept["contact"]["phone"], Value::Null, "B sees only what it set: {b_kept}");
    assert_eq!(get_contact(&app, &b, Some("501")).await["email"], "inbox@beta.example");
    assert_eq!(get_contact(&app, &patient(501), None).await["email"], "own@example.org");

    let doctor_id = app.create_doctor("UTC").await;
    let slots = app.publish(&doctor_id, &crate::helpers::tomorrow(), "09:00", "10:00", 15, 1).await;
    let own_booking = book(&app, 501, &slots[0], "own").await;
    let by_a = app.book(&a, &slots[1], "by-a", Some("501")).await["appointment"]["id"].as_str().unwrap().to_owned();
    let by_b = app.book(&b, &slots[2], "by-b", Some("501")).await["appointment"]["id"].as_str().unwrap().to_owned();
    // The patient moves B's appointment: it is still B's, and so are its messages.
    let moved = app.gql(Some(&patient(501)), RESCHEDULE, json!({ "a": by_b, "s": slots[3], "k": "move" })).await
        ["rescheduleAppointment"]
        .clone();
    assert_eq!(moved["userErrors"], json!([]), "{moved}");
    let moved_id = moved["appointment"]["id"].as_str().unwrap().to_owned();

    let recipients = |id: String, n: usize| {
        let app = &app;
        async move {
            let rows = eventually(&format!("{n} messages of {id}"), || async {
                let rows = recorded(app, &id).await;
                (rows.len() == n).then_some(rows)
            })
            .await;
            let mut to: Vec<String> = rows.into_iter().map(|m| m.recipient).collect();
            to.sort();
            to
        }
    };
    // The patient's own booking and A's (A keeps nothing) go to the patient's own details.
    assert_eq!(recipients(own_booking, 2).await, ["+33611111111", "own@example.org"]);
    assert_eq!(recipients(by_a, 2).await, ["+33611111111", "own@example.org"]);
    // B's go only where B said: an email, and no SMS (B keeps no phone).
    assert_eq!(recipients(by_b, 1).await, ["inbox@beta.example"]);
    assert_eq!(recipients(moved_id, 1).await, ["inbox@beta.example"]);
}

#[tokio::test]
async fn contacts_kept_before_per_booker_details_belong_to_who_wrote_them_last() {
    use migration::MigratorTrait;
    use sea_orm::{ConnectionTrait, Statement};

    // The schema as it was before contacts were kept per booker, with one row per patient.
    let database = TestDatabase::empty().await;
    let url =
        if database.url.starts_with("sqlite") { format!("{}?mode=rwc", database.url) } else { database.url.clone() };
    let conn = sea_orm::Database::connect(&url).await.unwrap();
    let migrations = migration::Migrator::migrations();
    let before = migrations.iter().position(|m| m.name() == "m20261204_000003_contacts_per_booker").unwrap();
    migration::Migrator::up(&conn, Some(u32::try_from(before).unwrap())).await.unwrap();
    let backend = conn.get_database_backend();
    for (patient_id, email, by) in [
        (601_i64, "own601@example.org", "patient:601"),
        (602, "inbox@gamma.example", "partner:gamma"),
        (603, "set603@example.org", "admin:1"),
    ] {
        let sql = match backend {
            sea_orm::DbBackend::Postgres => {
                "INSERT INTO patient_contact (patient_id, email, updated_at, updated_by) VALUES ($1, $2, $3, $4)"
            }
            _ => "INSERT INTO patient_contact (patient_id, email, updated_at, updated_by) VALUES (?, ?, ?, ?)",
        };
        let values: [sea_orm::Value; 4] = [patient_id.into(), email.into(), Utc::now().into(), by.into()];
        conn.execute_raw(Statement::from_sql_and_values(backend, sql, values)).await.unwrap();
    }
    conn.close().await.unwrap();

    // The service migrates the rest at its start.
    let app = TestApp::spawn_on(&database, &[]).await;
    let email = |v: Value| v["email"].clone();
    assert_eq!(email(get_contact(&app, &patient(601), None).await), "own601@example.org");
    assert_eq!(email(get_contact(&app, &admin(), Some("603")).await), "set603@example.org");
    // The row a partner wrote is that partner's now: the patient's own details are empty.
    assert_eq!(email(get_contact(&app, &partner("gamma"), Some("602")).await), "inbox@gamma.example");
    assert_eq!(get_contact(&app, &patient(602), None).await, Value::Null);
    assert_eq!(get_contact(&app, &partner("delta"), Some("602")).await, Value::Null);
}

#[tokio::test]
async fn dev_mode_writes_each_message_as_a_file() {
    let database = TestDatabase::new().await;
    let app = TestApp::spawn_on(&database, &[NO_REMINDERS]).await;
    set_contact(&app, &patient(501), json!({ "email": "p501@example.org", "phone": "+33612345678" })).await;
    let (_, slot) = app.doctor_with_slot(1).await;
    let id = book(&app, 501, &slot, "dev-files").await;
    let sent = eventually("both messages sent", || async {
        let rows = recorded(&app, &id).await;
        (rows.len() == 2 && rows.iter().all(|m| m.status == "SENT")).then_some(rows)
    })
    .await;
    let email = sent.iter().find(|m| m.channel == "EMAIL").unwrap();
    let sms = sent.iter().find(|m| m.channel == "SMS").unwrap();
    let eml = std::fs::read_to_string(database.data_dir().join(format!("outbox-mail/{}.eml", email.id))).unwrap();
    assert!(eml.contains("To: p501@example.org") && eml.contains("Subject: Appointment booked"), "{eml}");
    assert!(eml.contains("Content-Type: text/calendar; method=REQUEST") && eml.contains("METHOD:REQUEST"), "{eml}");
    assert!(eml.contains(&format!("UID:appointment-{id}@localhost")), "{eml}");
    let txt = std::fs::read_to_string(database.data_dir().join(format!("outbox-sms/{}.txt", sms.id))).unwrap();
    assert!(txt.starts_with("To: +33612345678\n") && txt.contains("Booked: Dr Test"), "{txt}");
    assert!(txt.contains(&format!("Ref {id}")), "{txt}");
}

#[tokio::test]
async fn a_booking_and_its_cancel_send_calendar_emails_over_smtp() {
    let Some(sink) = SmtpSink::start(None).await else {
        return;
    };
    let database = TestDatabase::new().await;
    let app = TestApp::spawn_on(
        &database,
        &[NO_REMINDERS, ("SMTP_URL", &sink.url()), ("MAIL_FROM", &format!("Clinic Test <{FROM}>"))],
    )
    .await;
    set_contact(&app, &patient(601), json!({ "email": "p601@example.org" })).await;
    let (_, slot) = app.doctor_with_slot(1).await;
    let id = book(&app, 601, &slot, "smtp-book").await;
    let booked = sink.wait_for(1).await.remove(0);
    assert_eq!(booked.mail_from, FROM);
    assert_eq!(booked.rcpt_tos, ["p601@example.org"]);
    assert_eq!(booked.header("From").as_deref(), Some("\"Clinic Test\" <no-reply@clinic.test>"));
    assert!(booked.header("Subject").unwrap().starts_with("Appointment booked: Dr Test"));
    let message_id = booked.header("Message-ID").unwrap();
    assert!(message_id.starts_with("<message-") && message_id.ends_with("@clinic.test>"), "{message_id}");
    assert!(booked.data.contains("Content-Type: multipart/alternative") && booked.data.contains("text/html"));
    let calendars = booked.calendars();
    assert_eq!(calendars.len(), 1, "{}", booked.data);
    let (mime, request) = &calendars[0];
    assert!(mime.starts_with("text/calendar; method=REQUEST"), "{mime}");
    assert_eq!(calendar_line(request, "METHOD"), "REQUEST");
    let uid = calendar_line(request, "UID");
    assert_eq!(uid, format!("appointment-{id}@clinic.test"));
    let first_sequence: u32 = calendar_line(request, "SEQUENCE").parse().unwrap();

    let cancelled = app.cancel(&patient(601), &id).await;
    assert_eq!(cancelled["cancelled"], true);
    let received = sink.wait_for(2).await;
    let cancel = &received[1];
    assert!(cancel.header("Subject").unwrap().starts_with("Appointment cancelled"));
    let (mime, calendar) = &cancel.calendars()[0];
    assert!(mime.starts_with("text/calendar; method=CANCEL"), "{mime}");
    assert_eq!(calendar_line(calendar, "METHOD"), "CANCEL");
    assert_eq!(calendar_line(calendar, "UID"), uid);
    assert!(calendar_line(calendar, "SEQUENCE").parse::<u32>().unwrap() > first_sequence);
    assert_eq!(calendar_line(calendar, "STATUS"), "CANCELLED");
    assert_ne!(cancel.header("Message-ID"), Some(message_id), "one Message-ID per message");
}

#[tokio::test]
async fn sms_go_to_the_gateway_with_basic_auth_and_are_retried() {
    let gateway = SmsGateway::start(1).await;
    let database = TestDatabase::new().await;
    let app = TestApp::spawn_on(
        &database,
        &[NO_REMINDERS, ("SMS_URL", &gateway.url()), ("SMS_FROM", "+15005550006"), ("NOTIFY_RETRY_MAX_SECS", "1")],
    )
    .await;
    set_contact(&app, &patient(701), json!({ "phone": "+33612345678" })).await;
    let (_, slot) = app.doctor_with_slot(1).await;
    let id = book(&app, 701, &slot, "sms-book").await;
    let forms = gateway.wait_for(1).await;
    assert_eq!(forms[0]["To"], "+33612345678");
    assert_eq!(forms[0]["From"], "+15005550006");
    assert!(forms[0]["Body"].starts_with("Booked: Dr Test") && forms[0]["Body"].ends_with(&format!("Ref {id}")));
    {
        let log = gateway.log.lock().unwrap();
        assert_eq!((log.failed, log.unauthorized), (1, 0), "the first answer was a 503, then a retry");
    }
    let row = eventually("the SMS marked sent", || async {
        recorded(&app, &id).await.into_iter().find(|m| m.status == "SENT")
    })
    .await;
    assert_eq!((row.channel.as_str(), row.attempts), ("SMS", 2));
}

#[tokio::test]
async fn nothing_is_sent_for_a_change_that_did_not_commit() {
    let Some(sink) = SmtpSink::start(None).await else {
        return;
    };
    let database = TestDatabase::new().await;
    let app = TestApp::spawn_on(&database, &[NO_REMINDERS, ("SMTP_URL", &sink.url()), ("MAIL_FROM", FROM)]).await;
    for id in [801, 802] {
        set_contact(&app, &patient(id), json!({ "email": format!("p{id}@example.org") })).await;
    }
    let (_, slot) = app.doctor_with_slot(1).await;
    book(&app, 801, &slot, "first").await;
    // Refused before any write: the slot is full.
    let full = app.book(&patient(802), &slot, "too-late", None).await;
    assert_eq!(user_error(&full), Some("SLOT_FULL"));
    // Refused by the database: the insert breaks the one-seat-per-patient index and the
    // transaction rolls back.
    let again = app.book(&patient(801), &slot, "second-key", None).await;
    assert_eq!(user_error(&again), Some("ALREADY_BOOKED"));
    // A later change that commits: once its message arrived, any message of the refused ones
    // would have arrived before it.
    let (_, other) = app.doctor_with_slot(1).await;
    book(&app, 802, &other, "marker").await;
    sink.wait_for(2).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let received_then = sink.received();
    assert_eq!(received_then.len(), 2, "{received_then:?}");
    let recipients: Vec<&str> = received_then.iter().map(|r| r.rcpt_tos[0].as_str()).collect();
    assert_eq!(recipients, ["p801@example.org", "p802@example.org"]);
    assert_eq!(all_recorded(&app).await.len(), 2);
}

#[tokio::test]
async fn a_message_waits_for_the_mail_server_to_come_back() {
    let port = free_port();
    let database = TestDatabase::new().await;
    let url = format!("smtp://127.0.0.1:{port}");
    let app = TestApp::spawn_on(
        &database,
        &[NO_REMINDERS, ("SMTP_URL", &url), ("MAIL_FROM", FROM), ("NOTIFY_RETRY_MAX_SECS", "1")],
    )
    .await;
    set_contact(&app, &patient(901), json!({ "email": "p901@example.org" })).await;
    let (_, slot) = app.doctor_with_slot(1).await;
    let id = book(&app, 901, &slot, "server-down").await;
    let failing = eventually("a failed attempt", || async {
        recorded(&app, &id).await.into_iter().find(|m| m.attempts >= 1 && m.last_error.is_some())
    })
    .await;
    assert_eq!(failing.status, "PENDING", "{failing:?}");
    let Some(sink) = SmtpSink::start(Some(port)).await else {
        return;
    };
    let received = sink.wait_for(1).await;
    assert_eq!(received[0].rcpt_tos, ["p901@example.org"]);
    let sent = eventually("the email marked sent", || async {
        recorded(&app, &id).await.into_iter().find(|m| m.status == "SENT")
    })
    .await;
    assert!(sent.attempts >= 2 && sent.sent_at.is_some(), "{sent:?}");
}

#[tokio::test]
async fn a_kept_connection_the_mail_server_closed_is_replaced_at_once() {
    let Some(sink) = SmtpSink::start(None).await else {
        return;
    };
    let port = sink.port;
    let database = TestDatabase::new().await;
    let app = TestApp::spawn_on(&database, &[NO_REMINDERS, ("SMTP_URL", &sink.url()), ("MAIL_FROM", FROM)]).await;
    set_contact(&app, &patient(961), json!({ "email": "p961@example.org" })).await;
    let (_, slot) = app.doctor_with_slot(2).await;
    book(&app, 961, &slot, "kept-1").await;
    sink.wait_for(1).await;
    // The server goes away with the service's connection still kept, and comes back.
    drop(sink);
    let Some(sink) = SmtpSink::start(Some(port)).await else {
        return;
    };
    set_contact(&app, &patient(962), json!({ "email": "p962@example.org" })).await;
    let second = book(&app, 962, &slot, "kept-2").await;
    let sent = eventually("the second email marked sent", || async {
        recorded(&app, &second).await.into_iter().find(|m| m.status == "SENT")
    })
    .await;
    assert_eq!(sent.attempts, 1, "sent on a new connection in the same attempt: {sent:?}");
    assert_eq!(sink.wait_for(1).await[0].rcpt_tos, ["p962@example.org"]);
}

#[tokio::test]
async fn a_mail_server_refusing_with_5xx_for_a_while_is_retried() {
    let Some(sink) = SmtpSink::start_refusing(None, 2).await else {
        return;
    };
    let database = TestDatabase::new().await;
    let app = TestApp::spawn_on(
        &database,
        &[NO_REMINDERS, ("SMTP_URL", &sink.url()), ("MAIL_FROM", FROM), ("NOTIFY_RETRY_MAX_SECS", "1")],
    )
    .await;
    set_contact(&app, &patient(951), json!({ "email": "p951@example.org" })).await;
    let (_, slot) = app.doctor_with_slot(1).await;
    let id = book(&app, 951, &slot, "refused-twice").await;
    let received = sink.wait_for(1).await;
    assert_eq!(received[0].rcpt_tos, ["p951@example.org"]);
    let sent = eventually("the email marked sent", || async {
        recorded(&app, &id).await.into_iter().find(|m| m.status == "SENT")
    })
    .await;
    assert_eq!(sent.attempts, 3, "two refusals, then the delivery: {sent:?}");
}

#[tokio::test]
async fn a_refusal_for_now_ends_the_attempt_even_on_a_kept_connection() {
    // The first message leaves a kept connection; the server refuses every later one with 451.
    let Some(sink) = SmtpSink::start_refusing_for_now_after(1).await else {
        return;
    };
    let database = TestDatabase::new().await;
    let app = TestApp::spawn_on(
        &database,
        &[
            NO_REMINDERS,
            ("SMTP_URL", &sink.url()),
            ("MAIL_FROM", FROM),
            ("NOTIFY_MAX_ATTEMPTS", "4"),
            ("NOTIFY_RETRY_MAX_SECS", "1"),
        ],
    )
    .await;
    for id in [971, 972] {
        set_contact(&app, &patient(id), json!({ "email": format!("p{id}@example.org") })).await;
    }
    let (_, slot) = app.doctor_with_slot(2).await;
    book(&app, 971, &slot, "taken").await;
    assert_eq!(sink.wait_for(1).await[0].rcpt_tos, ["p971@example.org"]);
    let id = book(&app, 972, &slot, "refused-for-now").await;
    let failed = eventually("the message given up", || async {
        recorded(&app, &id).await.into_iter().find(|m| m.status == "FAILED")
    })
    .await;
    assert_eq!(failed.attempts, 4, "{failed:?}");
    assert!(failed.last_error.as_deref().is_some_and(|e| e.contains("451")), "{failed:?}");
    assert_eq!(sink.refused(), 4, "one DATA transaction per attempt, the kept connection's included");
    assert_eq!(sink.received().len(), 1);
}

#[tokio::test]
async fn a_restart_loses_no_message_and_sends_it_once() {
    let port = free_port();
    let database = TestDatabase::new().await;
    let url = format!("smtp://127.0.0.1:{port}");
    let settings = [NO_REMINDERS, ("SMTP_URL", url.as_str()), ("MAIL_FROM", FROM), ("NOTIFY_RETRY_MAX_SECS", "1")];
    let first = TestApp::spawn_on(&database, &settings).await;
    for id in [1001, 1002] {
        set_contact(&first, &patient(id), json!({ "email": format!("p{id}@example.org") })).await;
    }
    let (_, slot) = first.doctor_with_slot(1).await;
    let id = book(&first, 1001, &slot, "before-restart").await;
    eventually("a failed attempt", || async { recorded(&first, &id).await.into_iter().find(|m| m.attempts >= 1) })
        .await;
    first.stop().await;

    let second = TestApp::spawn_on(&database, &settings).await;
    let Some(sink) = SmtpSink::start(Some(port)).await else {
        return;
    };
    let received = sink.wait_for(1).await;
    assert_eq!(received[0].rcpt_tos, ["p1001@example.org"]);
    // A marker after it: once it arrived, a repeat of the first would have too.
    let (_, later) = second.doctor_with_slot(1).await;
    book(&second, 1002, &later, "after-restart").await;
    sink.wait_for(2).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let received = sink.received();
    let recipients: Vec<&str> = received.iter().map(|r| r.rcpt_tos[0].as_str()).collect();
    assert_eq!(recipients, ["p1001@example.org", "p1002@example.org"], "delivered once, nothing lost");
    let first_message = recorded(&second, &id).await;
    assert_eq!(first_message.len(), 1);
    assert_eq!(first_message[0].status, "SENT");
}

#[tokio::test]
async fn more_messages_than_the_worker_has_room_for_each_go_out_once() {
    // One message at a time, so room for 16 handed over: most of the forty are recorded due
    // and claimed from the queue instead, and the two ways meet on no message.
    let Some(sink) = SmtpSink::start(None).await else {
        return;
    };
    let database = TestDatabase::new().await;
    let url = sink.url();
    let settings = [NO_REMINDERS, ("SMTP_URL", url.as_str()), ("MAIL_FROM", FROM), ("NOTIFY_CONCURRENCY", "1")];
    let app = TestApp::spawn_on(&database, &settings).await;
    let (_, slot) = app.doctor_with_slot(40).await;
    let patients: Vec<u64> = (1301..=1340).collect();
    for &id in &patients {
        set_contact(&app, &patient(id), json!({ "email": format!("p{id}@example.org") })).await;
    }
    futures_util::future::join_all(patients.iter().map(|&id| {
        let (app, slot) = (&app, &slot);
        async move { book(app, id, slot, &format!("room-{id}")).await }
    }))
    .await;
    sink.wait_for(40).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut recipients: Vec<String> = sink.received().iter().map(|r| r.rcpt_tos[0].clone()).collect();
    recipients.sort();
    let expected: Vec<String> = patients.iter().map(|id| format!("p{id}@example.org")).collect();
    assert_eq!(recipients, expected, "each once");
    let rows = all_recorded(&app).await;
    assert!(rows.iter().all(|m| m.status == "SENT" && m.attempts == 1), "{rows:?}");
}

#[tokio::test]
async fn messages_are_kept_as_failed_after_the_last_attempt() {
    let port = free_port();
    let database = TestDatabase::new().await;
    let url = format!("smtp://127.0.0.1:{port}");
    let app = TestApp::spawn_on(
        &database,
        &[
            NO_REMINDERS,
            ("SMTP_URL", &url),
            ("MAIL_FROM", FROM),
            ("NOTIFY_MAX_ATTEMPTS", "2"),
            ("NOTIFY_RETRY_MAX_SECS", "1"),
        ],
    )
    .await;
    set_contact(&app, &patient(1101), json!({ "email": "p1101@example.org" })).await;
    let (_, slot) = app.doctor_with_slot(1).await;
    let id = book(&app, 1101, &slot, "never-delivered").await;
    let failed = eventually("the message given up", || async {
        recorded(&app, &id).await.into_iter().find(|m| m.status == "FAILED")
    })
    .await;
    assert_eq!(failed.attempts, 2, "NOTIFY_MAX_ATTEMPTS counts the first attempt: {failed:?}");
    assert!(failed.last_error.as_deref().is_some_and(|e| e.contains("SMTP")), "{failed:?}");
    let metrics = app.client.get(format!("{}/metrics", app.address)).send().await.unwrap().text().await.unwrap();
    let count: f64 = metrics
        .lines()
        .find(|l| {
            l.starts_with("notify_messages_total{")
                && l.contains("channel=\"email\"")
                && l.contains("outcome=\"failed\"")
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no failed count in\n{metrics}"));
    assert!(count >= 1.0);
    assert!(metrics.contains("notify_attempt_seconds_bucket"), "attempt latency histogram");
    assert!(metrics.contains("notify_queue_depth"), "queue depth gauge");
}

#[tokio::test]
async fn reminders_go_out_before_appointments_still_booked() {
    // A slot starting 3–4 minutes from now, and reminders due 20 s from now.
    let now = Utc::now();
    let start = (now + chrono::Duration::minutes(3)).duration_trunc(chrono::TimeDelta::minutes(1)).unwrap()
        + chrono::Duration::minutes(1);
    let before = ((start - now).num_seconds() - 20).to_string();
    let database = TestDatabase::new().await;
    let app = TestApp::spawn_on(&database, &[("REMINDER_BEFORE_SECS", &before)]).await;
    for id in [1201, 1202] {
        set_contact(&app, &patient(id), json!({ "email": format!("p{id}@example.org") })).await;
    }
    let doctor_id = app.create_doctor("UTC").await;
    let minute = start.format("%H").to_string().parse::<u32>().unwrap() * 60
        + start.format("%M").to_string().parse::<u32>().unwrap();
    let date = start.format("%Y-%m-%d").to_string();
    let slots = app.publish(&doctor_id, &date, &clock(minute), &clock(minute + 1), 1, 2).await;
    let kept = book(&app, 1201, &slots[0], "reminded").await;
    let dropped = book(&app, 1202, &slots[0], "cancelled-before").await;
    // Cancelled once its reminder is scheduled (cancelled before the relay saw the booking,
    // it would get none at all).
    eventually("the reminder scheduled", || async {
        recorded(&app, &dropped).await.into_iter().find(|m| m.purpose == "REMINDER")
    })
    .await;
    assert_eq!(app.cancel(&patient(1202), &dropped).await["cancelled"], true);

    let reminder = eventually("the reminder sent", || async {
        recorded(&app, &kept).await.into_iter().find(|m| m.purpose == "REMINDER" && m.status == "SENT")
    })
    .await;
    let eml = std::fs::read_to_string(database.data_dir().join(format!("outbox-mail/{}.eml", reminder.id))).unwrap();
    assert!(eml.contains("Subject: Reminder: Dr Test") && eml.contains("To: p1201@example.org"), "{eml}");
    let skipped = eventually("the cancelled appointment's reminder skipped", || async {
        recorded(&app, &dropped).await.into_iter().find(|m| m.purpose == "REMINDER" && m.status != "PENDING")
    })
    .await;
    assert_eq!(skipped.status, "SKIPPED", "{skipped:?}");
    assert!(!database.data_dir().join(format!("outbox-mail/{}.eml", skipped.id)).exists());
}

#[tokio::test]
async fn recording_is_idempotent_per_outbox_row_and_channel() {
    let (app, _db) = TestApp::spawn().await;
    let now = clinic_booking::db::micros(Utc::now());
    let message = |outbox_id: i64, purpose: &'static str, channel: &'static str| messages::NewMessage {
        outbox_id,
        purpose,
        event: "BOOKED",
        appointment_id: 99_999,
        patient_id: 1,
        channel,
        recipient: "p1@example.org".into(),
        locale: None,
        facts: "{}".into(),
        // Far ahead: no worker takes them during the test.
        due_at: now + chrono::Duration::days(365),
        committed_at: now,
        trace_context: None,
    };
    let pass = [message(1, "EVENT", "EMAIL"), message(1, "EVENT", "SMS"), message(1, "REMINDER", "EMAIL")];
    assert_eq!(messages::record(app.db.conn(), &pass, now).await.unwrap(), 3);
    // The same pass again (a retried relay pass) records nothing new…
    assert_eq!(messages::record(app.db.conn(), &pass, now).await.unwrap(), 0);
    // …and a second event asking for the same appointment's reminder adds only its own message.
    let later = [message(2, "EVENT", "EMAIL"), message(2, "REMINDER", "EMAIL")];
    assert_eq!(messages::record(app.db.conn(), &later, now).await.unwrap(), 1);
    assert_eq!(recorded(&app, "99999").await.len(), 4);
}

const HOLD: &str = "mutation($s:ID!,$k:String!){holdSlot(input:{slotId:$s,idempotencyKey:$k})\
    {appointment{id status expiresAt} userErrors{code field}}}";
const CONFIRM: &str = "mutation($id:ID!){confirmAppointment(id:$id){confirmed userErrors{code}}}";
const RESCHEDULE: &str = "mutation($a:ID!,$s:ID!,$k:String!){rescheduleAppointment(input:{appointmentId:$a,\
    newSlotId:$s,idempotencyKey:$k}){appointment{id} previous{id status} userErrors{code field}}}";

/// The `.eml` a sent message of `appointment` was written as, in dev mode: waits until the
/// message of that purpose and event is sent, returns the file's text.
async fn sent_email(app: &TestApp, database: &TestDatabase, appointment: &str, event: &str) -> String {
    let row = eventually(&format!("the {event} email of {appointment}"), || async {
        recorded(app, appointment)
            .await
            .into_iter()
            .find(|m| m.channel == "EMAIL" && m.purpose == "EVENT" && m.event == event && m.status == "SENT")
    })
    .await;
    std::fs::read_to_string(database.data_dir().join(format!("outbox-mail/{}.eml", row.id))).unwrap()
}

/// Unfolded calendar lines of every `text/calendar` part of a raw email.
fn calendars_of(eml: &str) -> Vec<String> {
    let received = crate::servers::Received { mail_from: String::new(), rcpt_tos: vec![], data: eml.to_owned() };
    received.calendars().into_iter().map(|(_, body)| body).collect()
}

#[tokio::test]
async fn holds_confirmations_and_reschedules_send_their_messages() {
    let database = TestDatabase::new().await;
    let app = TestApp::spawn_on(&database, &[NO_REMINDERS, ("RATE_LIMIT_BOOKINGS", "0")]).await;
    set_contact(&app, &patient(1301), json!({ "email": "p1301@example.org" })).await;
    let doctor_id = app.create_doctor("UTC").await;
    let slots = app.publish(&doctor_id, &crate::helpers::tomorrow(), "10:00", "11:00", 15, 1).await;

    let held = app.gql(Some(&patient(1301)), HOLD, json!({ "s": slots[0], "k": "hold" })).await["holdSlot"].clone();
    let id = held["appointment"]["id"].as_str().unwrap().to_owned();
    let eml = sent_email(&app, &database, &id, "HELD").await;
    assert!(eml.contains("Subject: Seat held for you: Dr Test"), "{eml}");
    let request = &calendars_of(&eml)[0];
    assert!(request.contains("METHOD:REQUEST") && request.contains("STATUS:TENTATIVE"), "{request}");
    assert!(request.contains("SEQUENCE:0") && request.contains(&format!("UID:appointment-{id}@localhost")));

    let confirmed = app.gql(Some(&patient(1301)), CONFIRM, json!({ "id": id })).await["confirmAppointment"].clone();
    assert_eq!(confirmed["confirmed"], true);
    let eml = sent_email(&app, &database, &id, "CONFIRMED").await;
    assert!(eml.contains("Subject: Appointment confirmed"), "{eml}");
    let request = &calendars_of(&eml)[0];
    assert!(request.contains("STATUS:CONFIRMED") && request.contains("SEQUENCE:1"), "{request}");

    let moved = app.gql(Some(&patient(1301)), RESCHEDULE, json!({ "a": id, "s": slots[2], "k": "move" })).await
        ["rescheduleAppointment"]
        .clone();
    assert_eq!(moved["userErrors"], json!([]), "{moved}");
    let new_id = moved["appointment"]["id"].as_str().unwrap().to_owned();
    let eml = sent_email(&app, &database, &new_id, "RESCHEDULED").await;
    assert!(eml.contains("Subject: Appointment moved"), "{eml}");
    let calendars = calendars_of(&eml);
    assert_eq!(calendars.len(), 2, "{eml}");
    assert!(calendars[0].contains("METHOD:REQUEST") && calendars[0].contains(&format!("UID:appointment-{new_id}@")));
    assert!(calendars[1].contains("METHOD:CANCEL") && calendars[1].contains(&format!("UID:appointment-{id}@")));
    assert!(calendars[1].contains("SEQUENCE:2"), "{}", calendars[1]);
    // No separate message for the old appointment: the reschedule's says it all.
    assert!(recorded(&app, &id).await.iter().all(|m| m.event != "CANCELLED"));
}

#[tokio::test]
async fn a_message_describes_its_event_not_what_followed() {
    let database = TestDatabase::new().await;
    // The relay waits after a commit woke it, so the confirm below commits before the hold's
    // messages are recorded (as under load, when the relay runs seconds behind).
    let app = TestApp::spawn_on(&database, &[NO_REMINDERS, ("OUTBOX_GATHER_MS", "1500")]).await;
    set_contact(&app, &patient(1302), json!({ "email": "p1302@example.org", "phone": "+33612345678" })).await;
    let (_, slot) = app.doctor_with_slot(1).await;
    let held = app.gql(Some(&patient(1302)), HOLD, json!({ "s": slot, "k": "hold" })).await["holdSlot"].clone();
    let id = held["appointment"]["id"].as_str().unwrap().to_owned();
    let confirmed = app.gql(Some(&patient(1302)), CONFIRM, json!({ "id": id })).await["confirmAppointment"].clone();
    assert_eq!(confirmed["confirmed"], true);

    let expires_at: chrono::DateTime<Utc> = held["appointment"]["expiresAt"].as_str().unwrap().parse().unwrap();
    let messages = eventually("the hold's and the confirm's messages", || async {
        let m = recorded(&app, &id).await;
        (m.len() == 4).then_some(m)
    })
    .await;
    for m in messages.iter().filter(|m| m.event == "HELD") {
        let facts: Value = serde_json::from_str(&m.facts).unwrap();
        let kept: chrono::DateTime<Utc> = facts["expires_at"].as_str().unwrap().parse().unwrap();
        assert_eq!(kept, expires_at, "the hold's {} says until when it held: {facts}", m.channel);
    }
    let eml = sent_email(&app, &database, &id, "HELD").await;
    assert!(eml.contains("Subject: Seat held for you"), "{eml}");
    let request = &calendars_of(&eml)[0];
    assert!(request.contains("STATUS:TENTATIVE"), "the hold's calendar is still tentative: {request}");
}

#[tokio::test]
async fn an_expired_hold_sends_a_cancelling_calendar() {
    let database = TestDatabase::new().await;
    let app = TestApp::spawn_on(&database, &[NO_REMINDERS, ("HOLD_TTL_SECS", "1")]).await;
    set_contact(&app, &patient(1401), json!({ "email": "p1401@example.org" })).await;
    let (_, slot) = app.doctor_with_slot(1).await;
    let held = app.gql(Some(&patient(1401)), HOLD, json!({ "s": slot, "k": "short" })).await["holdSlot"].clone();
    let id = held["appointment"]["id"].as_str().unwrap().to_owned();
    let eml = sent_email(&app, &database, &id, "EXPIRED").await;
    assert!(eml.contains("Subject: Hold expired"), "{eml}");
    let cancel = &calendars_of(&eml)[0];
    assert!(cancel.contains("METHOD:CANCEL") && cancel.contains("SEQUENCE:2"), "{cancel}");
    assert!(cancel.contains(&format!("UID:appointment-{id}@localhost")), "{cancel}");
}

#[tokio::test]
async fn a_clinic_closing_its_slots_tells_each_patient_who_cancelled() {
    let database = TestDatabase::new().await;
    let app = TestApp::spawn_on(&database, &[NO_REMINDERS, ("RATE_LIMIT_BOOKINGS", "0")]).await;
    set_contact(&app, &patient(1501), json!({ "email": "p1501@example.org", "phone": "+33612345678" })).await;
    let doctor_id = app.create_doctor("UTC").await;
    let day = crate::helpers::tomorrow();
    let slots = app.publish(&doctor_id, &day, "14:00", "14:15", 15, 1).await;
    let id = book(&app, 1501, &slots[0], "closed-later").await;
    let close = "mutation($d:ID!,$f:DateTime!,$t:DateTime!){closeSlots(input:{doctorId:$d,from:$f,to:$t,\
                 reason:\"sick\"}){closed cancelledAppointments{id cancelledBy}}}";
    let range = json!({ "d": doctor_id, "f": format!("{day}T14:00:00Z"), "t": format!("{day}T15:00:00Z") });
    let closed = app.gql(Some(&doctor(&doctor_id)), close, range).await["closeSlots"].clone();
    assert_eq!(closed["cancelledAppointments"][0]["cancelledBy"], "CLINIC", "{closed}");
    let eml = sent_email(&app, &database, &id, "CANCELLED").await;
    assert!(eml.contains("METHOD:CANCEL"), "{eml}");
    let sms = eventually("the cancel's SMS", || async {
        recorded(&app, &id)
            .await
            .into_iter()
            .find(|m| m.channel == "SMS" && m.event == "CANCELLED" && m.status == "SENT")
    })
    .await;
    let txt = std::fs::read_to_string(database.data_dir().join(format!("outbox-sms/{}.txt", sms.id))).unwrap();
    assert!(txt.contains("Cancelled by the clinic: Dr Test"), "{txt}");
}
