//! Queries of the `outbox` table: written inside booking and cancel transactions, drained by
//! the relay in `crate::events::relay`.

use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseTransaction, DbBackend, EntityTrait, FromQueryResult,
    QueryFilter, QueryOrder, QuerySelect, Statement,
};

use super::{
    entity::{outbox, time_slot},
    write::WriteTransaction,
    Db, StoreError,
};
use crate::model::AppointmentState;

/// Records, in the caller's transaction, that the doctor's schedule gained slots (so every
/// instance drops the slot lists it keeps of that doctor).
pub async fn record_published(
    conn: &impl ConnectionTrait,
    doctor_id: i64,
    at: chrono::DateTime<chrono::Utc>,
) -> Result<(), StoreError> {
    let published = NewRow { kind: crate::model::SCHEDULE_PUBLISHED, appointment: None, slot: None };
    let row = outbox::ActiveModel { doctor_id: Set(Some(doctor_id)), ..row(published, at, trace_context()) };
    outbox::Entity::insert(row).exec_without_returning(conn).await?;
    Ok(())
}

/// One outbox row to write: an appointment event (`kind`, an
/// [`crate::model::AppointmentEvent`] word, with the appointment and the state the event left
/// it in) and/or the state a slot was left in (`kind` [`crate::model::SLOT_ONLY`] when there is
/// no event).
#[derive(Clone, Copy, Debug)]
pub struct NewRow<'a> {
    /// The event's word, or [`crate::model::SLOT_ONLY`].
    pub kind: &'a str,
    /// The appointment and what the event left of it.
    pub appointment: Option<(i64, &'a AppointmentState)>,
    /// The slot as the transaction left it.
    pub slot: Option<&'a time_slot::Model>,
}

/// Records `rows` in the caller's transaction, in one statement.
pub async fn record_many(
    conn: &impl ConnectionTrait,
    rows: impl IntoIterator<Item = NewRow<'_>>,
    at: chrono::DateTime<chrono::Utc>,
) -> Result<(), StoreError> {
    let trace = trace_context();
    let rows: Vec<_> = rows.into_iter().map(|r| row(r, at, trace.clone())).collect();
    if !rows.is_empty() {
        outbox::Entity::insert_many(rows).exec_without_returning(conn).await?;
    }
    Ok(())
}

/// The trace of the transaction writing rows: the span running now (the request's operation).
pub(crate) fn trace_context() -> Option<String> {
    crate::telemetry::traces::TraceParent::current().map(|t| t.to_string())
}

fn row(new: NewRow<'_>, at: chrono::DateTime<chrono::Utc>, trace: Option<String>) -> outbox::ActiveModel {
    let (slot, state) = (new.slot, new.appointment.map(|(_, state)| state));
    outbox::ActiveModel {
        kind: Set(new.kind.to_owned()),
        appointment_id: Set(new.appointment.map(|(id, _)| id)),
        slot_id: Set(slot.map(|s| s.id)),
        doctor_id: Set(slot.map(|s| s.doctor_id)),
        start_at: Set(slot.map(|s| s.start_at)),
        capacity: Set(slot.map(|s| s.capacity)),
        booked_count: Set(slot.map(|s| s.booked_count)),
        version: Set(slot.map(|s| s.version)),
        created_at: Set(at),
        slot_closed: Set(slot.map(|s| s.closed_at.is_some())),
        appointment_status: Set(state.map(|s| s.status.as_str().to_owned())),
        appointment_expires_at: Set(state.and_then(|s| s.expires_at)),
        appointment_cancelled_at: Set(state.and_then(|s| s.cancelled_at)),
        appointment_cancelled_by: Set(state.and_then(|s| s.cancelled_by).map(|c| c.as_str().to_owned())),
        appointment_rescheduled_to: Set(state.and_then(|s| s.rescheduled_to)),
        trace_context: Set(trace),
        ..Default::default()
    }
}

/// Most rows one relay pass claims.
pub const CLAIM_BATCH: u64 = 200;

/// The rows one relay pass took, and the transaction that deletes them. Whatever else the
/// pass records (messages, webhook deliveries) goes into the same transaction, so a row is
/// deleted exactly when its follow-up work is recorded. Dropping it without
/// [`Claimed::commit`] rolls back, and the rows wait for the next pass.
///
/// On PostgreSQL the rows are claimed and deleted in one statement inside the transaction,
/// locked `SKIP LOCKED` so instances draining at once take disjoint rows. SQLite serves one
/// process, so the rows are read first and the write transaction begins only when
/// [`Claimed::transaction`] is first asked for (after the publish: a writer held across it
/// would block every booking).
pub struct Claimed {
    db: Db,
    tx: Option<WriteTransaction>,
    /// The claimed rows, oldest first.
    pub rows: Vec<outbox::Model>,
}

impl Claimed {
    /// The pass's transaction, in which the rows are deleted.
    pub async fn transaction(&mut self) -> Result<&DatabaseTransaction, StoreError> {
        if self.tx.is_none() {
            let tx = self.db.begin_write().await?;
            let ids: Vec<i64> = self.rows.iter().map(|r| r.id).collect();
            outbox::Entity::delete_many().filter(outbox::Column::Id.is_in(ids)).exec(&tx).await?;
            self.tx = Some(tx);
        }
        self.tx
            .as_ref()
            .map(WriteTransaction::transaction)
            .ok_or_else(|| StoreError::Inconsistent("relay transaction missing".into()))
    }

    /// Commits the deletion of the rows and what the pass recorded with it.
    pub async fn commit(mut self) -> Result<(), StoreError> {
        self.transaction().await?;
        match self.tx.take() {
            Some(tx) => Ok(tx.commit().await?),
            None => Ok(()),
        }
    }
}

/// Claims and deletes in one statement: locking `SKIP LOCKED` keeps instances that drain at
/// the same time off each other's rows. The claimed ids are an array (`= ANY(ARRAY(…))`, see
/// the `db` module's "Queue claims"), so the locking subquery runs once and the rows are found by key.
const CLAIM_PG: &str = "\
DELETE FROM outbox WHERE id = ANY(ARRAY(SELECT id FROM outbox ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED))
RETURNING *";

/// Claims the oldest pending rows, at most `limit`. `None` when there are none.
pub async fn claim(db: &Db, limit: u64) -> Result<Option<Claimed>, StoreError> {
    let limit_value = i64::try_from(limit).unwrap_or(i64::MAX);
    if db.backend() != DbBackend::Postgres {
        let rows = outbox::Entity::find().order_by_asc(outbox::Column::Id).limit(limit).all(db.conn()).await?;
        return Ok((!rows.is_empty()).then(|| Claimed { db: db.clone(), tx: None, rows }));
    }
    let tx = db.begin_write().await?;
    // The commit does not wait for the WAL flush: losing it in a crash brings the rows back
    // (and takes what the pass recorded with it), so they are only published again, which
    // delivery at least once allows for; a flush per pass competed with the bookings' own
    // commits for the disk.
    // Planned at every pass for the table as it is now (see the `db` module's "Queue claims").
    tx.execute_unprepared("SET LOCAL synchronous_commit = off; SET LOCAL plan_cache_mode = force_custom_plan").await?;
    let claim = Statement::from_sql_and_values(DbBackend::Postgres, CLAIM_PG, [limit_value.into()]);
    let mut rows = outbox::Model::find_by_statement(claim).all(&tx).await?;
    if rows.is_empty() {
        tx.rollback().await?;
        return Ok(None);
    }
    // RETURNING follows no order.
    rows.sort_unstable_by_key(|r| r.id);
    Ok(Some(Claimed { db: db.clone(), tx: Some(tx), rows }))
}
