//! Queries of the `appointment` table (and of `appointment_slot`, the further slots of a
//! longer appointment): inserts told apart by constraint, and the conditional status
//! transitions every seat release hangs on.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use migration::{EX_APPOINTMENT_PATIENT_OVERLAP, UQ_APPOINTMENT_CALLER_KEY};
use sea_orm::{
    sea_query::{Asterisk, Expr, ExprTrait, Query},
    ActiveValue::Set,
    ColumnTrait, Condition, ConnectionTrait, DbErr, EntityTrait, FromQueryResult, QueryFilter, QueryOrder,
};

use super::{
    entity::{appointment, appointment_slot, time_slot},
    is_unique_violation, StoreError,
};
use crate::model::{AppointmentStatus, CancelledBy};

/// The statuses that may still be cancelled, rescheduled or closed away (giving their seats
/// back), as stored: the lifecycle table's open ones.
fn open_words() -> Vec<&'static str> {
    AppointmentStatus::words(|r| r.open)
}

/// The statuses the overlap rule counts, as stored.
fn overlapping_words() -> Vec<&'static str> {
    AppointmentStatus::words(|r| r.overlaps)
}

/// An appointment with the doctor of its slot: everything the visibility rule needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppointmentRecord {
    /// The row.
    pub appointment: appointment::Model,
    /// The doctor whose slot it is in.
    pub doctor_id: i64,
}

/// Which appointments a listing selects.
#[derive(Clone, Debug)]
pub enum Filter {
    /// Held by this patient.
    Patient(i64),
    /// In this doctor's slots.
    Doctor(i64),
    /// Created by this caller scope (including those someone else rescheduled since).
    BookedBy(String),
    /// These ids.
    Ids(Vec<i64>),
}

/// The advisory-lock class of "this patient's appointments are being written" (the first
/// key of the two-key form, so other uses of advisory locks keep their own space).
pub const PATIENT_LOCK_CLASS: i32 = 0x0C11_0001;

/// The statement taking [`PATIENT_LOCK_CLASS`] for the patient `$n`, until the transaction ends.
pub fn patient_lock_sql(n: usize) -> String {
    format!("pg_advisory_xact_lock({PATIENT_LOCK_CLASS}, hashint8(${n}))")
}

/// Takes the patient's write lock on PostgreSQL, first in every transaction that makes one of
/// their appointments active (book, hold, confirm, reschedule). The overlap rule is an
/// exclusion constraint, and two transactions inserting overlapping rows for one patient each
/// wait for the other's row: a deadlock PostgreSQL only breaks after `deadlock_timeout`
/// (1 s). Queued on this lock instead, the second sees the first's committed row and is
/// refused at once. No lock is needed on SQLite, whose writes are serialized. Taken before any
/// slot or appointment row, so it adds no lock-order cycle.
pub async fn lock_patient(conn: &impl ConnectionTrait, patient_id: i64) -> Result<(), StoreError> {
    if conn.get_database_backend() != sea_orm::DbBackend::Postgres {
        return Ok(());
    }
    let sql = format!("SELECT {}", patient_lock_sql(1));
    conn.execute_raw(sea_orm::Statement::from_sql_and_values(sea_orm::DbBackend::Postgres, sql, [patient_id.into()]))
        .await?;
    Ok(())
}

/// Appointments matching `filter`, newest first, at most `limit`.
pub async fn list(
    conn: &impl ConnectionTrait,
    filter: Filter,
    limit: u64,
) -> Result<Vec<AppointmentRecord>, StoreError> {
    use appointment::Column as A;
    let mut q = Query::select();
    q.column((appointment::Entity, Asterisk))
        .column((time_slot::Entity, time_slot::Column::DoctorId))
        .from(appointment::Entity)
        .inner_join(
            time_slot::Entity,
            Expr::col((time_slot::Entity, time_slot::Column::Id)).equals((appointment::Entity, A::SlotId)),
        );
    match filter {
        Filter::Patient(p) => q.and_where(Expr::col((appointment::Entity, A::PatientId)).eq(p)),
        Filter::Doctor(d) => q.and_where(Expr::col((time_slot::Entity, time_slot::Column::DoctorId)).eq(d)),
        Filter::BookedBy(s) => q.cond_where(
            Condition::any()
                .add(Expr::col((appointment::Entity, A::BookedBy)).eq(s.clone()))
                .add(Expr::col((appointment::Entity, A::FirstBookedBy)).eq(s)),
        ),
        Filter::Ids(ids) => q.and_where(Expr::col((appointment::Entity, A::Id)).is_in(ids)),
    };
    q.order_by((appointment::Entity, A::CreatedAt), sea_orm::Order::Desc)
        .order_by((appointment::Entity, A::Id), sea_orm::Order::Desc)
        .limit(limit);
    let rows = conn.query_all(&q).await?;
    rows.iter()
        .map(|row| {
            Ok(AppointmentRecord {
                appointment: appointment::Model::from_query_result(row, "")?,
                doctor_id: row.try_get("", "doctor_id")?,
            })
        })
        .collect::<Result<_, DbErr>>()
        .map_err(StoreError::from)
}

/// One appointment with its slot's doctor.
pub async fn find_record(conn: &impl ConnectionTrait, id: i64) -> Result<Option<AppointmentRecord>, StoreError> {
    Ok(list(conn, Filter::Ids(vec![id]), 1).await?.pop())
}

/// The appointment a caller made with an idempotency key, if any.
pub async fn find_by_key(
    conn: &impl ConnectionTrait,
    booked_by: &str,
    key: &str,
) -> Result<Option<appointment::Model>, StoreError> {
    Ok(appointment::Entity::find()
        .filter(appointment::Column::BookedBy.eq(booked_by))
        .filter(appointment::Column::IdempotencyKey.eq(key))
        .one(conn)
        .await?)
}

/// Appointments by id (for the DataLoader), unordered.
pub async fn find_many(conn: &impl ConnectionTrait, ids: &[i64]) -> Result<Vec<appointment::Model>, StoreError> {
    Ok(appointment::Entity::find()
        .filter(appointment::Column::Id.is_in(ids.iter().copied()))
        .order_by_asc(appointment::Column::Id)
        .all(conn)
        .await?)
}

/// An appointment to insert: who, for whom, and in what state; its slots come separately.
#[derive(Clone, Debug)]
pub struct NewAppointment<'a> {
    /// `Held` or `Booked`.
    pub status: AppointmentStatus,
    /// The patient.
    pub patient_id: i64,
    /// The scope of the caller whose request makes it.
    pub booked_by: &'a str,
    /// The caller's idempotency key.
    pub idempotency_key: &'a str,
    /// Fingerprint of the request.
    pub request_hash: &'a str,
    /// When it is made.
    pub created_at: DateTime<Utc>,
    /// Until when a hold keeps its seat.
    pub expires_at: Option<DateTime<Utc>>,
    /// The appointment this one replaces (a reschedule).
    pub rescheduled_from: Option<i64>,
    /// Who booked the appointment the reschedule chain started from, when not `booked_by`.
    pub first_booked_by: Option<&'a str>,
}

/// Why an insert was refused by a constraint.
#[derive(Debug, thiserror::Error)]
pub enum InsertError {
    /// The caller's key was used by a concurrent request that committed first.
    #[error("idempotency key taken")]
    KeyTaken,
    /// The patient holds an active appointment overlapping this one in time, perhaps in the
    /// same slot: the caller reads [`conflicts`] to word the refusal.
    #[error("patient holds an overlapping appointment")]
    Overlapping,
    /// Anything else.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<DbErr> for InsertError {
    fn from(err: DbErr) -> Self {
        classify(err)
    }
}

/// Inserts an appointment taking a seat in each of `run` (its slots, by start: the ones whose
/// seats the caller's transaction just took), telling constraint violations apart.
pub async fn insert(
    conn: &impl ConnectionTrait,
    new: &NewAppointment<'_>,
    run: &[time_slot::Model],
) -> Result<appointment::Model, InsertError> {
    let (Some(first), Some(last)) = (run.first(), run.last()) else {
        return Err(StoreError::Inconsistent("an appointment needs at least one slot".into()).into());
    };
    let row = appointment::ActiveModel {
        slot_id: Set(first.id),
        patient_id: Set(new.patient_id),
        status: Set(new.status.as_str().to_owned()),
        booked_by: Set(new.booked_by.to_owned()),
        idempotency_key: Set(new.idempotency_key.to_owned()),
        request_hash: Set(new.request_hash.to_owned()),
        created_at: Set(new.created_at),
        cancelled_at: Set(None),
        start_at: Set(first.start_at),
        end_at: Set(last.end_at),
        slot_count: Set(i32::try_from(run.len()).unwrap_or(i32::MAX)),
        expires_at: Set(new.expires_at),
        cancelled_by: Set(None),
        rescheduled_from: Set(new.rescheduled_from),
        rescheduled_to: Set(None),
        first_booked_by: Set(new.first_booked_by.map(str::to_owned)),
        ..Default::default()
    };
    let inserted = appointment::Entity::insert(row).exec_with_returning(conn).await?;
    if run.len() > 1 {
        let further = run[1..]
            .iter()
            .map(|s| appointment_slot::ActiveModel { appointment_id: Set(inserted.id), slot_id: Set(s.id) });
        appointment_slot::Entity::insert_many(further).exec_without_returning(conn).await.map_err(StoreError::from)?;
    }
    Ok(inserted)
}

/// Tells the constraint violations of an appointment insert apart by constraint name.
pub(crate) fn classify(err: DbErr) -> InsertError {
    if is_unique_violation(&err, UQ_APPOINTMENT_CALLER_KEY, "appointment.idempotency_key") {
        InsertError::KeyTaken
    } else if is_overlap_violation(&err) {
        InsertError::Overlapping
    } else {
        InsertError::Store(err.into())
    }
}

/// Whether `err` is the "no overlapping appointments for one patient" rule: the exclusion
/// constraint on PostgreSQL, the triggers raising its name on SQLite.
pub fn is_overlap_violation(err: &DbErr) -> bool {
    err.to_string().contains(EX_APPOINTMENT_PATIENT_OVERLAP)
}

/// The conditional transition of a cancel (or of the old appointment of a reschedule):
/// `HELD`/`BOOKED` → `CANCELLED`. `None` when it was not active (cancelled already, expired,
/// or a concurrent transition won): only the request that gets the row gives its seats back.
pub async fn mark_cancelled(
    conn: &impl ConnectionTrait,
    id: i64,
    now: DateTime<Utc>,
    by: CancelledBy,
) -> Result<Option<appointment::Model>, StoreError> {
    let mut rows = cancelling(now, by)
        .filter(appointment::Column::Id.eq(id))
        .filter(appointment::Column::Status.is_in(open_words()))
        .exec_with_returning(conn)
        .await?;
    Ok(rows.pop())
}

/// The transition of the appointment a reschedule moves: like [`mark_cancelled`], but a hold
/// that has run out (whether or not the expiry job has seen it) does not move.
pub async fn mark_moved(
    conn: &impl ConnectionTrait,
    id: i64,
    now: DateTime<Utc>,
    by: CancelledBy,
) -> Result<Option<appointment::Model>, StoreError> {
    let mut rows = cancelling(now, by)
        .filter(appointment::Column::Id.eq(id))
        .filter(
            Condition::any().add(appointment::Column::Status.eq(appointment::BOOKED)).add(
                Condition::all()
                    .add(appointment::Column::Status.eq(appointment::HELD))
                    .add(appointment::Column::ExpiresAt.gt(now)),
            ),
        )
        .exec_with_returning(conn)
        .await?;
    Ok(rows.pop())
}

/// Cancels, by [`mark_cancelled`]'s transition, every active appointment that takes a seat in
/// any of `slot_ids` (closing slots); returns those this statement cancelled.
pub async fn cancel_in_slots(
    conn: &impl ConnectionTrait,
    slot_ids: &[i64],
    now: DateTime<Utc>,
    by: CancelledBy,
) -> Result<Vec<appointment::Model>, StoreError> {
    if slot_ids.is_empty() {
        return Ok(Vec::new());
    }
    let further = Query::select()
        .column(appointment_slot::Column::AppointmentId)
        .from(appointment_slot::Entity)
        .and_where(appointment_slot::Column::SlotId.is_in(slot_ids.iter().copied()))
        .to_owned();
    Ok(cancelling(now, by)
        .filter(appointment::Column::Status.is_in(open_words()))
        .filter(
            Condition::any()
                .add(appointment::Column::SlotId.is_in(slot_ids.iter().copied()))
                .add(appointment::Column::Id.in_subquery(further)),
        )
        .exec_with_returning(conn)
        .await?)
}

fn cancelling(now: DateTime<Utc>, by: CancelledBy) -> sea_orm::UpdateMany<appointment::Entity> {
    appointment::Entity::update_many()
        .col_expr(appointment::Column::Status, Expr::value(appointment::CANCELLED))
        .col_expr(appointment::Column::CancelledAt, Expr::value(now))
        .col_expr(appointment::Column::CancelledBy, Expr::value(by.as_str()))
        .col_expr(appointment::Column::ExpiresAt, Expr::value(Option::<DateTime<Utc>>::None))
}

/// The confirm's conditional transition `HELD` → `BOOKED`, only while the hold has not run out
/// (whether or not the expiry job has seen it yet). `None` when it did not apply.
pub async fn mark_confirmed(
    conn: &impl ConnectionTrait,
    id: i64,
    now: DateTime<Utc>,
) -> Result<Option<appointment::Model>, StoreError> {
    let mut rows = appointment::Entity::update_many()
        .col_expr(appointment::Column::Status, Expr::value(appointment::BOOKED))
        .col_expr(appointment::Column::ExpiresAt, Expr::value(Option::<DateTime<Utc>>::None))
        .filter(appointment::Column::Id.eq(id))
        .filter(appointment::Column::Status.eq(appointment::HELD))
        .filter(appointment::Column::ExpiresAt.gt(now))
        .exec_with_returning(conn)
        .await?;
    Ok(rows.pop())
}

/// One of the desk's conditional transitions (`BOOKED` → `ARRIVED` or `NOSHOW`, `ARRIVED` →
/// `FULFILLED`), stamping `arrived_at` or `completed_at` with `now`. `None` when the row was
/// not in `from` (a repeat, another state, or a concurrent transition won). No seat moves.
pub async fn mark_desk(
    conn: &impl ConnectionTrait,
    id: i64,
    from: AppointmentStatus,
    to: AppointmentStatus,
    now: DateTime<Utc>,
) -> Result<Option<appointment::Model>, StoreError> {
    if !from.may_become(to) {
        return Err(StoreError::Inconsistent(format!("{from:?} -> {to:?} is no transition of the lifecycle")));
    }
    let mut update = appointment::Entity::update_many().col_expr(appointment::Column::Status, Expr::value(to.as_str()));
    match to {
        AppointmentStatus::Arrived => update = update.col_expr(appointment::Column::ArrivedAt, Expr::value(now)),
        AppointmentStatus::Fulfilled => update = update.col_expr(appointment::Column::CompletedAt, Expr::value(now)),
        _ => {}
    }
    let mut rows = update
        .filter(appointment::Column::Id.eq(id))
        .filter(appointment::Column::Status.eq(from.as_str()))
        .exec_with_returning(conn)
        .await?;
    Ok(rows.pop())
}

/// The appointments whose first slot is one of the doctor's starting in `[from, to)`, every
/// status but `EXPIRED`, by the slot's start then id: a range of the slots' `(doctor_id,
/// start_at)` index, then each slot's appointments by `ix_appointment_slot`.
pub async fn day_sheet(
    conn: &impl ConnectionTrait,
    doctor_id: i64,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<AppointmentRecord>, StoreError> {
    use appointment::Column as A;
    use time_slot::Column as S;
    let mut q = Query::select();
    q.column((appointment::Entity, Asterisk))
        .column((time_slot::Entity, S::DoctorId))
        .from(time_slot::Entity)
        .inner_join(appointment::Entity, Expr::col((appointment::Entity, A::SlotId)).equals((time_slot::Entity, S::Id)))
        .and_where(Expr::col((time_slot::Entity, S::DoctorId)).eq(doctor_id))
        .and_where(Expr::col((time_slot::Entity, S::StartAt)).gte(from))
        .and_where(Expr::col((time_slot::Entity, S::StartAt)).lt(to))
        .and_where(Expr::col((appointment::Entity, A::Status)).ne(appointment::EXPIRED))
        .order_by((time_slot::Entity, S::StartAt), sea_orm::Order::Asc)
        .order_by((appointment::Entity, A::Id), sea_orm::Order::Asc);
    let rows = conn.query_all(&q).await?;
    rows.iter()
        .map(|row| {
            Ok(AppointmentRecord {
                appointment: appointment::Model::from_query_result(row, "")?,
                doctor_id: row.try_get("", "doctor_id")?,
            })
        })
        .collect::<Result<_, DbErr>>()
        .map_err(StoreError::from)
}

/// How many `NOSHOW` appointments of the patient started at or after `since`: a few entries
/// of `ix_appointment_noshow` (the predicate is written into the text so that both databases
/// can prove the partial index applies).
pub async fn no_show_count(
    conn: &impl ConnectionTrait,
    patient_id: i64,
    since: DateTime<Utc>,
) -> Result<i64, StoreError> {
    let backend = conn.get_database_backend();
    let sql = format!(
        "SELECT count(*) AS n FROM appointment WHERE patient_id = $1 AND status = '{}' AND start_at >= $2",
        appointment::NOSHOW
    );
    let row = conn
        .query_one_raw(sea_orm::Statement::from_sql_and_values(backend, sql, [patient_id.into(), since.into()]))
        .await?
        .ok_or_else(|| StoreError::Inconsistent("count answered no row".into()))?;
    Ok(row.try_get("", "n")?)
}

/// The expiry's conditional transition `HELD` → `EXPIRED` for up to `limit` holds that ran
/// out by `now`, oldest first. On PostgreSQL the candidates are locked `SKIP LOCKED`, so
/// instances expiring at once take disjoint batches and never wait on a confirm or cancel in
/// flight; the transition itself re-checks the status, so a hold is expired at most once.
pub async fn mark_expired(
    conn: &impl ConnectionTrait,
    now: DateTime<Utc>,
    limit: u64,
) -> Result<Vec<appointment::Model>, StoreError> {
    let backend = conn.get_database_backend();
    // The status is written into the text, not bound: a generic plan can use the partial index
    // `ix_appointment_hold_expiry` (`WHERE status = 'HELD'`) only when its predicate is provable
    // from the statement itself; with `status = $1` every pass read the whole table.
    let (held, expired) = (appointment::HELD, appointment::EXPIRED);
    let due =
        format!("SELECT id FROM appointment WHERE status = '{held}' AND expires_at <= $1 ORDER BY expires_at LIMIT $2");
    let ids = super::claimed_ids(backend, &due);
    let sql = format!("UPDATE appointment SET status = '{expired}' WHERE id {ids} AND status = '{held}' RETURNING *");
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let values = [now.into(), limit.into()];
    Ok(appointment::Entity::find()
        .from_raw_sql(sea_orm::Statement::from_sql_and_values(backend, sql, values))
        .all(conn)
        .await?)
}

/// Links an appointment to the one that replaced it.
pub async fn set_rescheduled_to(conn: &impl ConnectionTrait, id: i64, to: i64) -> Result<(), StoreError> {
    appointment::Entity::update_many()
        .col_expr(appointment::Column::RescheduledTo, Expr::value(to))
        .filter(appointment::Column::Id.eq(id))
        .exec(conn)
        .await?;
    Ok(())
}

/// The slots each appointment takes a seat in, by start (its first slot, then the further
/// ones of a longer appointment), for every appointment of `appointments`.
pub async fn slots_of(
    conn: &impl ConnectionTrait,
    appointments: &[appointment::Model],
) -> Result<HashMap<i64, Vec<i64>>, StoreError> {
    let mut slots: HashMap<i64, Vec<i64>> = appointments.iter().map(|a| (a.id, vec![a.slot_id])).collect();
    let longer: Vec<i64> = appointments.iter().filter(|a| a.slot_count > 1).map(|a| a.id).collect();
    for (appointment, slot) in further_slots(conn, &longer).await? {
        slots.entry(appointment).or_default().push(slot);
    }
    Ok(slots)
}

/// The further slots (after the first) of the longer appointments among `appointment_ids`, as
/// (appointment, slot) pairs by start.
pub async fn further_slots(
    conn: &impl ConnectionTrait,
    appointment_ids: &[i64],
) -> Result<Vec<(i64, i64)>, StoreError> {
    if appointment_ids.is_empty() {
        return Ok(Vec::new());
    }
    let rows = appointment_slot::Entity::find()
        .inner_join(time_slot::Entity)
        .filter(appointment_slot::Column::AppointmentId.is_in(appointment_ids.iter().copied()))
        .order_by_asc(time_slot::Column::StartAt)
        .all(conn)
        .await?;
    Ok(rows.into_iter().map(|r| (r.appointment_id, r.slot_id)).collect())
}

/// How a patient's active appointments stand against a run of slots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Conflicts {
    /// One of them takes a seat in one of the run's slots (`ALREADY_BOOKED`).
    pub holds_seat: bool,
    /// One of them overlaps the run's time range (`OVERLAPPING_APPOINTMENT` unless it holds
    /// a seat in the run).
    pub overlaps: bool,
}

/// The patient's appointments the overlap rule counts against the run `slot_ids` spanning `[start, end)`,
/// leaving out `except` (the appointment a reschedule moves). Read only to word a refusal.
pub async fn conflicts(
    conn: &impl ConnectionTrait,
    patient_id: i64,
    (start, end): (DateTime<Utc>, DateTime<Utc>),
    slot_ids: &[i64],
    except: Option<i64>,
) -> Result<Conflicts, StoreError> {
    let mut q = appointment::Entity::find()
        .filter(appointment::Column::PatientId.eq(patient_id))
        .filter(appointment::Column::Status.is_in(overlapping_words()))
        .filter(appointment::Column::StartAt.lt(end))
        .filter(appointment::Column::EndAt.gt(start));
    if let Some(id) = except {
        q = q.filter(appointment::Column::Id.ne(id));
    }
    let overlapping = q.all(conn).await?;
    if overlapping.is_empty() {
        return Ok(Conflicts::default());
    }
    let held = slots_of(conn, &overlapping).await?;
    let holds_seat = held.values().flatten().any(|s| slot_ids.contains(s));
    Ok(Conflicts { holds_seat, overlaps: true })
}

/// What a booking attempt on a slot known to be full still needs, in one indexed read with no
/// transaction and no slot lock: the caller's appointment with this key (on any slot), and
/// how the patient's active appointments stand against the slot.
pub async fn key_or_seat(
    conn: &impl ConnectionTrait,
    booked_by: &str,
    key: &str,
    slot: &time_slot::Model,
    patient_id: i64,
) -> Result<(Option<appointment::Model>, Conflicts), StoreError> {
    let by_key = find_by_key(conn, booked_by, key).await?;
    let conflicts = conflicts(conn, patient_id, (slot.start_at, slot.end_at), &[slot.id], None).await?;
    Ok((by_key, conflicts))
}

/// One lookup of [`key_or_seats_pg`] in a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyOrSeat {
    /// The caller's scope.
    pub booked_by: String,
    /// The caller's idempotency key.
    pub key: String,
    /// The slot.
    pub slot_id: i64,
    /// The patient.
    pub patient_id: i64,
}

/// What [`key_or_seats_pg`] found for one attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyOrSeatFound {
    /// The caller's appointment with the key (on any slot).
    pub by_key: Option<appointment::Model>,
    /// How the patient's active appointments stand against the slot.
    pub conflicts: Conflicts,
    /// The slot as it is now (not locked), if it exists.
    pub slot: Option<time_slot::Model>,
}

/// [`key_or_seat`] plus the slot row for many attempts, in one PostgreSQL statement with one
/// row per attempt (in order): each probe is an index lookup (the overlap probe one of the
/// patient's appointments, through the exclusion constraint's index).
pub async fn key_or_seats_pg(db: &super::Db, lookups: &[KeyOrSeat]) -> Result<Vec<KeyOrSeatFound>, StoreError> {
    use super::rows::{appointment_at, decode_error, slot_at, SLOT_WIDTH};
    use sqlx::Row;
    static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        concat!(
            "SELECT l.i, ",
            slot_columns!("s"),
            ", ",
            appointment_columns!("k"),
            ", c.overlaps, c.holds_seat \
        FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[]) WITH ORDINALITY \
             AS l(booked_by, key, slot_id, patient_id, i) \
        LEFT JOIN time_slot s ON s.id = l.slot_id \
        LEFT JOIN LATERAL (SELECT * FROM appointment a WHERE a.booked_by = l.booked_by \
                           AND a.idempotency_key = l.key) k ON true \
        LEFT JOIN LATERAL (SELECT count(*) > 0 AS overlaps, \
                                  coalesce(bool_or(o.slot_id = l.slot_id OR EXISTS (SELECT 1 FROM appointment_slot x \
                                    WHERE x.appointment_id = o.id AND x.slot_id = l.slot_id)), false) AS holds_seat \
                           FROM appointment o WHERE o.patient_id = l.patient_id AND o.status IN {overlapping} \
                           AND tstzrange(o.start_at, o.end_at) && tstzrange(s.start_at, s.end_at)) c ON true \
        ORDER BY l.i"
        )
        // The same list as the exclusion constraint's predicate, so its index serves the probe.
        .replace("{overlapping}", &AppointmentStatus::sql_list(|r| r.overlaps))
    });
    let query = sqlx::query(SQL.as_str())
        .bind(lookups.iter().map(|l| l.booked_by.as_str()).collect::<Vec<_>>())
        .bind(lookups.iter().map(|l| l.key.as_str()).collect::<Vec<_>>())
        .bind(lookups.iter().map(|l| l.slot_id).collect::<Vec<_>>())
        .bind(lookups.iter().map(|l| l.patient_id).collect::<Vec<_>>());
    let rows = db.pg_fetch_all("SELECT", query).await?;
    if rows.len() != lookups.len() {
        return Err(StoreError::Inconsistent("batched lookup answered out of order".into()));
    }
    let at_key = 1 + SLOT_WIDTH;
    let at_conflicts = at_key + super::rows::APPOINTMENT_WIDTH;
    let mut found = Vec::with_capacity(rows.len());
    for (n, row) in rows.iter().enumerate() {
        let i: i64 = row.try_get(0).map_err(decode_error)?;
        if i != n as i64 + 1 {
            return Err(StoreError::Inconsistent("batched lookup answered out of order".into()));
        }
        let slot = match row.try_get::<Option<i64>, _>(1).map_err(decode_error)? {
            Some(_) => Some(slot_at(row, 1)?),
            None => None,
        };
        let by_key = match row.try_get::<Option<i64>, _>(at_key).map_err(decode_error)? {
            Some(_) => Some(appointment_at(row, at_key)?),
            None => None,
        };
        let conflicts = Conflicts {
            overlaps: row.try_get::<Option<bool>, _>(at_conflicts).map_err(decode_error)?.unwrap_or(false),
            holds_seat: row.try_get::<Option<bool>, _>(at_conflicts + 1).map_err(decode_error)?.unwrap_or(false),
        };
        found.push(KeyOrSeatFound { by_key, conflicts, slot });
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_migrations_lists_are_the_lifecycle_tables() {
        assert_eq!(AppointmentStatus::words(|_| true), migration::APPOINTMENT_STATUSES);
        assert_eq!(overlapping_words(), migration::OVERLAPPING_STATUSES);
    }
}
