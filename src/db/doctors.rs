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

/// Every doctor with its specialty as the slot search compares it (PostgreSQL's `lower()`
/// there, Rust's lowercase on SQLite), by id.
pub async fn roster(conn: &impl ConnectionTrait) -> Result<Vec<(i64, Option<String>)>, StoreError> {
    use sea_orm::{DbBackend, FromQueryResult, Statement};
    #[derive(FromQueryResult)]
    struct Row {
        id: i64,
        specialty: Option<String>,
    }
    let backend = conn.get_database_backend();
    let sql = match backend {
        DbBackend::Postgres => "SELECT id, lower(specialty) AS specialty FROM doctor ORDER BY id",
        _ => "SELECT id, specialty FROM doctor ORDER BY id",
    };
    let rows = Row::find_by_statement(Statement::from_string(backend, sql)).all(conn).await?;
    let fold = backend != DbBackend::Postgres;
    Ok(rows.into_iter().map(|r| (r.id, r.specialty.map(|s| if fold { s.to_lowercase() } else { s }))).collect())
}

/// `specialty` folded as the slot search folds it (see [`roster`]).
pub async fn fold_specialty(conn: &impl ConnectionTrait, specialty: &str) -> Result<String, StoreError> {
    use sea_orm::{DbBackend, Statement};
    if conn.get_database_backend() != DbBackend::Postgres {
        return Ok(specialty.to_lowercase());
    }
    let statement =
        Statement::from_sql_and_values(DbBackend::Postgres, "SELECT lower($1) AS folded", [specialty.into()]);
    let row = conn
        .query_one_raw(statement)
        .await?
        .ok_or_else(|| StoreError::Inconsistent("SELECT lower($1) returned no row".into()))?;
    Ok(row.try_get::<String>("", "folded")?)
}
