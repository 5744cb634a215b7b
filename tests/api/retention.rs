//! Retention: finished messages and webhook deliveries older than `RETENTION_DAYS` are removed
//! by the job every instance runs (at start-up, then hourly); pending and recent ones stay.
//!
//! The rows are made through the API, then aged by writing their timestamps directly: the
//! service never writes a past time itself.

use chrono::{DateTime, TimeDelta, Utc};
use clinic_booking::db::entity::{
    patient_message as message, webhook_attempt as attempt, webhook_delivery as delivery,
};
use sea_orm::{sea_query::Expr, ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder};
use serde_json::{json, Value};

use crate::{
    helpers::{admin, patient, user_error, TestApp, TestDatabase},
    servers::eventually,
    webhooks::{Receiver, Reply, LOCAL},
};

const SET_CONTACT: &str = "mutation($in:PatientContactInput!){setPatientContact(input:$in){userErrors{code}}}";

/// `days` ago.
fn ago(days: i64) -> DateTime<Utc> {
    clinic_booking::db::micros(Utc::now() - TimeDelta::days(days))
}

/// Ids of every message left, by id.
async fn message_ids(conn: &impl ConnectionTrait) -> Vec<i64> {
    let rows = message::Entity::find().order_by_asc(message::Column::Id).all(conn).await.unwrap();
    rows.iter().map(|m| m.id).collect()
}

/// Ids of every delivery left, by id.
async fn delivery_ids(conn: &impl ConnectionTrait) -> Vec<i64> {
    let rows = delivery::Entity::find().order_by_asc(delivery::Column::Id).all(conn).await.unwrap();
    rows.iter().map(|d| d.id).collect()
}

/// Writes `values` into message `id`.
async fn set_message(conn: &impl ConnectionTrait, id: i64, values: &[(message::Column, sea_orm::Value)]) {
    let mut update = message::Entity::update_many().filter(message::Column::Id.eq(id));
    for (column, value) in values {
        update = update.col_expr(*column, Expr::value(value.clone()));
    }
    assert_eq!(update.exec(conn).await.unwrap().rows_affected, 1);
}

/// Writes `values` into delivery `id`.
async fn set_delivery(conn: &impl ConnectionTrait, id: i64, values: &[(delivery::Column, sea_orm::Value)]) {
    let mut update = delivery::Entity::update_many().filter(delivery::Column::Id.eq(id));
    for (column, value) in values {
        update = update.col_expr(*column, Expr::value(value.clone()));
    }
    assert_eq!(update.exec(conn).await.unwrap().rows_affected, 1);
}

async fn attempts_of(conn: &impl ConnectionTrait, delivery_id: i64) -> u64 {
    attempt::Entity::find().filter(attempt::Column::DeliveryId.eq(delivery_id)).count(conn).await.unwrap()
}

#[tokio::test]
async fn finished_messages_and_deliveries_go_after_the_retention_and_nothing_else_does() {
    let database = TestDatabase::new().await;
    let mut settings = LOCAL.to_vec();
    // Messages as files (dev mode's transport, on both databases); no reminders to count.
    settings.push(("REMINDER_BEFORE_SECS", "0"));
    let first = TestApp::spawn_on(&database, &settings).await;
    let receiver = Receiver::start(vec![], Reply::Status(204)).await;
    // An admin's endpoint gets every event: one delivery per booking.
    let (endpoint, _) = first.endpoint(&admin(), &receiver.url(), None).await;
    let (_, slot) = first.doctor_with_slot(6).await;
    for id in 1..=6u64 {
        let set = first
            .gql(Some(&patient(id)), SET_CONTACT, json!({ "in": { "email": format!("p{id}@example.org") } }))
            .await;
        assert_eq!(set["setPatientContact"]["userErrors"], json!([]));
        let booked = first.book(&patient(id), &slot, &format!("retention-{id}"), None).await;
        assert_eq!(user_error(&booked), None, "{booked}");
    }
    let conn = first.db.conn();
    let messages = eventually("six messages sent", || async {
        let sent = message::Entity::find().order_by_asc(message::Column::Id).all(conn).await.unwrap();
        (sent.len() == 6 && sent.iter().all(|m| m.status == "SENT")).then_some(sent)
    })
    .await;
    let deliveries = eventually("six deliveries succeeded", || async {
        let done = delivery::Entity::find().order_by_asc(delivery::Column::Id).all(conn).await.unwrap();
        (done.len() == 6 && done.iter().all(|d| d.status == "SUCCEEDED")).then_some(done)
    })
    .await;
    let m: Vec<i64> = messages.iter().map(|m| m.id).collect();
    let d: Vec<i64> = deliveries.iter().map(|d| d.id).collect();

    use delivery::Column as D;
    use message::Column as M;
    let none = || sea_orm::Value::from(Option::<DateTime<Utc>>::None);
    // Messages: sent, given up and skipped long ago go; one sent within the retention stays,
    // and so do a reminder recorded long ago and not yet due, and one sent just now.
    set_message(conn, m[0], &[(M::NextAttemptAt, ago(31).into()), (M::SentAt, ago(31).into())]).await;
    set_message(conn, m[1], &[(M::Status, "FAILED".into()), (M::SentAt, none()), (M::NextAttemptAt, ago(40).into())])
        .await;
    set_message(conn, m[2], &[(M::Status, "SKIPPED".into()), (M::SentAt, none()), (M::NextAttemptAt, ago(31).into())])
        .await;
    set_message(conn, m[3], &[(M::NextAttemptAt, ago(29).into()), (M::SentAt, ago(29).into())]).await;
    let later = clinic_booking::db::micros(Utc::now() + TimeDelta::days(2));
    set_message(
        conn,
        m[4],
        &[
            (M::Status, "PENDING".into()),
            (M::SentAt, none()),
            (M::NextAttemptAt, later.into()),
            (M::CreatedAt, ago(60).into()),
            (M::CommittedAt, ago(60).into()),
        ],
    )
    .await;
    // Deliveries: one that succeeded long ago goes (with its attempts), and one that failed
    // without an attempt long ago; one that succeeded within the retention stays, and so does
    // one still waiting for its retry whose last attempt was long ago.
    set_delivery(conn, d[0], &[(D::LastAttemptAt, ago(31).into()), (D::CreatedAt, ago(31).into())]).await;
    set_delivery(
        conn,
        d[1],
        &[
            (D::Status, "FAILED".into()),
            (D::Attempts, 0.into()),
            (D::LastAttemptAt, none()),
            (D::CreatedAt, ago(45).into()),
        ],
    )
    .await;
    set_delivery(conn, d[2], &[(D::LastAttemptAt, ago(29).into()), (D::CreatedAt, ago(29).into())]).await;
    set_delivery(
        conn,
        d[3],
        &[
            (D::Status, "PENDING".into()),
            (D::NextAttemptAt, later.into()),
            (D::LastAttemptAt, ago(40).into()),
            (D::CreatedAt, ago(40).into()),
        ],
    )
    .await;
    assert!(attempts_of(conn, d[0]).await >= 1);

    // Another instance starts: its job's first pass runs at once.
    let second = TestApp::spawn_on(&database, &[("RETENTION_DAYS", "30"), ("REMINDER_BEFORE_SECS", "0")]).await;
    let kept_messages = eventually("old messages removed", || async {
        let left = message_ids(conn).await;
        (!left.contains(&m[0]) && !left.contains(&m[1]) && !left.contains(&m[2])).then_some(left)
    })
    .await;
    let kept_deliveries = eventually("old deliveries removed", || async {
        let left = delivery_ids(conn).await;
        (!left.contains(&d[0]) && !left.contains(&d[1])).then_some(left)
    })
    .await;
    assert_eq!(kept_messages, m[3..].to_vec(), "recent, pending and just sent messages stay");
    assert_eq!(kept_deliveries, d[2..].to_vec(), "recent and pending deliveries stay");
    assert_eq!(attempts_of(conn, d[0]).await, 0, "the attempts went with their delivery");
    assert!(attempts_of(conn, d[2]).await >= 1, "a kept delivery keeps its attempts");

    // The API: a removed delivery is unknown, and the list shows what is left, newest first.
    let removed = second.redeliver(&admin(), &d[0].to_string()).await;
    assert_eq!(user_error(&removed), Some("INVALID_INPUT"), "{removed}");
    assert_eq!(removed["userErrors"], second.redeliver(&admin(), "999999").await["userErrors"]);
    let listed: Vec<Value> = second.deliveries(&admin(), &endpoint).await.iter().map(|x| x["id"].clone()).collect();
    let expected: Vec<Value> = d[2..].iter().rev().map(|id| json!(id.to_string())).collect();
    assert_eq!(listed, expected);
    let recent = second.redeliver(&admin(), &d[2].to_string()).await;
    assert_eq!(recent["userErrors"], json!([]), "a kept delivery is redelivered: {recent}");
}
