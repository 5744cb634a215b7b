//! Queries of the `outbox` table: written inside booking and cancel transactions, drained by
//! the relay in `crate::events::relay`.

use sea_orm::{ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};

use sqlx::{postgres::PgRow, Row};

use super::{
    entity::{outbox, time_slot},
    slots::decode_error,
    Db, StoreError,
};

/// Records, in the caller's transaction, that `slot` changed because of an appointment.
pub async fn record(
    conn: &impl ConnectionTrait,
    kind: &str,
    appointment_id: i64,
    slot: &time_slot::Model,
    at: chrono::DateTime<chrono::Utc>,
) -> Result<(), StoreError> {
    let row = outbox::ActiveModel {
        kind: Set(kind.to_owned()),
        appointment_id: Set(appointment_id),
        slot_id: Set(slot.id),
        doctor_id: Set(slot.doctor_id),
        start_at: Set(slot.start_at),
        capacity: Set(slot.capacity),
        booked_count: Set(slot.booked_count),
        version: Set(slot.version),
        created_at: Set(at),
        ..Default::default()
    };
    outbox::Entity::insert(row).exec_without_returning(conn).await?;
    Ok(())
}

/// Most rows one relay pass claims.
pub const CLAIM_BATCH: u64 = 200;

/// The oldest pending rows, at most `limit` (SQLite, where one process drains the outbox; see
/// [`claim_pg`] for PostgreSQL).
pub async fn oldest(conn: &impl ConnectionTrait, limit: u64) -> Result<Vec<outbox::Model>, StoreError> {
    Ok(outbox::Entity::find().order_by_asc(outbox::Column::Id).limit(limit).all(conn).await?)
}

/// Deletes published rows (the relay prunes what it has sent, holding [`super::Db::writing`]).
pub async fn delete(conn: &impl ConnectionTrait, ids: &[i64]) -> Result<u64, StoreError> {
    if ids.is_empty() {
        return Ok(0);
    }
    let done = outbox::Entity::delete_many().filter(outbox::Column::Id.is_in(ids.iter().copied())).exec(conn).await?;
    Ok(done.rows_affected)
}

/// On PostgreSQL: the rows one relay pass claimed, already deleted inside a transaction that
/// stays open until [`Claimed::release`] commits it (publish first, then release). Dropping it
/// instead rolls back, and the rows wait for the next pass.
pub struct Claimed {
    tx: sqlx::Transaction<'static, sqlx::Postgres>,
    /// The claimed rows, oldest first.
    pub rows: Vec<outbox::Model>,
}

impl Claimed {
    /// Commits the deletion of the rows (after they were published).
    pub async fn release(self) -> Result<(), StoreError> {
        self.tx.commit().await.map_err(StoreError::Connect)
    }
}

/// The relay's transaction. Its commit does not wait for the WAL flush: losing the deletion in
/// a crash only publishes its rows again, which delivery at least once allows for, while a
/// flush per pass competed with the bookings' own commits for the disk.
const BEGIN_RELAY: &str = "BEGIN; SET LOCAL synchronous_commit = off";

/// Claims and deletes in one statement: locking `SKIP LOCKED` keeps instances that drain at
/// the same time off each other's rows.
const CLAIM_PG: &str = "\
DELETE FROM outbox WHERE id IN (SELECT id FROM outbox ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING id, kind, appointment_id, slot_id, doctor_id, start_at, capacity, booked_count, version, created_at";

/// Claims the oldest pending rows, at most `limit`, on PostgreSQL: three round trips a pass
/// (begin, claim, commit) whatever the number of rows. `None` when there are none.
pub async fn claim_pg(db: &Db, limit: u64) -> Result<Option<Claimed>, StoreError> {
    let started = std::time::Instant::now();
    let mut tx = db.pg_pool()?.begin_with(BEGIN_RELAY).await?;
    let claimed = sqlx::query(CLAIM_PG).bind(i64::try_from(limit).unwrap_or(i64::MAX)).fetch_all(&mut *tx).await;
    db.counted(started.elapsed(), claimed.is_err());
    let mut rows = claimed?.iter().map(decode).collect::<Result<Vec<_>, _>>()?;
    if rows.is_empty() {
        tx.rollback().await?;
        return Ok(None);
    }
    // RETURNING follows no order.
    rows.sort_unstable_by_key(|r| r.id);
    Ok(Some(Claimed { tx, rows }))
}

fn decode(r: &PgRow) -> Result<outbox::Model, StoreError> {
    Ok(outbox::Model {
        id: r.try_get(0).map_err(decode_error)?,
        kind: r.try_get(1).map_err(decode_error)?,
        appointment_id: r.try_get(2).map_err(decode_error)?,
        slot_id: r.try_get(3).map_err(decode_error)?,
        doctor_id: r.try_get(4).map_err(decode_error)?,
        start_at: r.try_get(5).map_err(decode_error)?,
        capacity: r.try_get(6).map_err(decode_error)?,
        booked_count: r.try_get(7).map_err(decode_error)?,
        version: r.try_get(8).map_err(decode_error)?,
        created_at: r.try_get(9).map_err(decode_error)?,
    })
}
