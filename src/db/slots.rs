//! Queries of the `time_slot` table, including the one conditional update that takes a seat.

use chrono::{DateTime, Utc};
use sea_orm::{
    sea_query::{Expr, ExprTrait},
    ActiveValue::Set,
    ColumnTrait, Condition, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder,
};

use super::{entity::time_slot, StoreError};

/// Rows per INSERT statement (well under both databases' bind-parameter limits).
const INSERT_CHUNK: usize = 1000;

/// A half-open interval `[from, to)` of one doctor's slot starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DayRange {
    /// The doctor.
    pub doctor_id: i64,
    /// First instant of the day (inclusive).
    pub from: DateTime<Utc>,
    /// First instant after the day (exclusive).
    pub to: DateTime<Utc>,
}

/// One slot by id.
pub async fn find(conn: &impl ConnectionTrait, id: i64) -> Result<Option<time_slot::Model>, StoreError> {
    Ok(time_slot::Entity::find_by_id(id).one(conn).await?)
}

/// The slots among `ids` that exist.
pub async fn find_many(conn: &impl ConnectionTrait, ids: &[i64]) -> Result<Vec<time_slot::Model>, StoreError> {
    Ok(time_slot::Entity::find().filter(time_slot::Column::Id.is_in(ids.iter().copied())).all(conn).await?)
}

/// Every slot starting in any of `ranges`, ordered by doctor and start (one statement for many
/// doctors' days: the DataLoader of `Doctor.slots`).
pub async fn in_ranges(conn: &impl ConnectionTrait, ranges: &[DayRange]) -> Result<Vec<time_slot::Model>, StoreError> {
    let mut any = Condition::any();
    for r in ranges {
        any = any.add(
            Condition::all()
                .add(time_slot::Column::DoctorId.eq(r.doctor_id))
                .add(time_slot::Column::StartAt.gte(r.from))
                .add(time_slot::Column::StartAt.lt(r.to)),
        );
    }
    Ok(time_slot::Entity::find()
        .filter(any)
        .order_by_asc(time_slot::Column::DoctorId)
        .order_by_asc(time_slot::Column::StartAt)
        .all(conn)
        .await?)
}

/// The slots of `range` that can still be booked at `now`: a seat left and a start in the future.
pub async fn available(
    conn: &impl ConnectionTrait,
    range: DayRange,
    now: DateTime<Utc>,
) -> Result<Vec<time_slot::Model>, StoreError> {
    Ok(time_slot::Entity::find()
        .filter(time_slot::Column::DoctorId.eq(range.doctor_id))
        .filter(time_slot::Column::StartAt.gte(Ord::max(range.from, now)))
        .filter(time_slot::Column::StartAt.lt(range.to))
        .filter(time_slot::Column::StartAt.gt(now))
        .filter(Expr::col(time_slot::Column::BookedCount).lt(Expr::col(time_slot::Column::Capacity)))
        .order_by_asc(time_slot::Column::StartAt)
        .all(conn)
        .await?)
}

/// A slot to create.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewSlot {
    /// Start (UTC).
    pub start_at: DateTime<Utc>,
    /// End (UTC).
    pub end_at: DateTime<Utc>,
}

/// Inserts `slots` for a doctor, skipping any whose `(doctor_id, start_at)` exists already.
/// Returns how many were created.
pub async fn insert_skipping_existing(
    conn: &impl ConnectionTrait,
    doctor_id: i64,
    capacity: i32,
    slots: &[NewSlot],
) -> Result<u64, StoreError> {
    let mut created = 0;
    for chunk in slots.chunks(INSERT_CHUNK) {
        let rows = chunk.iter().map(|s| time_slot::ActiveModel {
            doctor_id: Set(doctor_id),
            start_at: Set(s.start_at),
            end_at: Set(s.end_at),
            capacity: Set(capacity),
            booked_count: Set(0),
            version: Set(0),
            ..Default::default()
        });
        let result = time_slot::Entity::insert_many(rows)
            .on_conflict_do_nothing_on([time_slot::Column::DoctorId, time_slot::Column::StartAt])
            .exec_without_returning(conn)
            .await?;
        if let sea_orm::TryInsertResult::Inserted(n) = result {
            created += n;
        }
    }
    Ok(created)
}

/// The doctor's slots starting at any of `starts`, by start.
pub async fn at_starts(
    conn: &impl ConnectionTrait,
    doctor_id: i64,
    starts: &[DateTime<Utc>],
) -> Result<Vec<time_slot::Model>, StoreError> {
    let (Some(first), Some(last)) = (starts.first(), starts.last()) else {
        return Ok(Vec::new());
    };
    let mut rows = time_slot::Entity::find()
        .filter(time_slot::Column::DoctorId.eq(doctor_id))
        .filter(time_slot::Column::StartAt.gte(*first))
        .filter(time_slot::Column::StartAt.lte(*last))
        .order_by_asc(time_slot::Column::StartAt)
        .all(conn)
        .await?;
    // The range may hold slots of an earlier publish with another slot length.
    rows.retain(|r| starts.binary_search(&r.start_at).is_ok());
    Ok(rows)
}

/// The booking's one conditional update: takes a seat if one is left and the slot has not
/// started, bumping the version. `None` when no row qualified (not found, full or past).
pub async fn take_seat(
    conn: &impl ConnectionTrait,
    slot_id: i64,
    now: DateTime<Utc>,
) -> Result<Option<time_slot::Model>, StoreError> {
    let mut rows = time_slot::Entity::update_many()
        .col_expr(time_slot::Column::BookedCount, Expr::col(time_slot::Column::BookedCount).add(1))
        .col_expr(time_slot::Column::Version, Expr::col(time_slot::Column::Version).add(1))
        .filter(time_slot::Column::Id.eq(slot_id))
        .filter(Expr::col(time_slot::Column::BookedCount).lt(Expr::col(time_slot::Column::Capacity)))
        .filter(time_slot::Column::StartAt.gt(now))
        .exec_with_returning(conn)
        .await?;
    Ok(rows.pop())
}

/// Gives one seat back (a cancel), bumping the version. The CHECK constraint refuses a count
/// below zero, so a bug here fails loudly instead of corrupting the count.
pub async fn release_seat(conn: &impl ConnectionTrait, slot_id: i64) -> Result<time_slot::Model, StoreError> {
    let mut rows = time_slot::Entity::update_many()
        .col_expr(time_slot::Column::BookedCount, Expr::col(time_slot::Column::BookedCount).sub(1))
        .col_expr(time_slot::Column::Version, Expr::col(time_slot::Column::Version).add(1))
        .filter(time_slot::Column::Id.eq(slot_id))
        .exec_with_returning(conn)
        .await?;
    rows.pop().ok_or_else(|| StoreError::Inconsistent(format!("slot {slot_id} of a booked appointment is missing")))
}

/// [`available`] for many doctors' days in one PostgreSQL statement (each range an index range
/// scan, forced by `LATERAL`): one list per range, in the order of `ranges`.
pub async fn available_in_ranges_pg(
    db: &super::Db,
    ranges: &[DayRange],
    now: DateTime<Utc>,
) -> Result<Vec<Vec<time_slot::Model>>, StoreError> {
    use sqlx::Row;
    const SQL: &str = "\
        SELECT r.i, t.id, t.doctor_id, t.start_at, t.end_at, t.capacity, t.booked_count, t.version \
        FROM unnest($1::bigint[], $2::timestamptz[], $3::timestamptz[]) WITH ORDINALITY AS r(doctor_id, from_at, to_at, i) \
        CROSS JOIN LATERAL (SELECT * FROM time_slot WHERE doctor_id = r.doctor_id AND start_at >= r.from_at \
                            AND start_at < r.to_at AND start_at > $4 AND booked_count < capacity) AS t \
        ORDER BY r.i, t.start_at";
    let query = sqlx::query(SQL)
        .bind(ranges.iter().map(|r| r.doctor_id).collect::<Vec<_>>())
        .bind(ranges.iter().map(|r| r.from).collect::<Vec<_>>())
        .bind(ranges.iter().map(|r| r.to).collect::<Vec<_>>())
        .bind(now);
    let mut lists = vec![Vec::new(); ranges.len()];
    for row in db.pg_fetch_all(query).await? {
        let i: i64 = row.try_get(0).map_err(decode_error)?;
        let list = usize::try_from(i - 1)
            .ok()
            .and_then(|i| lists.get_mut(i))
            .ok_or_else(|| StoreError::Inconsistent(format!("batched slot list answered for range {i}")))?;
        list.push(slot_at(&row, 1)?);
    }
    Ok(lists)
}

/// The `time_slot` columns of `row` from position `at` on (id, doctor, start, end, capacity,
/// booked, version).
pub(crate) fn slot_at(row: &sqlx::postgres::PgRow, at: usize) -> Result<time_slot::Model, StoreError> {
    use sqlx::Row;
    Ok(time_slot::Model {
        id: row.try_get(at).map_err(decode_error)?,
        doctor_id: row.try_get(at + 1).map_err(decode_error)?,
        start_at: row.try_get(at + 2).map_err(decode_error)?,
        end_at: row.try_get(at + 3).map_err(decode_error)?,
        capacity: row.try_get(at + 4).map_err(decode_error)?,
        booked_count: row.try_get(at + 5).map_err(decode_error)?,
        version: row.try_get(at + 6).map_err(decode_error)?,
    })
}

/// A column that does not decode as expected: the schema and the code disagree.
pub(crate) fn decode_error(e: sqlx::Error) -> StoreError {
    StoreError::Inconsistent(format!("unexpected column: {e}"))
}
