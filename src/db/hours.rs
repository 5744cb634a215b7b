//! Queries of working hours, the planning horizon and time off, and of the pattern-made slots
//! (`time_slot.from_pattern`, `time_slot.time_off_id`).
//!
//! The two `time_slot` columns of this feature are not in the entity: only this module reads
//! or writes them, so no other query (nor the hot decoders of `rows.rs`) changes.
//!
//! Concurrency: every transaction that changes a doctor's pattern slots (a horizon pass, a
//! pattern change, time off added or removed) first locks the doctor's row ([`lock_doctors`],
//! `FOR NO KEY UPDATE`, which leaves inserting slots and appointments free) and reads the
//! patterns and time off after it, so no pass makes slots from a pattern or a time off that a
//! commit before it replaced. Slots are made by `INSERT … ON CONFLICT (doctor_id, start_at) DO
//! NOTHING`, so any number of instances make each slot once.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, DbBackend, EntityTrait, QueryFilter, QueryOrder,
    Statement, Value,
};

use super::{
    entity::{appointment, schedule_horizon, time_off, time_slot, working_hours},
    StoreError,
};

/// Rows per INSERT statement on SQLite (4 bound values a row, under its 32,766 limit).
const SQLITE_INSERT_CHUNK: usize = 1000;
/// Rows per INSERT statement on PostgreSQL (its arrays are one bound value each).
const PG_INSERT_CHUNK: usize = 20_000;

/// A statement's text and values, with the placeholders of its database.
struct Sql {
    backend: DbBackend,
    values: Vec<Value>,
}

impl Sql {
    fn new(conn: &impl ConnectionTrait) -> Self {
        Self { backend: conn.get_database_backend(), values: Vec::new() }
    }

    /// Binds `v` and returns its placeholder.
    fn bind(&mut self, v: impl Into<Value>) -> String {
        self.values.push(v.into());
        match self.backend {
            DbBackend::Postgres => format!("${}", self.values.len()),
            _ => "?".into(),
        }
    }

    /// `(p1, p2, …)` binding each of `ids` (`(NULL)` when empty: matches nothing).
    fn ids(&mut self, ids: &[i64]) -> String {
        if ids.is_empty() {
            return "(NULL)".into();
        }
        let list: Vec<String> = ids.iter().map(|id| self.bind(*id)).collect();
        format!("({})", list.join(", "))
    }

    fn statement(self, sql: String) -> Statement {
        Statement::from_sql_and_values(self.backend, sql, self.values)
    }
}

/// Locks the rows of `doctor_ids` (in id order) for the rest of the transaction on
/// PostgreSQL; SQLite, one writer at a time, needs no lock.
pub async fn lock_doctors(conn: &impl ConnectionTrait, doctor_ids: &[i64]) -> Result<(), StoreError> {
    if conn.get_database_backend() != DbBackend::Postgres || doctor_ids.is_empty() {
        return Ok(());
    }
    let mut sql = Sql::new(conn);
    let ids = sql.ids(doctor_ids);
    let stmt = sql.statement(format!("SELECT id FROM doctor WHERE id IN {ids} ORDER BY id FOR NO KEY UPDATE"));
    conn.query_all_raw(stmt).await?;
    Ok(())
}

/// Every doctor's id, by id.
pub async fn all_doctor_ids(conn: &impl ConnectionTrait) -> Result<Vec<i64>, StoreError> {
    let stmt = Statement::from_string(conn.get_database_backend(), "SELECT id FROM doctor ORDER BY id");
    ids_of(conn.query_all_raw(stmt).await?)
}

/// The doctors that have working hours, by id.
pub async fn doctors_with_patterns(conn: &impl ConnectionTrait) -> Result<Vec<i64>, StoreError> {
    let stmt =
        Statement::from_string(conn.get_database_backend(), "SELECT DISTINCT doctor_id FROM working_hours ORDER BY 1");
    ids_of(conn.query_all_raw(stmt).await?)
}

fn ids_of(rows: Vec<sea_orm::QueryResult>) -> Result<Vec<i64>, StoreError> {
    rows.iter().map(|r| r.try_get_by_index::<i64>(0).map_err(StoreError::from)).collect()
}

/// The patterns of `doctor_ids`, by doctor and first day.
pub async fn patterns_of(
    conn: &impl ConnectionTrait,
    doctor_ids: &[i64],
) -> Result<Vec<working_hours::Model>, StoreError> {
    Ok(working_hours::Entity::find()
        .filter(working_hours::Column::DoctorId.is_in(doctor_ids.iter().copied()))
        .order_by_asc(working_hours::Column::DoctorId)
        .order_by_asc(working_hours::Column::ValidFrom)
        .all(conn)
        .await?)
}

/// Sets the doctor's pattern from `valid_from` on: patterns from that day or later are
/// replaced by this one.
pub async fn replace_patterns_from(
    conn: &impl ConnectionTrait,
    doctor_id: i64,
    valid_from: &str,
    weekly: &str,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    working_hours::Entity::delete_many()
        .filter(working_hours::Column::DoctorId.eq(doctor_id))
        .filter(working_hours::Column::ValidFrom.gte(valid_from))
        .exec(conn)
        .await?;
    working_hours::ActiveModel {
        doctor_id: Set(doctor_id),
        valid_from: Set(valid_from.to_owned()),
        weekly: Set(weekly.to_owned()),
        created_at: Set(now),
        ..Default::default()
    }
    .insert(conn)
    .await?;
    Ok(())
}

/// The last day (`YYYY-MM-DD`) whose pattern slots exist, per doctor among `doctor_ids`.
pub async fn horizons_of(conn: &impl ConnectionTrait, doctor_ids: &[i64]) -> Result<HashMap<i64, String>, StoreError> {
    Ok(schedule_horizon::Entity::find()
        .filter(schedule_horizon::Column::DoctorId.is_in(doctor_ids.iter().copied()))
        .all(conn)
        .await?
        .into_iter()
        .map(|h| (h.doctor_id, h.scheduled_through))
        .collect())
}

/// Moves the doctor's horizon to `through`, never back (`YYYY-MM-DD` compares as text).
pub async fn advance_horizon(
    conn: &impl ConnectionTrait,
    doctor_id: i64,
    through: &str,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let mut sql = Sql::new(conn);
    let (d, t, n) = (sql.bind(doctor_id), sql.bind(through), sql.bind(now));
    let stmt = sql.statement(format!(
        "INSERT INTO schedule_horizon (doctor_id, scheduled_through, updated_at) VALUES ({d}, {t}, {n}) \
         ON CONFLICT (doctor_id) DO UPDATE SET \
           scheduled_through = CASE WHEN excluded.scheduled_through > schedule_horizon.scheduled_through \
             THEN excluded.scheduled_through ELSE schedule_horizon.scheduled_through END, \
           updated_at = excluded.updated_at"
    ));
    conn.execute_raw(stmt).await?;
    Ok(())
}

/// A slot a pattern makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PatternSlot {
    /// The doctor.
    pub doctor_id: i64,
    /// Start (UTC).
    pub start_at: DateTime<Utc>,
    /// End (UTC).
    pub end_at: DateTime<Utc>,
    /// Seats.
    pub capacity: i32,
}

/// Inserts `slots` marked as made from a pattern, skipping every `(doctor, start)` that exists
/// already; returns how many were made. On PostgreSQL one set-based statement per
/// [`PG_INSERT_CHUNK`] rows (`unnest` of four arrays), elsewhere multi-row `VALUES`.
pub async fn insert_pattern_slots(conn: &impl ConnectionTrait, slots: &[PatternSlot]) -> Result<u64, StoreError> {
    let mut created = 0;
    if conn.get_database_backend() == DbBackend::Postgres {
        for chunk in slots.chunks(PG_INSERT_CHUNK) {
            // Arrays travel as their text form, cast by the server: one value each, whatever
            // the batch's size. Instants go as microseconds since the epoch: formatting and
            // parsing timestamps took a tenth of a pass's time.
            let list = |f: &dyn Fn(&PatternSlot) -> i64| {
                let mut out = String::with_capacity(chunk.len() * 18 + 2);
                out.push('{');
                for (i, slot) in chunk.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&f(slot).to_string());
                }
                out.push('}');
                out
            };
            let mut sql = Sql::new(conn);
            let d = sql.bind(list(&|s| s.doctor_id));
            let s = sql.bind(list(&|s| s.start_at.timestamp_micros()));
            let e = sql.bind(list(&|s| s.end_at.timestamp_micros()));
            let c = sql.bind(list(&|s| i64::from(s.capacity)));
            let stmt = sql.statement(format!(
                "INSERT INTO time_slot (doctor_id, start_at, end_at, capacity, booked_count, version, from_pattern) \
                 SELECT r.d, timestamptz 'epoch' + r.s * interval '1 microsecond', \
                        timestamptz 'epoch' + r.e * interval '1 microsecond', r.c, 0, 0, true \
                 FROM unnest({d}::text::bigint[], {s}::text::bigint[], {e}::text::bigint[], \
                             {c}::text::int[]) AS r(d, s, e, c) \
                 ON CONFLICT (doctor_id, start_at) DO NOTHING"
            ));
            created += conn.execute_raw(stmt).await?.rows_affected();
        }
        return Ok(created);
    }
    for chunk in slots.chunks(SQLITE_INSERT_CHUNK) {
        let mut sql = Sql::new(conn);
        let rows: Vec<String> = chunk
            .iter()
            .map(|s| {
                let (d, st, e, c) =
                    (sql.bind(s.doctor_id), sql.bind(s.start_at), sql.bind(s.end_at), sql.bind(s.capacity));
                format!("({d}, {st}, {e}, {c}, 0, 0, 1)")
            })
            .collect();
        let stmt = sql.statement(format!(
            "INSERT INTO time_slot (doctor_id, start_at, end_at, capacity, booked_count, version, from_pattern) \
             VALUES {} ON CONFLICT (doctor_id, start_at) DO NOTHING",
            rows.join(", ")
        ));
        created += conn.execute_raw(stmt).await?.rows_affected();
    }
    Ok(created)
}

/// The doctor's pattern-made slots starting after both `from` and `now`, by start.
pub async fn pattern_slots_after(
    conn: &impl ConnectionTrait,
    doctor_id: i64,
    from: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<Vec<time_slot::Model>, StoreError> {
    let mut sql = Sql::new(conn);
    let (d, f, n) = (sql.bind(doctor_id), sql.bind(from), sql.bind(now));
    let stmt = sql.statement(format!(
        "SELECT * FROM time_slot WHERE doctor_id = {d} AND from_pattern AND start_at >= {f} AND start_at > {n} \
         ORDER BY start_at"
    ));
    Ok(time_slot::Entity::find().from_raw_sql(stmt).all(conn).await?)
}

/// Deletes those of `slot_ids` in which no seat is taken and which no appointment ever
/// referred to, in one conditional statement (a booking that took a seat first keeps its
/// slot; one that comes after finds none). Returns the deleted rows.
pub async fn remove_unheld(conn: &impl ConnectionTrait, slot_ids: &[i64]) -> Result<Vec<time_slot::Model>, StoreError> {
    if slot_ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut sql = Sql::new(conn);
    let ids = sql.ids(slot_ids);
    let stmt = sql.statement(format!(
        "DELETE FROM time_slot WHERE id IN {ids} AND booked_count = 0 \
           AND NOT EXISTS (SELECT 1 FROM appointment a WHERE a.slot_id = time_slot.id) \
           AND NOT EXISTS (SELECT 1 FROM appointment_slot x WHERE x.slot_id = time_slot.id) \
         RETURNING *"
    ));
    Ok(time_slot::Entity::find().from_raw_sql(stmt).all(conn).await?)
}

/// Closes those of `slot_ids` still open (locked by id, version bumped); returns the rows this
/// statement closed.
pub async fn close_ids(
    conn: &impl ConnectionTrait,
    slot_ids: &[i64],
    reason: &str,
    now: DateTime<Utc>,
) -> Result<Vec<time_slot::Model>, StoreError> {
    if slot_ids.is_empty() {
        return Ok(Vec::new());
    }
    super::slots::lock(conn, slot_ids).await?;
    let mut sql = Sql::new(conn);
    let (n, r) = (sql.bind(now), sql.bind(reason));
    let ids = sql.ids(slot_ids);
    let stmt = sql.statement(format!(
        "UPDATE time_slot SET closed_at = {n}, closed_reason = {r}, version = version + 1 \
         WHERE id IN {ids} AND closed_at IS NULL RETURNING *"
    ));
    Ok(time_slot::Entity::find().from_raw_sql(stmt).all(conn).await?)
}

/// The active (`HELD` or `BOOKED`) appointments taking a seat in any of `slot_ids`, by start.
pub async fn active_in_slots(
    conn: &impl ConnectionTrait,
    slot_ids: &[i64],
) -> Result<Vec<appointment::Model>, StoreError> {
    if slot_ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut sql = Sql::new(conn);
    let ids = sql.ids(slot_ids);
    let ids2 = sql.ids(slot_ids);
    let open = crate::model::AppointmentStatus::sql_list(|r| r.open);
    let stmt = sql.statement(format!(
        "SELECT * FROM appointment WHERE status IN {open} AND (slot_id IN {ids} \
           OR id IN (SELECT appointment_id FROM appointment_slot WHERE slot_id IN {ids2})) \
         ORDER BY start_at, id"
    ));
    Ok(appointment::Entity::find().from_raw_sql(stmt).all(conn).await?)
}

/// Adds a time-off entry (no doctor: the whole clinic).
pub async fn insert_time_off(
    conn: &impl ConnectionTrait,
    doctor_id: Option<i64>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    reason: Option<&str>,
    now: DateTime<Utc>,
) -> Result<time_off::Model, StoreError> {
    Ok(time_off::ActiveModel {
        doctor_id: Set(doctor_id),
        from_at: Set(from),
        to_at: Set(to),
        reason: Set(reason.map(str::to_owned)),
        created_at: Set(now),
        removed_at: Set(None),
        ..Default::default()
    }
    .insert(conn)
    .await?)
}

/// One time-off entry by id, removed or not.
pub async fn find_time_off(conn: &impl ConnectionTrait, id: i64) -> Result<Option<time_off::Model>, StoreError> {
    Ok(time_off::Entity::find_by_id(id).one(conn).await?)
}

/// Ends a time-off entry, once: `None` when it was removed already.
pub async fn mark_time_off_removed(
    conn: &impl ConnectionTrait,
    id: i64,
    now: DateTime<Utc>,
) -> Result<Option<time_off::Model>, StoreError> {
    let mut sql = Sql::new(conn);
    let (n, i) = (sql.bind(now), sql.bind(id));
    let stmt = sql
        .statement(format!("UPDATE time_off SET removed_at = {n} WHERE id = {i} AND removed_at IS NULL RETURNING *"));
    Ok(time_off::Entity::find().from_raw_sql(stmt).one(conn).await?)
}

/// The entries in force that overlap `[from, to)` (either end open): the doctors' own among
/// `doctor_ids` and, when `clinic`, the clinic's; by start.
pub async fn time_off_overlapping(
    conn: &impl ConnectionTrait,
    doctor_ids: &[i64],
    clinic: bool,
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
) -> Result<Vec<time_off::Model>, StoreError> {
    let mut whose = sea_orm::Condition::any().add(time_off::Column::DoctorId.is_in(doctor_ids.iter().copied()));
    if clinic {
        whose = whose.add(time_off::Column::DoctorId.is_null());
    }
    let mut q = time_off::Entity::find().filter(whose).filter(time_off::Column::RemovedAt.is_null());
    if let Some(from) = from {
        q = q.filter(time_off::Column::ToAt.gt(from));
    }
    if let Some(to) = to {
        q = q.filter(time_off::Column::FromAt.lt(to));
    }
    Ok(q.order_by_asc(time_off::Column::FromAt).order_by_asc(time_off::Column::Id).all(conn).await?)
}

/// The doctors with open slots starting in `[from, to)`, by id.
pub async fn doctors_with_open_slots_in(
    conn: &impl ConnectionTrait,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<i64>, StoreError> {
    let mut sql = Sql::new(conn);
    let (f, t) = (sql.bind(from), sql.bind(to));
    let stmt = sql.statement(format!(
        "SELECT DISTINCT doctor_id FROM time_slot WHERE start_at >= {f} AND start_at < {t} AND closed_at IS NULL \
         ORDER BY 1"
    ));
    ids_of(conn.query_all_raw(stmt).await?)
}

/// Notes that `time_off_id` closed `slot_ids` (so removing it opens exactly those again).
pub async fn tag_time_off(conn: &impl ConnectionTrait, slot_ids: &[i64], time_off_id: i64) -> Result<(), StoreError> {
    for chunk in slot_ids.chunks(SQLITE_INSERT_CHUNK) {
        let mut sql = Sql::new(conn);
        let t = sql.bind(time_off_id);
        let ids = sql.ids(chunk);
        conn.execute_raw(sql.statement(format!("UPDATE time_slot SET time_off_id = {t} WHERE id IN {ids}"))).await?;
    }
    Ok(())
}

/// Opens again the slots `time_off_id` closed that start after `now` and that no other time
/// off in force covers (version bumped); those another one covers are noted as closed by it.
/// Returns the opened rows.
pub async fn reopen_time_off(
    conn: &impl ConnectionTrait,
    time_off_id: i64,
    now: DateTime<Utc>,
) -> Result<Vec<time_slot::Model>, StoreError> {
    const COVERING: &str = "SELECT o.id FROM time_off o WHERE o.removed_at IS NULL \
        AND (o.doctor_id = time_slot.doctor_id OR o.doctor_id IS NULL) \
        AND o.from_at <= time_slot.start_at AND time_slot.start_at < o.to_at";
    let mut sql = Sql::new(conn);
    let (t, n) = (sql.bind(time_off_id), sql.bind(now));
    let stmt = sql.statement(format!(
        "UPDATE time_slot SET closed_at = NULL, closed_reason = NULL, time_off_id = NULL, version = version + 1 \
         WHERE time_off_id = {t} AND start_at > {n} AND NOT EXISTS ({COVERING}) RETURNING *"
    ));
    let opened = time_slot::Entity::find().from_raw_sql(stmt).all(conn).await?;
    let mut sql = Sql::new(conn);
    let t = sql.bind(time_off_id);
    let stmt = sql.statement(format!(
        "UPDATE time_slot SET time_off_id = ({COVERING} ORDER BY o.id LIMIT 1) WHERE time_off_id = {t}"
    ));
    conn.execute_raw(stmt).await?;
    Ok(opened)
}
