//! Taking seats below the service (`db::seats`): the store chooses the form of a booking (one
//! statement on PostgreSQL for one slot, the general transaction otherwise), so both forms must
//! leave exactly the same rows.

use clinic_booking::{
    config::DatabaseTarget,
    db::{
        appointments::NewAppointment,
        book_pg, doctors,
        entity::{appointment, outbox, time_slot},
        micros, seats, slots, Db, PoolSettings,
    },
    model::{AppointmentStatus, SLOT_ONLY},
};
use sea_orm::{EntityTrait, QueryOrder};

use crate::{
    backend::{backend, Backend},
    helpers::TestDatabase,
};

/// A migrated pool of the service's kind on `database`.
async fn pool(database: &TestDatabase) -> Db {
    let target = DatabaseTarget::parse(&database.url).unwrap();
    let settings = PoolSettings {
        max_connections: 4,
        acquire_timeout: std::time::Duration::from_secs(5),
        statement_timeout: std::time::Duration::from_secs(5),
        hot_connections: 0,
    };
    let db = Db::connect(&target, &settings).await.unwrap();
    db.migrate().await.unwrap();
    db
}

/// A doctor with `n` consecutive 15-minute slots of capacity 2 from `start`; their ids, by start.
async fn slots_from(db: &Db, start: chrono::DateTime<chrono::Utc>, n: i64) -> Vec<i64> {
    let doctor = doctors::insert(db.conn(), "Dr Seats", None, "UTC").await.unwrap();
    let minutes = chrono::TimeDelta::minutes;
    let new: Vec<slots::NewSlot> = (0..n)
        .map(|i| slots::NewSlot { start_at: start + minutes(15 * i), end_at: start + minutes(15 * (i + 1)) })
        .collect();
    slots::insert_skipping_existing(db.conn(), doctor.id, 2, &new).await.unwrap();
    let mut rows = time_slot::Entity::find().order_by_asc(time_slot::Column::StartAt).all(db.conn()).await.unwrap();
    rows.retain(|s| s.doctor_id == doctor.id);
    rows.iter().map(|s| s.id).collect()
}

/// A booking (slot 0) and a hold (slot 1) of the same two requests, one slot each.
fn requests(now: chrono::DateTime<chrono::Utc>) -> [NewAppointment<'static>; 2] {
    let new = |status, patient_id, booked_by, idempotency_key, expires_at| NewAppointment {
        status,
        patient_id,
        booked_by,
        idempotency_key,
        request_hash: "fingerprint",
        created_at: now,
        expires_at,
        rescheduled_from: None,
        first_booked_by: None,
    };
    [
        new(AppointmentStatus::Booked, 7, "patient:7", "book-1", None),
        new(AppointmentStatus::Held, 8, "partner:p", "hold-1", Some(micros(now + chrono::TimeDelta::minutes(10)))),
    ]
}

/// Every appointment, outbox and slot row of `db`, in id order, without the ids a database
/// hands out (each row's links are checked first, then left out).
async fn rows(db: &Db) -> (Vec<appointment::Model>, Vec<outbox::Model>, Vec<time_slot::Model>) {
    let conn = db.conn();
    let appointments = appointment::Entity::find().order_by_asc(appointment::Column::Id).all(conn).await.unwrap();
    let outbox = outbox::Entity::find().order_by_asc(outbox::Column::Id).all(conn).await.unwrap();
    let slots = time_slot::Entity::find().order_by_asc(time_slot::Column::Id).all(conn).await.unwrap();
    let appointment_ids: Vec<Option<i64>> = appointments.iter().map(|a| Some(a.id)).collect();
    let event_ids: Vec<Option<i64>> = outbox.iter().filter(|o| o.kind != SLOT_ONLY).map(|o| o.appointment_id).collect();
    assert_eq!(event_ids, appointment_ids, "one event row per appointment, in order: {outbox:#?}");
    for (a, o) in appointments.iter().zip(outbox.iter().filter(|o| o.kind != SLOT_ONLY)) {
        assert_eq!(o.slot_id, Some(a.slot_id), "the event row carries the appointment's first slot");
    }
    let appointments = appointments.into_iter().map(|a| appointment::Model { id: 0, ..a }).collect();
    let outbox = outbox.into_iter().map(|o| outbox::Model { id: 0, appointment_id: None, ..o }).collect();
    (appointments, outbox, slots)
}

/// The same booking and hold, taken once by PostgreSQL's one statement and once by the general
/// transaction (each on a database of its own, set up alike): the appointments, the slots'
/// counts and versions, and the outbox rows with the appointment's state are the same.
#[tokio::test]
async fn one_statement_and_transaction_leave_the_same_rows() {
    if !matches!(backend(), Backend::Postgres { .. }) {
        println!("skipped: SQLite has the transaction only");
        return;
    }
    let (one, two) = (TestDatabase::new().await, TestDatabase::new().await);
    let (statement, transaction) = (pool(&one).await, pool(&two).await);
    let now = micros(chrono::Utc::now());
    let start = micros(now + chrono::TimeDelta::days(1));
    let requests = requests(now);
    for (db, one_statement) in [(&statement, true), (&transaction, false)] {
        let ids = slots_from(db, start, 2).await;
        for (slot_id, new) in ids.iter().zip(&requests) {
            let taken = if one_statement {
                book_pg::book(db, *slot_id, new).await.unwrap().map(|(s, a)| (vec![s], a))
            } else {
                seats::take_in_transaction(db, &[*slot_id], new).await.unwrap()
            };
            let (taken, appointment) = taken.expect("a seat");
            assert_eq!((taken.len(), taken[0].booked_count, appointment.slot_id), (1, 1, *slot_id));
            // What the call returns is what it wrote.
            let stored = appointment::Entity::find_by_id(appointment.id).one(db.conn()).await.unwrap();
            assert_eq!(stored.as_ref(), Some(&appointment));
        }
    }
    let (by_statement, by_transaction) = (rows(&statement).await, rows(&transaction).await);
    assert_eq!(by_statement.0, by_transaction.0, "appointments");
    assert_eq!(by_statement.1, by_transaction.1, "outbox rows");
    assert_eq!(by_statement.2, by_transaction.2, "slots");
    let statuses: Vec<_> = by_statement.1.iter().map(|o| (o.kind.as_str(), o.appointment_status.as_deref())).collect();
    assert_eq!(statuses, [("BOOKED", Some("BOOKED")), ("HELD", Some("HELD"))]);
    assert!(by_statement.1[1].appointment_expires_at.is_some(), "{:?}", by_statement.1[1]);
    statement.close().await;
    transaction.close().await;
}

/// `seats::take` books one slot on PostgreSQL in one statement: one round trip.
#[tokio::test]
async fn one_slot_is_one_statement_on_postgres() {
    if !matches!(backend(), Backend::Postgres { .. }) {
        println!("skipped: SQLite has the transaction only");
        return;
    }
    let database = TestDatabase::new().await;
    let db = pool(&database).await;
    let now = micros(chrono::Utc::now());
    let ids = slots_from(&db, micros(now + chrono::TimeDelta::days(1)), 1).await;
    let [book, _] = requests(now);
    let before = db.statements_executed();
    seats::take(&db, &ids, &book).await.unwrap().expect("a seat");
    assert_eq!(db.statements_executed() - before, 1);
    db.close().await;
}

/// A run of slots, on either database: one seat in each, and the outbox rows the relay expects
/// (the event with the first slot's state, then each other slot's state, by id).
#[tokio::test]
async fn a_run_takes_a_seat_in_each_slot_and_records_each() {
    let database = TestDatabase::new().await;
    let db = pool(&database).await;
    let now = micros(chrono::Utc::now());
    let ids = slots_from(&db, micros(now + chrono::TimeDelta::days(1)), 3).await;
    let [book, _] = requests(now);
    let (taken, appointment) = seats::take(&db, &ids, &book).await.unwrap().expect("seats");
    assert_eq!(
        taken.iter().map(|s| (s.id, s.booked_count)).collect::<Vec<_>>(),
        [(ids[0], 1), (ids[1], 1), (ids[2], 1)]
    );
    assert_eq!((appointment.slot_id, appointment.slot_count), (ids[0], 3));
    let outbox = outbox::Entity::find().order_by_asc(outbox::Column::Id).all(db.conn()).await.unwrap();
    let rows: Vec<_> = outbox.iter().map(|o| (o.kind.as_str(), o.appointment_id, o.slot_id, o.booked_count)).collect();
    assert_eq!(
        rows,
        [
            ("BOOKED", Some(appointment.id), Some(ids[0]), Some(1)),
            (SLOT_ONLY, None, Some(ids[1]), Some(1)),
            (SLOT_ONLY, None, Some(ids[2]), Some(1)),
        ]
    );
    // A run with a full slot takes nothing.
    let again = NewAppointment { patient_id: 9, idempotency_key: "book-2", ..book };
    let other = NewAppointment { patient_id: 10, idempotency_key: "book-3", ..book };
    seats::take(&db, &ids[1..2], &again).await.unwrap().expect("the second seat of the middle slot");
    assert!(seats::take(&db, &ids, &other).await.unwrap().is_none());
    let counts: Vec<i32> = time_slot::Entity::find()
        .order_by_asc(time_slot::Column::Id)
        .all(db.conn())
        .await
        .unwrap()
        .iter()
        .map(|s| s.booked_count)
        .collect();
    assert_eq!(counts, [1, 2, 1]);
    db.close().await;
}
