//! Queries of the `doctor` table.

use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
};

use super::{entity::doctor, micros, StoreError};

/// Inserts a doctor and returns it.
pub async fn insert(
    conn: &impl ConnectionTrait,
    name: &str,
    specialty: Option<&str>,
    timezone: &str,
) -> Result<doctor::Model, StoreError> {
    let row = doctor::ActiveModel {
        name: Set(name.to_owned()),
        specialty: Set(specialty.map(str::to_owned)),
        timezone: Set(timezone.to_owned()),
        created_at: Set(micros(chrono::Utc::now())),
        ..Default::default()
    };
    Ok(row.insert(conn).await?)
}

/// One doctor by id.
pub async fn find(conn: &impl ConnectionTrait, id: i64) -> Result<Option<doctor::Model>, StoreError> {
    Ok(doctor::Entity::find_by_id(id).one(conn).await?)
}

/// The doctors among `ids` that exist, in no particular order.
pub async fn find_many(conn: &impl ConnectionTrait, ids: &[i64]) -> Result<Vec<doctor::Model>, StoreError> {
    Ok(doctor::Entity::find().filter(doctor::Column::Id.is_in(ids.iter().copied())).all(conn).await?)
}

/// Up to `limit` doctors with an id above `after`, by id.
pub async fn page(
    conn: &impl ConnectionTrait,
    after: Option<i64>,
    limit: u64,
) -> Result<Vec<doctor::Model>, StoreError> {
    let mut q = doctor::Entity::find().order_by_asc(doctor::Column::Id).limit(limit);
    if let Some(after) = after {
        q = q.filter(doctor::Column::Id.gt(after));
    }
    Ok(q.all(conn).await?)
}
