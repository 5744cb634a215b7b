//! Reads of the FHIR surface: the slot search, and the rows the SMART Scheduling Links feed is
//! built from (every doctor, every slot that has not started, and what was added since).
//!
//! All of them are reads without locks; the feed's big scan goes through the pool (never the
//! dedicated booking connections) in batches of doctors, so it holds one connection at a time.

use chrono::{DateTime, Utc};
use sea_orm::{
    sea_query::{Expr, ExprTrait},
    ColumnTrait, Condition, ConnectionTrait, DbBackend, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
};

use super::{
    entity::{appointment, doctor, time_slot},
    Db, StoreError,
};

/// Which FHIR slot statuses a search selects (none set: all of them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatusFilter {
    /// Open, a seat left.
    pub free: bool,
    /// Open and full.
    pub busy: bool,
    /// Closed.
    pub unavailable: bool,
}

/// A slot search: one doctor, starts in `[from, to)`, some statuses, after a keyset cursor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotSearch {
    /// The doctor.
    pub doctor_id: i64,
    /// First start included.
    pub from: Option<DateTime<Utc>>,
    /// First start excluded.
    pub to: Option<DateTime<Utc>>,
    /// `None`: every status.
    pub statuses: Option<StatusFilter>,
}

impl SlotSearch {
    fn condition(&self) -> Condition {
        let mut all = Condition::all().add(time_slot::Column::DoctorId.eq(self.doctor_id));
        if let Some(from) = self.from {
            all = all.add(time_slot::Column::StartAt.gte(from));
        }
        if let Some(to) = self.to {
            all = all.add(time_slot::Column::StartAt.lt(to));
        }
        if let Some(s) = self.statuses {
            let seat_left = Expr::col(time_slot::Column::BookedCount).lt(Expr::col(time_slot::Column::Capacity));
            let full = Expr::col(time_slot::Column::BookedCount).gte(Expr::col(time_slot::Column::Capacity));
            let mut any = Condition::any();
            if s.free {
                any = any.add(Condition::all().add(time_slot::Column::ClosedAt.is_null()).add(seat_left));
            }
            if s.busy {
                any = any.add(Condition::all().add(time_slot::Column::ClosedAt.is_null()).add(full));
            }
            if s.unavailable {
                any = any.add(time_slot::Column::ClosedAt.is_not_null());
            }
            all = all.add(any);
        }
        all
    }
}

/// One page of a slot search, by start then id, after `after` (the last `(start, id)` of the
/// previous page).
pub async fn search_slots(
    conn: &impl ConnectionTrait,
    search: &SlotSearch,
    after: Option<(DateTime<Utc>, i64)>,
    limit: u64,
) -> Result<Vec<time_slot::Model>, StoreError> {
    let mut cond = search.condition();
    if let Some((start, id)) = after {
        cond = cond.add(
            Condition::any()
                .add(time_slot::Column::StartAt.gt(start))
                .add(Condition::all().add(time_slot::Column::StartAt.eq(start)).add(time_slot::Column::Id.gt(id))),
        );
    }
    Ok(time_slot::Entity::find()
        .filter(cond)
        .order_by_asc(time_slot::Column::StartAt)
        .order_by_asc(time_slot::Column::Id)
        .limit(limit)
        .all(conn)
        .await?)
}

/// How many slots match a search (all pages).
pub async fn count_slots(conn: &impl ConnectionTrait, search: &SlotSearch) -> Result<u64, StoreError> {
    let n: Option<i64> = time_slot::Entity::find()
        .select_only()
        .column_as(Expr::col(time_slot::Column::Id).count(), "n")
        .filter(search.condition())
        .into_tuple()
        .one(conn)
        .await?;
    Ok(n.and_then(|n| u64::try_from(n).ok()).unwrap_or(0))
}

/// The doctor of each slot among `slot_ids` that exists, and the slots of an appointment by
/// start: what an `Appointment` resource refers to.
pub async fn appointment_slots(
    conn: &impl ConnectionTrait,
    a: &appointment::Model,
) -> Result<(Option<i64>, Vec<i64>), StoreError> {
    let slots = super::appointments::slots_of(conn, std::slice::from_ref(a)).await?;
    let ids = slots.get(&a.id).cloned().unwrap_or_else(|| vec![a.slot_id]);
    let doctor_id = super::slots::find(conn, a.slot_id).await?.map(|s| s.doctor_id);
    Ok((doctor_id, ids))
}

/// Every doctor with an id above `after`, by id.
pub async fn doctors_after(conn: &impl ConnectionTrait, after: i64) -> Result<Vec<doctor::Model>, StoreError> {
    Ok(doctor::Entity::find().filter(doctor::Column::Id.gt(after)).order_by_asc(doctor::Column::Id).all(conn).await?)
}

/// The highest doctor id and slot id (0 for none): one cheap statement a feed refresh uses to
/// see that rows were added.
pub async fn max_ids(conn: &impl ConnectionTrait) -> Result<(i64, i64), StoreError> {
    let sql =
        "SELECT COALESCE((SELECT MAX(id) FROM doctor), 0) AS d, COALESCE((SELECT MAX(id) FROM time_slot), 0) AS s";
    let row = conn
        .query_one_raw(sea_orm::Statement::from_string(conn.get_database_backend(), sql))
        .await?
        .ok_or_else(|| StoreError::Inconsistent("MAX(id) returned no row".into()))?;
    Ok((row.try_get("", "d")?, row.try_get("", "s")?))
}

/// The slots of `doctor_ids` that start after `now`, by doctor and start: a batch of the
/// feed's full build.
pub async fn upcoming_slots_of(
    db: &Db,
    doctor_ids: &[i64],
    now: DateTime<Utc>,
) -> Result<Vec<time_slot::Model>, StoreError> {
    if doctor_ids.is_empty() {
        return Ok(Vec::new());
    }
    if db.backend() == DbBackend::Postgres {
        const SQL: &str = concat!(
            "SELECT ",
            slot_columns!("t"),
            " FROM time_slot t WHERE t.doctor_id = ANY($1) AND t.start_at > $2 ORDER BY t.doctor_id, t.start_at"
        );
        let query = sqlx::query(SQL).bind(doctor_ids.to_vec()).bind(now);
        return pg_rows(db, query).await;
    }
    Ok(time_slot::Entity::find()
        .filter(time_slot::Column::DoctorId.is_in(doctor_ids.iter().copied()))
        .filter(time_slot::Column::StartAt.gt(now))
        .order_by_asc(time_slot::Column::DoctorId)
        .order_by_asc(time_slot::Column::StartAt)
        .all(db.conn())
        .await?)
}

/// The slots with an id above `after` that start after `now`, by id (rows added since the
/// feed last looked).
pub async fn upcoming_slots_after(
    db: &Db,
    after: i64,
    now: DateTime<Utc>,
) -> Result<Vec<time_slot::Model>, StoreError> {
    if db.backend() == DbBackend::Postgres {
        const SQL: &str = concat!(
            "SELECT ",
            slot_columns!("t"),
            " FROM time_slot t WHERE t.id > $1 AND t.start_at > $2 ORDER BY t.id"
        );
        let query = sqlx::query(SQL).bind(after).bind(now);
        return pg_rows(db, query).await;
    }
    Ok(time_slot::Entity::find()
        .filter(time_slot::Column::Id.gt(after))
        .filter(time_slot::Column::StartAt.gt(now))
        .order_by_asc(time_slot::Column::Id)
        .all(db.conn())
        .await?)
}

/// Slot rows of a PostgreSQL statement selecting `slot_columns!`, decoded by position (a
/// fraction of sea-orm's cost on the feed's million rows), through the pool, counted.
async fn pg_rows(
    db: &Db,
    query: sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
) -> Result<Vec<time_slot::Model>, StoreError> {
    let pool = db.pg_pool()?;
    let started = std::time::Instant::now();
    let result = query.fetch_all(pool).await;
    super::count_statement(
        &db.statements,
        "postgresql",
        super::Operation::Named("SELECT"),
        started.elapsed(),
        result.is_err(),
    );
    let rows = result.map_err(|e| sea_orm::DbErr::Query(sea_orm::RuntimeErr::SqlxError(std::sync::Arc::new(e))))?;
    rows.iter().map(|row| super::rows::slot_at(row, 0)).collect()
}
