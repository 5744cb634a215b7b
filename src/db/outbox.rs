//! Queries of the `outbox` table: written inside booking and cancel transactions.

use sea_orm::{ActiveValue::Set, ConnectionTrait, EntityTrait};

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
