//! Queries of the `time_slot` table, including the conditional updates that take a seat.
//!
//! Lock order: statements that lock several slots lock them by id (a sub-select `ORDER BY id
//! FOR UPDATE`), so concurrent bookings of overlapping runs, reschedules and releases wait for
//! each other instead of deadlocking.

use chrono::{DateTime, Duration, Utc};
use sea_orm::{
    sea_query::{Expr, ExprTrait, LockType, Query, SelectStatement},
    ActiveValue::Set,
    ColumnTrait, Condition, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder,
};

use super::{entity::time_slot, StoreError};
use crate::model::DayRange;

/// Rows per INSERT statement (well under both databases' bind-parameter limits).
const INSERT_CHUNK: usize = 1000;

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

/// The slots of `range` that can still be booked at `now`: open, a seat left and a start in
/// the future.
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
        .filter(time_slot::Column::ClosedAt.is_null())
        .order_by_asc(time_slot::Column::StartAt)
        .all(conn)
        .await?)
}

/// Every slot of the doctor starting in `[from, to)`, by start (full, closed and past ones too).
pub async fn starting_in(
    conn: &impl ConnectionTrait,
    doctor_id: i64,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<time_slot::Model>, StoreError> {
    Ok(time_slot::Entity::find()
        .filter(time_slot::Column::DoctorId.eq(doctor_id))
        .filter(time_slot::Column::StartAt.gte(from))
        .filter(time_slot::Column::StartAt.lt(to))
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

/// The booking's one conditional update: takes a seat if one is left, the slot is open and
/// has not started, bumping the version. `None` when no row qualified (not found, full,
/// closed or past).
pub async fn take_seat(
    conn: &impl ConnectionTrait,
    slot_id: i64,
    now: DateTime<Utc>,
) -> Result<Option<time_slot::Model>, StoreError> {
    Ok(take_seats(conn, &[slot_id], now).await?.pop())
}

/// [`take_seat`] for each of `slot_ids` in one statement, locking them by id. Returns the
/// slots that had a seat, by start; fewer than asked means the caller must roll back (all
/// or none).
pub async fn take_seats(
    conn: &impl ConnectionTrait,
    slot_ids: &[i64],
    now: DateTime<Utc>,
) -> Result<Vec<time_slot::Model>, StoreError> {
    let mut rows = time_slot::Entity::update_many()
        .col_expr(time_slot::Column::BookedCount, Expr::col(time_slot::Column::BookedCount).add(1))
        .col_expr(time_slot::Column::Version, Expr::col(time_slot::Column::Version).add(1))
        .filter(time_slot::Column::Id.in_subquery(locked_by_id(slot_ids)))
        .filter(Expr::col(time_slot::Column::BookedCount).lt(Expr::col(time_slot::Column::Capacity)))
        .filter(time_slot::Column::StartAt.gt(now))
        .filter(time_slot::Column::ClosedAt.is_null())
        .exec_with_returning(conn)
        .await?;
    rows.sort_unstable_by_key(|r| r.start_at);
    Ok(rows)
}

/// Gives seats back: `released` lists each slot with the number of seats it gets back (the
/// appointments of one statement may share a slot). One statement, slots locked by id, one
/// version step per slot. The CHECK constraint refuses a count below zero, so a bug here
/// fails loudly instead of corrupting the count.
pub async fn release_seats(
    conn: &impl ConnectionTrait,
    released: &[(i64, i32)],
) -> Result<Vec<time_slot::Model>, StoreError> {
    let Some(((first, n), rest)) = released.split_first() else {
        return Ok(Vec::new());
    };
    let mut seats = Expr::case(time_slot::Column::Id.eq(*first), *n);
    for (id, n) in rest {
        seats = seats.case(time_slot::Column::Id.eq(*id), *n);
    }
    let ids: Vec<i64> = released.iter().map(|(id, _)| *id).collect();
    let mut rows = time_slot::Entity::update_many()
        .col_expr(time_slot::Column::BookedCount, Expr::col(time_slot::Column::BookedCount).sub(seats.finally(0)))
        .col_expr(time_slot::Column::Version, Expr::col(time_slot::Column::Version).add(1))
        .filter(time_slot::Column::Id.in_subquery(locked_by_id(&ids)))
        .exec_with_returning(conn)
        .await?;
    if rows.len() != ids.len() {
        return Err(StoreError::Inconsistent(format!("releasing seats of {ids:?} found {} slots", rows.len())));
    }
    rows.sort_unstable_by_key(|r| r.start_at);
    Ok(rows)
}

/// Locks `slot_ids` by id for the rest of the transaction (a reschedule locks the slots it
/// releases and the slots it takes in one go, before changing any).
pub async fn lock(conn: &impl ConnectionTrait, slot_ids: &[i64]) -> Result<(), StoreError> {
    let stmt = locked_by_id(slot_ids);
    conn.query_all(&stmt).await?;
    Ok(())
}

/// `SELECT id FROM time_slot WHERE id IN (…) ORDER BY id FOR UPDATE` (SQLite, one writer at a
/// time, has no row locks and leaves the clause out).
fn locked_by_id(slot_ids: &[i64]) -> SelectStatement {
    Query::select()
        .column(time_slot::Column::Id)
        .from(time_slot::Entity)
        .and_where(time_slot::Column::Id.is_in(slot_ids.iter().copied()))
        .order_by(time_slot::Column::Id, sea_orm::Order::Asc)
        .lock(LockType::Update)
        .to_owned()
}

/// The run of an appointment `minutes` long starting at a slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Run {
    /// No slot with that id.
    NoSlot,
    /// The slot, and each following slot of the same doctor starting exactly where the
    /// previous one ends, until `minutes` are covered.
    Slots(Vec<time_slot::Model>),
    /// The slot exists, but no such run covers exactly `minutes` (a gap, a slot of another
    /// length, or the end of the schedule). Carries the first slot.
    NotCovered(time_slot::Model),
}

/// The run starting at `first_id` covering `minutes` (slots' times never change, so reading
/// them outside the booking's transaction decides nothing about seats).
pub async fn run_from(conn: &impl ConnectionTrait, first_id: i64, minutes: i64) -> Result<Run, StoreError> {
    let Some(first) = find(conn, first_id).await? else {
        return Ok(Run::NoSlot);
    };
    let end = first.start_at + Duration::minutes(minutes);
    let candidates = starting_in(conn, first.doctor_id, first.start_at, end).await?;
    Ok(match contiguous_run(&candidates, first.start_at, end) {
        Some(run) => Run::Slots(run),
        None => Run::NotCovered(first),
    })
}

/// The slots of `candidates` (one doctor's, by start) that chain from `start` to exactly `end`,
/// each starting where the previous ends; `None` when there is no such chain.
pub fn contiguous_run(
    candidates: &[time_slot::Model],
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> Option<Vec<time_slot::Model>> {
    let mut run: Vec<time_slot::Model> = Vec::new();
    let mut at = start;
    while at < end {
        // Starts are unique per doctor, so at most one slot starts at `at`.
        let next = candidates.iter().find(|s| s.start_at == at)?;
        at = next.end_at;
        run.push(next.clone());
    }
    (at == end && !run.is_empty()).then_some(run)
}

/// Closes the doctor's open slots starting in `[from, to)`, bumping their version: they never
/// take a seat again. Returns the slots this statement closed, by start.
pub async fn close(
    conn: &impl ConnectionTrait,
    range: DayRange,
    reason: Option<&str>,
    now: DateTime<Utc>,
) -> Result<Vec<time_slot::Model>, StoreError> {
    let in_range = Query::select()
        .column(time_slot::Column::Id)
        .from(time_slot::Entity)
        .and_where(time_slot::Column::DoctorId.eq(range.doctor_id))
        .and_where(time_slot::Column::StartAt.gte(range.from))
        .and_where(time_slot::Column::StartAt.lt(range.to))
        .and_where(time_slot::Column::ClosedAt.is_null())
        .order_by(time_slot::Column::Id, sea_orm::Order::Asc)
        .lock(LockType::Update)
        .to_owned();
    let mut rows = time_slot::Entity::update_many()
        .col_expr(time_slot::Column::ClosedAt, Expr::value(now))
        .col_expr(time_slot::Column::ClosedReason, Expr::value(reason.map(str::to_owned)))
        .col_expr(time_slot::Column::Version, Expr::col(time_slot::Column::Version).add(1))
        .filter(time_slot::Column::Id.in_subquery(in_range))
        .filter(time_slot::Column::ClosedAt.is_null())
        .exec_with_returning(conn)
        .await?;
    rows.sort_unstable_by_key(|r| r.start_at);
    Ok(rows)
}

/// [`available`] for many doctors' days in one PostgreSQL statement (each range an index range
/// scan, forced by `LATERAL`): one list per range, in the order of `ranges`.
pub async fn available_in_ranges_pg(
    db: &super::Db,
    ranges: &[DayRange],
    now: DateTime<Utc>,
) -> Result<Vec<Vec<time_slot::Model>>, StoreError> {
    use super::rows::{decode_error, slot_at};
    use sqlx::Row;
    const SQL: &str = concat!(
        "SELECT r.i, ",
        slot_columns!("t"),
        " FROM unnest($1::bigint[], $2::timestamptz[], $3::timestamptz[]) WITH ORDINALITY AS r(doctor_id, from_at, to_at, i) \
        CROSS JOIN LATERAL (SELECT * FROM time_slot WHERE doctor_id = r.doctor_id AND start_at >= r.from_at \
                            AND start_at < r.to_at AND start_at > $4 AND booked_count < capacity \
                            AND closed_at IS NULL) AS t \
        ORDER BY r.i, t.start_at"
    );
    let query = sqlx::query(SQL)
        .bind(ranges.iter().map(|r| r.doctor_id).collect::<Vec<_>>())
        .bind(ranges.iter().map(|r| r.from).collect::<Vec<_>>())
        .bind(ranges.iter().map(|r| r.to).collect::<Vec<_>>())
        .bind(now);
    let mut lists = vec![Vec::new(); ranges.len()];
    for row in db.pg_fetch_all("SELECT", query).await? {
        let i: i64 = row.try_get(0).map_err(decode_error)?;
        let list = usize::try_from(i - 1)
            .ok()
            .and_then(|i| lists.get_mut(i))
            .ok_or_else(|| StoreError::Inconsistent(format!("batched slot list answered for range {i}")))?;
        list.push(slot_at(&row, 1)?);
    }
    Ok(lists)
}
