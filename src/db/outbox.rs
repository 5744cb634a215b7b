//! Queries of the `outbox` table: written inside booking and cancel transactions, drained by
//! the relay in `crate::events::relay`.

use sea_orm::{
    sea_query::{LockBehavior, LockType},
    ActiveValue::Set,
    ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
};

use super::{
    entity::{outbox, time_slot},
    StoreError,
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

/// The oldest pending rows, at most `limit`. With `lock` (PostgreSQL, inside a transaction)
/// they are locked `FOR UPDATE SKIP LOCKED`, so instances draining the outbox at once each
/// take different rows and none is published twice at the same time.
pub async fn claim(conn: &impl ConnectionTrait, limit: u64, lock: bool) -> Result<Vec<outbox::Model>, StoreError> {
    let mut query = outbox::Entity::find().order_by_asc(outbox::Column::Id).limit(limit);
    if lock {
        query = query.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
    }
    Ok(query.all(conn).await?)
}

/// Deletes published rows (the relay prunes what it has sent).
pub async fn delete(conn: &impl ConnectionTrait, ids: &[i64]) -> Result<u64, StoreError> {
    if ids.is_empty() {
        return Ok(0);
    }
    let done = outbox::Entity::delete_many().filter(outbox::Column::Id.is_in(ids.iter().copied())).exec(conn).await?;
    Ok(done.rows_affected)
}
