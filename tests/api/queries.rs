//! Reads: the doctors connection, slot lists, and the constant statement count of nested pages.

use std::sync::Arc;

use clinic_booking::{
    auth::{Caller, Principal, Role},
    booking::{BookRequest, BookingService},
    config::DatabaseTarget,
    db::{Db, PoolSettings},
    graphql::{build_schema, Loaders, QueryLimits, RequestContext},
};
use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn doctors_connection_pages_by_cursor() {
    let (app, _db) = TestApp::spawn().await;
    for _ in 0..3 {
        app.create_doctor("UTC").await;
    }
    let q = "query($a:String){doctors(first:2,after:$a){edges{cursor node{id}} pageInfo{hasNextPage endCursor}}}";
    let first = app.gql(None, q, json!({ "a": null })).await["doctors"].clone();
    assert_eq!(first["edges"].as_array().unwrap().len(), 2);
    assert_eq!(first["pageInfo"]["hasNextPage"], true);
    let second = app.gql(None, q, json!({ "a": first["pageInfo"]["endCursor"] })).await["doctors"].clone();
    assert_eq!(second["edges"].as_array().unwrap().len(), 1);
    assert_eq!(second["pageInfo"]["hasNextPage"], false);
    assert_ne!(second["edges"][0]["node"]["id"], first["edges"][1]["node"]["id"]);
}

#[tokio::test]
async fn available_slots_hide_full_ones_and_doctor_slots_show_all() {
    let (app, _db) = TestApp::spawn().await;
    let d = app.create_doctor("Europe/Paris").await;
    let slots = app.publish(&d, &tomorrow(), "09:00", "10:00", 20, 1).await;
    assert_eq!(slots.len(), 3);
    app.book(&patient(1), &slots[1], "k", None).await;
    let q = "query($d:ID!,$t:Date!){availableSlots(doctorId:$d,date:$t){id available} doctor(id:$d){slots(date:$t){id bookedCount}}}";
    let data = app.gql(None, q, json!({ "d": d, "t": tomorrow() })).await;
    let free: Vec<&str> =
        data["availableSlots"].as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(free, [slots[0].as_str(), slots[2].as_str()]);
    assert_eq!(data["doctor"]["slots"][1]["bookedCount"], 1);
    assert_eq!(
        app.gql(None, "{availableSlots(doctorId:\"987654\",date:\"2030-01-01\"){id}}", json!({})).await
            ["availableSlots"],
        json!([])
    );
}

/// A pool of the service's own kind on the test's database, not migrated.
async fn pool(database: &TestDatabase, max_connections: u32, statement_timeout: std::time::Duration) -> Db {
    let target = DatabaseTarget::parse(&database.url).unwrap();
    let settings = PoolSettings {
        max_connections,
        acquire_timeout: std::time::Duration::from_secs(5),
        statement_timeout,
        hot_connections: 0,
    };
    Db::connect(&target, &settings).await.unwrap()
}

/// A page of N appointments with their slots and doctors costs the same number of statements
/// for any N: the DataLoaders batch each relation into one query.
#[tokio::test]
async fn nested_pages_cost_a_constant_number_of_statements() {
    let database = TestDatabase::new().await;
    let db = pool(&database, 4, std::time::Duration::from_secs(5)).await;
    db.migrate().await.unwrap();
    // No relay, no background work: every statement counted is the query's own.
    let service = BookingService::new(db.clone(), Arc::new(tokio::sync::Notify::new()));
    let schema = build_schema(QueryLimits { depth: 15, complexity: 1000 }, Some(service.clone()));
    let admin = Caller::local("a", Role::Admin, None, None);
    let patient = Caller::local("7", Role::Patient, Some(7), None);

    let mut costs = Vec::new();
    let mut hour = 0;
    for n in [2usize, 12] {
        // n more appointments for patient 7, each with its own doctor, at hours of their own
        // (a patient's appointments never overlap).
        for _ in 0..n / 2 {
            hour += 1;
            let doctor = service
                .create_doctor(
                    &admin,
                    clinic_booking::booking::NewDoctor { name: "D".into(), specialty: None, timezone: None },
                )
                .await
                .unwrap();
            let published = service
                .publish_schedule(
                    &admin,
                    clinic_booking::booking::PublishRequest {
                        doctor_id: doctor.id.to_string(),
                        date: chrono::Utc::now().date_naive() + chrono::Days::new(1),
                        start_time: format!("{hour:02}:00"),
                        end_time: format!("{hour:02}:30"),
                        slot_minutes: Some(15),
                        capacity: Some(1),
                    },
                )
                .await
                .unwrap();
            for slot in published.slots {
                let req = BookRequest {
                    slot_id: slot.id.to_string(),
                    idempotency_key: format!("k{}", slot.id),
                    patient_id: None,
                    duration_minutes: None,
                };
                service.book(&patient, &req).await.unwrap().unwrap();
            }
        }
        let before = db.statements_executed();
        let request = async_graphql::Request::new(
            "{myAppointments{id slot{id startAt doctor{id name slots(date:\"2030-01-01\"){id}}}}}",
        )
        .data(RequestContext::new(Principal::Caller(patient.clone()), "t".into()))
        .data(Loaders::new(&db));
        let response = schema.execute(request).await;
        assert!(response.errors.is_empty(), "{:?}", response.errors);
        let listed = response.data.into_json().unwrap()["myAppointments"].as_array().unwrap().len();
        costs.push((listed, db.statements_executed() - before));
    }
    assert_eq!(costs[0].0, 2);
    assert_eq!(costs[1].0, 14);
    assert_eq!(costs[0].1, costs[1].1, "statements for 2 vs 14 appointments: {costs:?}");
    assert!(costs[0].1 <= 4, "{costs:?}");
    drop(database);
}

/// The delivery workers' pool commits without waiting for the WAL flush and keeps every other
/// setting of its connections (the statement timeout); SQLite has only its one pool.
#[tokio::test]
async fn the_delivery_workers_pool_commits_without_waiting_for_the_flush_and_plans_each_claim() {
    let database = TestDatabase::new().await;
    let db = pool(&database, 2, std::time::Duration::from_millis(4321)).await;
    let relaxed = db.relaxed_commit(1);
    if db.backend() != sea_orm::DbBackend::Postgres {
        assert_eq!(relaxed.backend(), db.backend());
        return;
    }
    let query = |db: Db, sql: &'static str| async move {
        let row = sea_orm::ConnectionTrait::query_one_raw(
            db.conn(),
            sea_orm::Statement::from_string(sea_orm::DbBackend::Postgres, sql),
        )
        .await
        .unwrap()
        .unwrap();
        row.try_get_by_index::<String>(0).unwrap()
    };
    let source = "SELECT setting || ' from ' || source FROM pg_settings WHERE name = 'synchronous_commit'";
    assert_eq!(query(relaxed.clone(), source).await, "off from client");
    assert_eq!(query(relaxed.clone(), "SHOW statement_timeout").await, "4321ms");
    // A plan cached while a queue was empty would scan it at every claim once it has grown.
    assert_eq!(query(relaxed.clone(), "SHOW plan_cache_mode").await, "force_custom_plan");
    assert_eq!(query(db.clone(), "SHOW plan_cache_mode").await, "auto", "the hot statements keep their plans");
    // The service's own pool keeps the server's setting, whatever the server says (the tests'
    // throwaway server runs without synchronous commit itself).
    let own = query(db.clone(), source).await;
    assert!(!own.ends_with(" from client"), "the service's own pool is untouched: {own}");
    let before = db.statements_executed();
    query(relaxed, "SHOW synchronous_commit").await;
    assert!(db.statements_executed() > before, "its statements count with the service's");
}
