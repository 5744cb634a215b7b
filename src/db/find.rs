//! The slot search's queries (`findSlots`, FHIR `$find`): bookable slots in the order
//! `(start_at, doctor_id, id)`, filtered by doctor and by weekday and local time of day in each
//! doctor's own zone, read from the partial indexes of `m20261205_000002_find_slots`.
//!
//! Two plans, chosen here:
//! - **Per doctor** (a listed set of doctors: a specialty's, or the caller's ids): for each
//!   doctor an index range scan of `ix_time_slot_open_doctor` from its position, `LIMIT k`, then
//!   the doctors' rows merged. The scan starts at the first *open* slot at or after the
//!   position: full and closed slots are not in the index, so days a specialty has booked out
//!   cost nothing. On PostgreSQL one statement (`unnest … CROSS JOIN LATERAL`), the inner scans
//!   index-only; the rows of the page are read by id at the end.
//! - **Across every doctor** (no doctor filter, or more than [`PER_DOCTOR_MAX`] doctors): one
//!   scan of `ix_time_slot_open_start`, already in answer order, from the cursor on.
//! - **A specialty** ([`Scope::Specialty`]: no doctor ids, PostgreSQL): one scan of `ix_time_slot_open_specialty`
//!   (`m20261206_000001_slot_specialty`: each slot carries its doctor's specialty), in answer
//!   order from the cursor on; about 8× less work for the database than a descent per doctor.
//!   It returns what the per-doctor plan returns for the specialty's doctors (a test holds the
//!   two to it).
//!
//! Weekday and local-time filters are applied per row in the doctor's zone: on PostgreSQL in
//! the statement (`AT TIME ZONE`), on SQLite (which has no zone data) in Rust with chrono-tz,
//! reading on in batches until enough rows matched. Either way a caller gets only matching rows.

use chrono::{DateTime, Datelike, Timelike, Utc};
use chrono_tz::Tz;
use sea_orm::{ConnectionTrait, DbBackend, EntityTrait, Statement, Value};

use super::{entity::time_slot, Db, StoreError};

/// Most doctors the per-doctor plan takes; a larger set is searched across every doctor.
pub const PER_DOCTOR_MAX: usize = 400;
/// Rows SQLite reads per batch while the Rust-side filters drop rows.
const SQLITE_BATCH: u64 = 256;

/// A doctor to search, with its zone.
#[derive(Clone, Debug)]
pub struct DoctorZone {
    /// The doctor.
    pub id: i64,
    /// Its zone as stored (what PostgreSQL reads).
    pub timezone: String,
    /// The same zone, parsed.
    pub tz: Tz,
}

/// A doctor and where its own search starts: after this `(start_at, id)` of one of its slots,
/// or (`None`) at the window's start.
pub type DoctorStart = (DoctorZone, Option<(DateTime<Utc>, i64)>);

/// A position in the answer order: `(start_at, doctor_id, id)` of a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    /// The slot's start.
    pub start_at: DateTime<Utc>,
    /// Its doctor.
    pub doctor_id: i64,
    /// The slot.
    pub slot_id: i64,
}

impl Position {
    /// Where `slot` stands.
    pub fn of(slot: &time_slot::Model) -> Self {
        Self { start_at: slot.start_at, doctor_id: slot.doctor_id, slot_id: slot.id }
    }
}

/// What every matching slot satisfies besides its doctor.
#[derive(Clone, Debug)]
pub struct Criteria {
    /// Earliest start (inclusive); already past "now".
    pub from: DateTime<Utc>,
    /// First start after the window (exclusive).
    pub to: DateTime<Utc>,
    /// Days of the week, in the doctor's zone (`None`: any).
    pub weekdays: Option<Vec<chrono::Weekday>>,
    /// Local start time at or after this minute of the day.
    pub earliest_minute: Option<u32>,
    /// Local start time before this minute of the day (up to 1440).
    pub latest_minute: Option<u32>,
}

impl Criteria {
    /// Whether `start` passes the weekday and local-time filters in `tz`.
    pub fn local_match(&self, start: DateTime<Utc>, tz: Tz) -> bool {
        if self.weekdays.is_none() && self.earliest_minute.is_none() && self.latest_minute.is_none() {
            return true;
        }
        let local = start.with_timezone(&tz);
        let seconds = local.num_seconds_from_midnight();
        self.weekdays.as_ref().is_none_or(|days| days.contains(&local.weekday()))
            && self.earliest_minute.is_none_or(|m| seconds >= m * 60)
            && self.latest_minute.is_none_or(|m| seconds < m * 60)
    }

    /// ISO weekday numbers (Monday 1), as PostgreSQL's `isodow`.
    fn iso_days(&self) -> Option<Vec<i32>> {
        self.weekdays.as_ref().map(|days| days.iter().map(|d| d.number_from_monday() as i32).collect())
    }
}

/// The doctors whose specialty is `specialty` (case-insensitive), by id; with `ids`, only those
/// among them (`ids` alone: those that exist).
pub async fn doctors(
    conn: &impl ConnectionTrait,
    specialty: Option<&str>,
    ids: Option<&[i64]>,
) -> Result<Vec<DoctorZone>, StoreError> {
    use super::entity::doctor;
    use sea_orm::{ColumnTrait, QueryFilter, QueryOrder};
    let mut q = doctor::Entity::find().order_by_asc(doctor::Column::Id);
    if let Some(ids) = ids {
        q = q.filter(doctor::Column::Id.is_in(ids.iter().copied()));
    }
    if let Some(s) = specialty {
        // PostgreSQL folds case in the index's expression; the comparison below is the rule
        // on both databases (SQLite's lower() folds ASCII only).
        let folded = s.to_lowercase();
        q = if conn.get_database_backend() == DbBackend::Postgres {
            q.filter(sea_orm::sea_query::Expr::cust_with_values("lower(specialty) = lower($1)", [folded]))
        } else {
            q.filter(doctor::Column::Specialty.is_not_null())
        };
    }
    let folded = specialty.map(str::to_lowercase);
    let mut out = Vec::new();
    for d in q.all(conn).await? {
        if let Some(f) = &folded {
            if d.specialty.as_deref().map(str::to_lowercase).as_deref() != Some(f.as_str()) {
                continue;
            }
        }
        let tz = crate::model::parse_timezone(&d.timezone)
            .map_err(|m| StoreError::Inconsistent(format!("doctor {}: {m}", d.id)))?;
        out.push(DoctorZone { id: d.id, timezone: d.timezone, tz });
    }
    Ok(out)
}

/// Whose slots a page is read from.
#[derive(Clone, Copy, Debug)]
pub enum Scope<'a> {
    /// Every doctor's.
    Everyone,
    /// These doctors' (a specialty's on SQLite, or the caller's ids).
    Doctors(&'a [DoctorZone]),
    /// One specialty's, from its own index.
    Specialty(IndexedSpecialty<'a>),
}

/// A specialty whose slots have an index of their own (PostgreSQL), so that its search needs no
/// list of its doctors; made only where that index exists.
#[derive(Clone, Copy, Debug)]
pub struct IndexedSpecialty<'a>(&'a str);

impl<'a> IndexedSpecialty<'a> {
    /// The specialty, where `db` has its index (`None` on SQLite: list its doctors instead).
    pub fn on(db: &Db, specialty: &'a str) -> Option<Self> {
        (db.backend() == DbBackend::Postgres).then_some(Self(specialty))
    }
}

/// Up to `limit` matching slots after `after`, in answer order, of `scope`.
pub async fn merged(
    db: &Db,
    criteria: &Criteria,
    scope: Scope<'_>,
    after: Option<Position>,
    limit: u64,
) -> Result<Vec<time_slot::Model>, StoreError> {
    match scope {
        Scope::Doctors([]) => Ok(Vec::new()),
        Scope::Doctors(list) if list.len() <= PER_DOCTOR_MAX => {
            // Each doctor's own position after the cursor: the rest of the cursor's start for
            // doctors after its doctor, strictly later starts for those before it.
            let starts: Vec<DoctorStart> = list
                .iter()
                .map(|d| {
                    let pos = after.map(|p| match d.id.cmp(&p.doctor_id) {
                        std::cmp::Ordering::Less => (p.start_at, i64::MAX),
                        std::cmp::Ordering::Equal => (p.start_at, p.slot_id),
                        std::cmp::Ordering::Greater => (p.start_at, 0),
                    });
                    (d.clone(), pos)
                })
                .collect();
            per_doctor(db, criteria, &starts, limit, Some(limit)).await
        }
        _ => across(db, criteria, scope, after, limit).await,
    }
}

/// For each doctor, its first `per_doctor` matching slots after its own position (`(start,
/// id)`, exclusive), all of them merged in answer order, at most `limit` in all.
pub async fn per_doctor(
    db: &Db,
    criteria: &Criteria,
    doctors: &[DoctorStart],
    per_doctor: u64,
    limit: Option<u64>,
) -> Result<Vec<time_slot::Model>, StoreError> {
    if doctors.is_empty() || per_doctor == 0 {
        return Ok(Vec::new());
    }
    if db.backend() == DbBackend::Postgres {
        return per_doctor_pg(db, criteria, doctors, per_doctor, limit).await;
    }
    let mut all = Vec::new();
    for (doctor, after) in doctors {
        let mut pos = *after;
        let mut found = 0;
        loop {
            let mut sql = String::from(
                "SELECT * FROM time_slot WHERE doctor_id = ? AND closed_at IS NULL AND booked_count < capacity \
                 AND start_at >= ? AND start_at < ?",
            );
            let mut values: Vec<Value> = vec![doctor.id.into(), criteria.from.into(), criteria.to.into()];
            if let Some((start, id)) = pos {
                sql.push_str(" AND (start_at > ? OR (start_at = ? AND id > ?))");
                values.extend([start.into(), start.into(), id.into()]);
            }
            sql.push_str(" ORDER BY start_at, id LIMIT ?");
            values.push(SQLITE_BATCH.into());
            let rows = sqlite_rows(db, sql, values).await?;
            let done = (rows.len() as u64) < SQLITE_BATCH;
            if let Some(last) = rows.last() {
                pos = Some((last.start_at, last.id));
            }
            for row in rows {
                if found < per_doctor && criteria.local_match(row.start_at, doctor.tz) {
                    found += 1;
                    all.push(row);
                }
            }
            if done || found >= per_doctor {
                break;
            }
        }
    }
    all.sort_unstable_by_key(Position::of);
    if let Some(limit) = limit {
        all.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    }
    Ok(all)
}

/// The PostgreSQL statement of [`per_doctor`].
async fn per_doctor_pg(
    db: &Db,
    criteria: &Criteria,
    doctors: &[DoctorStart],
    per_doctor: u64,
    limit: Option<u64>,
) -> Result<Vec<time_slot::Model>, StoreError> {
    // The inner scans read (start_at, id) from the index alone; only the page's rows are read
    // from the table, by id. GREATEST ignores a NULL position.
    const SQL: &str = concat!(
        "WITH c AS (SELECT t.start_at, d.id AS doctor_id, t.id \
           FROM unnest($1::bigint[], $2::text[], $3::timestamptz[], $4::bigint[]) AS d(id, tz, after_start, after_id) \
           CROSS JOIN LATERAL (SELECT s.start_at, s.id FROM time_slot s \
             WHERE s.open AND s.doctor_id = d.id \
               AND s.start_at >= GREATEST($5::timestamptz, d.after_start) AND s.start_at < $6 \
               AND (d.after_start IS NULL OR (s.start_at, s.id) > (d.after_start, d.after_id)) \
               AND ($7::int[] IS NULL OR extract(isodow FROM s.start_at AT TIME ZONE d.tz)::int = ANY($7)) \
               AND ($8::int IS NULL OR extract(epoch FROM (s.start_at AT TIME ZONE d.tz)::time) >= $8 * 60) \
               AND ($9::int IS NULL OR extract(epoch FROM (s.start_at AT TIME ZONE d.tz)::time) < $9 * 60) \
             ORDER BY s.start_at, s.id LIMIT $10) AS t \
           ORDER BY 1, 2, 3 LIMIT $11) \
         SELECT ",
        slot_columns!("s"),
        " FROM c JOIN time_slot s ON s.id = c.id ORDER BY c.start_at, c.doctor_id, c.id"
    );
    let to_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let query = sqlx::query(SQL)
        .bind(doctors.iter().map(|(d, _)| d.id).collect::<Vec<_>>())
        .bind(doctors.iter().map(|(d, _)| d.timezone.clone()).collect::<Vec<_>>())
        .bind(doctors.iter().map(|(_, p)| p.map(|(s, _)| s)).collect::<Vec<_>>())
        .bind(doctors.iter().map(|(_, p)| p.map(|(_, id)| id)).collect::<Vec<_>>())
        .bind(criteria.from)
        .bind(criteria.to)
        .bind(criteria.iso_days())
        .bind(criteria.earliest_minute.map(|m| m as i32))
        .bind(criteria.latest_minute.map(|m| m as i32))
        .bind(to_i64(per_doctor))
        .bind(limit.map(to_i64));
    let rows = db.pg_fetch_pooled("SELECT", query).await?;
    let zones: std::collections::HashMap<i64, Tz> = doctors.iter().map(|(d, _)| (d.id, d.tz)).collect();
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        let slot = super::rows::slot_at(row, 0)?;
        // chrono-tz has the last word, as on SQLite (the two zone databases may differ).
        if zones.get(&slot.doctor_id).is_some_and(|tz| criteria.local_match(slot.start_at, *tz)) {
            out.push(slot);
        }
    }
    Ok(out)
}

/// Across every doctor (or a large listed set), in answer order from the cursor on.
async fn across(
    db: &Db,
    criteria: &Criteria,
    scope: Scope<'_>,
    after: Option<Position>,
    limit: u64,
) -> Result<Vec<time_slot::Model>, StoreError> {
    let doctors = match scope {
        Scope::Doctors(list) => Some(list),
        Scope::Everyone | Scope::Specialty(_) => None,
    };
    // Before any real position: doctor and slot ids are positive.
    let after = after.unwrap_or(Position { start_at: criteria.from, doctor_id: 0, slot_id: 0 });
    if db.backend() == DbBackend::Postgres {
        // The zone comes from a scalar subquery, not a join: a join lets the generic plan hash
        // the doctors, read the whole window and sort it (1.5 s on the benchmark data set);
        // this way the only plan is the index read in answer order, stopping at the limit.
        // The index is read alone; the page's rows are read by id at the end.
        // One text per index: a statement serving both would get one generic plan for both.
        macro_rules! across_sql {
            ($which:literal) => {
                concat!(
                    "WITH c AS (SELECT s.start_at, s.doctor_id, s.id, z.tz FROM time_slot s \
                       CROSS JOIN LATERAL (SELECT (SELECT d.timezone FROM doctor d WHERE d.id = s.doctor_id) AS tz) AS z \
                       WHERE s.open AND s.start_at >= $1 AND s.start_at < $2 \
                         AND (s.start_at, s.doctor_id, s.id) > ($3, $4, $5) \
                         AND ($6::int[] IS NULL OR extract(isodow FROM s.start_at AT TIME ZONE z.tz)::int = ANY($6)) \
                         AND ($7::int IS NULL OR extract(epoch FROM (s.start_at AT TIME ZONE z.tz)::time) >= $7 * 60) \
                         AND ($8::int IS NULL OR extract(epoch FROM (s.start_at AT TIME ZONE z.tz)::time) < $8 * 60) ",
                    $which,
                    " ORDER BY s.start_at, s.doctor_id, s.id LIMIT $9) \
                     SELECT ",
                    slot_columns!("s"),
                    ", c.tz FROM c JOIN time_slot s ON s.id = c.id ORDER BY c.start_at, c.doctor_id, c.id"
                )
            };
        }
        const BY_DOCTORS: &str = across_sql!("AND ($10::bigint[] IS NULL OR s.doctor_id = ANY($10))");
        const BY_SPECIALTY: &str = across_sql!("AND s.specialty = lower($10)");
        let sql = if let Scope::Specialty(_) = scope { BY_SPECIALTY } else { BY_DOCTORS };
        let query = sqlx::query(sql)
            .bind(criteria.from)
            .bind(criteria.to)
            .bind(after.start_at)
            .bind(after.doctor_id)
            .bind(after.slot_id)
            .bind(criteria.iso_days())
            .bind(criteria.earliest_minute.map(|m| m as i32))
            .bind(criteria.latest_minute.map(|m| m as i32))
            .bind(i64::try_from(limit).unwrap_or(i64::MAX));
        let query = match scope {
            Scope::Specialty(IndexedSpecialty(specialty)) => query.bind(specialty.to_owned()),
            Scope::Everyone | Scope::Doctors(_) => {
                query.bind(doctors.map(|ds| ds.iter().map(|d| d.id).collect::<Vec<_>>()))
            }
        };
        let rows = db.pg_fetch_pooled("SELECT", query).await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            let slot = super::rows::slot_at(row, 0)?;
            let zone: String = sqlx::Row::try_get(row, super::rows::SLOT_WIDTH).map_err(super::rows::decode_error)?;
            let tz = crate::model::parse_timezone(&zone)
                .map_err(|m| StoreError::Inconsistent(format!("doctor {}: {m}", slot.doctor_id)))?;
            if criteria.local_match(slot.start_at, tz) {
                out.push(slot);
            }
        }
        return Ok(out);
    }
    // SQLite: zones in Rust, from the doctors' own rows.
    let zones: std::collections::HashMap<i64, Tz> = match doctors {
        Some(list) => list.iter().map(|d| (d.id, d.tz)).collect(),
        None => self::doctors(db.conn(), None, None).await?.into_iter().map(|d| (d.id, d.tz)).collect(),
    };
    let in_list = doctors.map(|list| {
        let ids: Vec<String> = list.iter().map(|d| d.id.to_string()).collect();
        format!(" AND doctor_id IN ({})", ids.join(","))
    });
    let mut pos = after;
    let mut out = Vec::new();
    loop {
        let sql = format!(
            "SELECT * FROM time_slot WHERE closed_at IS NULL AND booked_count < capacity \
             AND start_at >= ? AND start_at < ? \
             AND (start_at > ? OR (start_at = ? AND (doctor_id > ? OR (doctor_id = ? AND id > ?)))){} \
             ORDER BY start_at, doctor_id, id LIMIT ?",
            in_list.as_deref().unwrap_or("")
        );
        let values: Vec<Value> = vec![
            criteria.from.into(),
            criteria.to.into(),
            pos.start_at.into(),
            pos.start_at.into(),
            pos.doctor_id.into(),
            pos.doctor_id.into(),
            pos.slot_id.into(),
            SQLITE_BATCH.into(),
        ];
        let rows = sqlite_rows(db, sql, values).await?;
        let done = (rows.len() as u64) < SQLITE_BATCH;
        if let Some(last) = rows.last() {
            pos = Position::of(last);
        }
        for row in rows {
            let matches = zones.get(&row.doctor_id).is_some_and(|tz| criteria.local_match(row.start_at, *tz));
            if matches && (out.len() as u64) < limit {
                out.push(row);
            }
        }
        if done || out.len() as u64 >= limit {
            return Ok(out);
        }
    }
}

/// Runs a SQLite `SELECT * FROM time_slot …`.
async fn sqlite_rows(db: &Db, sql: String, values: Vec<Value>) -> Result<Vec<time_slot::Model>, StoreError> {
    Ok(time_slot::Entity::find()
        .from_raw_sql(Statement::from_sql_and_values(DbBackend::Sqlite, sql, values))
        .all(db.conn())
        .await?)
}
