//! Queries of the `patient_message` queue: what the relay records, and how workers claim,
//! lease and settle messages.
//!
//! Timestamps are always bound from the service's clock, never taken from the database's, so
//! comparisons mean the same on both databases (SQLite compares the stored RFC 3339 text).

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DbBackend, FromQueryResult, Statement, Value};

use super::{entity::patient_message, Db, StoreError};

/// Rows per INSERT statement (12 values each: well under both databases' parameter limits).
const INSERT_CHUNK: usize = 500;

/// An appointment an event is about, with what its messages need: the doctor of its first slot,
/// the patient's contact details, and the appointment it was rescheduled from, if any.
#[derive(Clone, Debug, PartialEq, Eq, FromQueryResult)]
pub struct EventSubject {
    /// The appointment.
    pub id: i64,
    /// Its patient.
    pub patient_id: i64,
    /// Its status now (a later change may have committed since the event).
    pub status: String,
    /// Its start.
    pub start_at: DateTime<Utc>,
    /// Its end.
    pub end_at: DateTime<Utc>,
    /// Until when a hold keeps its seat.
    pub expires_at: Option<DateTime<Utc>>,
    /// Who cancelled it.
    pub cancelled_by: Option<String>,
    /// The appointment it replaced.
    pub rescheduled_from: Option<i64>,
    /// Its doctor's name.
    pub doctor_name: String,
    /// Its doctor's time zone.
    pub doctor_timezone: String,
    /// The patient's email, if on file.
    pub email: Option<String>,
    /// The patient's phone, if on file.
    pub phone: Option<String>,
    /// The patient's locale, if on file.
    pub locale: Option<String>,
    /// Start of the appointment it replaced.
    pub prev_start_at: Option<DateTime<Utc>>,
    /// End of the appointment it replaced.
    pub prev_end_at: Option<DateTime<Utc>>,
    /// Who moved it (`cancelled_by` of the appointment it replaced).
    pub prev_cancelled_by: Option<String>,
    /// The doctor of the appointment it replaced.
    pub prev_doctor_name: Option<String>,
    /// That doctor's time zone.
    pub prev_doctor_timezone: Option<String>,
}

/// The appointments among `ids` whose patient has an email or a phone on file, with what their
/// messages need.
pub async fn event_subjects(conn: &impl ConnectionTrait, ids: &[i64]) -> Result<Vec<EventSubject>, StoreError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let backend = conn.get_database_backend();
    // The details that serve the appointment: those its partner keeps for the patient, else
    // the patient's own (see `crate::notify::contact`). The partner is the one that made the
    // appointment, or the one that made the appointment it was rescheduled from.
    let booker = "CASE WHEN a.booked_by LIKE 'partner:%' THEN a.booked_by \
                  WHEN a.first_booked_by LIKE 'partner:%' THEN a.first_booked_by ELSE '' END";
    let serving = |c: &str| {
        format!(
            "{c}.patient_id = a.patient_id AND {c}.booker IN ('', {booker}) \
             AND ({c}.email IS NOT NULL OR {c}.phone IS NOT NULL) ORDER BY {c}.booker DESC LIMIT 1"
        )
    };
    // On PostgreSQL each contact is looked up by its key (a lateral subquery: joined plainly,
    // the planner merge-joined the whole contact table, in parallel workers, for 200 events:
    // 29 ms a relay pass under load, 2 ms this way). SQLite knows no LATERAL: it finds the
    // serving row's key by a correlated subquery, then the row by that key.
    let contacts = if backend == DbBackend::Postgres {
        format!(
            "JOIN LATERAL (SELECT c.email, c.phone, c.locale FROM patient_contact c WHERE {}) c ON true",
            serving("c")
        )
    } else {
        format!(
            "JOIN patient_contact c ON c.patient_id = a.patient_id \
               AND c.booker = (SELECT s.booker FROM patient_contact s WHERE {})",
            serving("s")
        )
    };
    // First which of them anyone is to be told of, by two key lookups each. The full query's six
    // joins cost PostgreSQL 1.3 ms to plan and 2-3 ms a relay pass to run under load (90 events,
    // pg_stat_statements), whether it found anyone or not; most bookings leave no contact.
    let of_ids = |select: String, ids: &[i64]| {
        let sql = format!("{select} WHERE a.id IN ({})", placeholders(1, ids.len()));
        Statement::from_sql_and_values(backend, sql, ids.iter().map(|&id| Value::from(id)).collect::<Vec<_>>())
    };
    let rows = conn.query_all_raw(of_ids(format!("SELECT a.id FROM appointment a {contacts}"), ids)).await?;
    let told = rows.iter().map(|r| r.try_get::<i64>("", "id")).collect::<Result<Vec<_>, _>>()?;
    if told.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT a.id, a.patient_id, a.status, a.start_at, a.end_at, a.expires_at, a.cancelled_by, \
           a.rescheduled_from, d.name AS doctor_name, d.timezone AS doctor_timezone, \
           c.email, c.phone, c.locale, \
           p.start_at AS prev_start_at, p.end_at AS prev_end_at, p.cancelled_by AS prev_cancelled_by, \
           pd.name AS prev_doctor_name, pd.timezone AS prev_doctor_timezone \
         FROM appointment a \
         JOIN time_slot s ON s.id = a.slot_id \
         JOIN doctor d ON d.id = s.doctor_id \
         {contacts} \
         LEFT JOIN appointment p ON p.id = a.rescheduled_from \
         LEFT JOIN time_slot ps ON ps.id = p.slot_id \
         LEFT JOIN doctor pd ON pd.id = ps.doctor_id"
    );
    Ok(EventSubject::find_by_statement(of_ids(sql, &told)).all(conn).await?)
}

/// A message to record.
#[derive(Clone, Debug)]
pub struct NewMessage {
    /// The outbox row of the event.
    pub outbox_id: i64,
    /// `EVENT` or `REMINDER`.
    pub purpose: &'static str,
    /// The event's word.
    pub event: &'static str,
    /// The appointment.
    pub appointment_id: i64,
    /// The patient.
    pub patient_id: i64,
    /// `EMAIL` or `SMS`.
    pub channel: &'static str,
    /// The address or number.
    pub recipient: String,
    /// The patient's locale.
    pub locale: Option<String>,
    /// What rendering needs (JSON).
    pub facts: String,
    /// When its first attempt is due.
    pub due_at: DateTime<Utc>,
    /// Start of its delivery lag.
    pub committed_at: DateTime<Utc>,
    /// The `traceparent` of the change that called for it (its send joins that trace).
    pub trace_context: Option<String>,
}

/// Inserts `messages`, skipping any that is already recorded (the same outbox row and channel,
/// or a second reminder of one appointment and channel). Returns how many were new.
pub async fn record(
    conn: &impl ConnectionTrait,
    messages: &[NewMessage],
    now: DateTime<Utc>,
) -> Result<u64, StoreError> {
    let mut inserted = 0;
    for chunk in messages.chunks(INSERT_CHUNK) {
        let statement = insert(conn.get_database_backend(), chunk, now, None);
        inserted += conn.execute_raw(statement).await?.rows_affected();
    }
    Ok(inserted)
}

/// [`record`], each new message already claimed under `lease` (its first attempt counted, due
/// again when the lease ends) for this instance's worker, which is handed the rows returned.
pub async fn record_leased(
    conn: &impl ConnectionTrait,
    messages: &[NewMessage],
    now: DateTime<Utc>,
    lease: DateTime<Utc>,
) -> Result<Vec<patient_message::Model>, StoreError> {
    let mut inserted = Vec::with_capacity(messages.len());
    for chunk in messages.chunks(INSERT_CHUNK) {
        let statement = insert(conn.get_database_backend(), chunk, now, Some(lease));
        inserted.extend(patient_message::Model::find_by_statement(statement).all(conn).await?);
    }
    Ok(inserted)
}

/// The `INSERT` of [`record`] and [`record_leased`] for one chunk.
fn insert(backend: DbBackend, chunk: &[NewMessage], now: DateTime<Utc>, lease: Option<DateTime<Utc>>) -> Statement {
    let mut values: Vec<Value> = Vec::with_capacity(chunk.len() * 13 + 1);
    let mut bind = |value: Value| {
        values.push(value);
        format!("${}", values.len())
    };
    // A leased row is due when its lease ends, like a claimed one, with its first attempt counted.
    let (leased, attempts, returning) = match lease {
        Some(lease) => (bind(lease.into()), 1, " RETURNING *"),
        None => ("NULL".to_owned(), 0, ""),
    };
    let rows: Vec<String> = chunk
        .iter()
        .map(|m| {
            let due = if lease.is_some() { leased.clone() } else { bind(m.due_at.into()) };
            let fields = [
                bind(m.outbox_id.into()),
                bind(m.purpose.into()),
                bind(m.event.into()),
                bind(m.appointment_id.into()),
                bind(m.patient_id.into()),
                bind(m.channel.into()),
                bind(m.recipient.clone().into()),
                bind(m.locale.clone().into()),
                bind(m.facts.clone().into()),
                due,
                bind(m.committed_at.into()),
                bind(now.into()),
                bind(m.trace_context.clone().into()),
            ];
            format!("({}, 'PENDING', {attempts}, {leased})", fields.join(", "))
        })
        .collect();
    let sql = format!(
        "INSERT INTO patient_message (outbox_id, purpose, event, appointment_id, patient_id, channel, \
           recipient, locale, facts, next_attempt_at, committed_at, created_at, trace_context, status, attempts, \
           locked_until) \
         VALUES {} ON CONFLICT DO NOTHING{returning}",
        rows.join(", ")
    );
    Statement::from_sql_and_values(backend, sql, values)
}

/// Claims up to `limit` pending messages due at `now`: each gets the lease `lease_until`
/// (which is also when it becomes due again, should this attempt never report) and one more
/// attempt counted. On PostgreSQL the candidates are locked `SKIP LOCKED`, so workers of
/// several instances claim disjoint messages; SQLite runs one writer at a time. The order is
/// the due index's own (`next_attempt_at` alone): a tie-break on `id` made every claim read and
/// sort the whole backlog, 8 ms a claim at 40,000 due.
pub async fn claim(
    db: &Db,
    limit: usize,
    now: DateTime<Utc>,
    lease_until: DateTime<Utc>,
) -> Result<Vec<patient_message::Model>, StoreError> {
    let backend = db.backend();
    let due = "SELECT id FROM patient_message WHERE status = 'PENDING' AND next_attempt_at <= $2 \
               ORDER BY next_attempt_at LIMIT $3";
    let ids = super::claimed_ids(backend, due);
    let sql = format!(
        "UPDATE patient_message SET next_attempt_at = $1, locked_until = $1, attempts = attempts + 1 \
         WHERE id {ids} RETURNING *"
    );
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let statement = Statement::from_sql_and_values(backend, sql, [lease_until.into(), now.into(), limit.into()]);
    let mut rows = patient_message::Model::find_by_statement(statement).all(db.conn()).await?;
    rows.sort_unstable_by_key(|m| (m.next_attempt_at, m.id));
    Ok(rows)
}

/// How an attempt ended, to record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settle {
    /// Taken by the server or gateway at `at`.
    Sent {
        /// When.
        at: DateTime<Utc>,
    },
    /// Failed; try again at `at`.
    Retry {
        /// The next attempt.
        at: DateTime<Utc>,
        /// Why it failed.
        error: String,
    },
    /// Given up on.
    Failed {
        /// Why the last attempt failed.
        error: String,
    },
    /// No longer applies (a reminder of an appointment that moved or was cancelled).
    Skipped {
        /// Why.
        reason: String,
    },
    /// Not attempted after all (the worker is stopping): due again at `at`, the attempt not
    /// counted.
    Released {
        /// When it is due again.
        at: DateTime<Utc>,
    },
}

/// Records the outcome of attempts, each under the lease its message was claimed (or recorded)
/// with, for the messages that still carry that lease (one whose lease ran out and that another
/// worker claimed again is left to that worker). Messages sent under one lease are settled in
/// one statement.
pub async fn settle(conn: &impl ConnectionTrait, outcomes: &[(i64, DateTime<Utc>, Settle)]) -> Result<(), StoreError> {
    let backend = conn.get_database_backend();
    let mut sent: Vec<(DateTime<Utc>, i64, DateTime<Utc>)> = outcomes
        .iter()
        .filter_map(|(id, lease, s)| match s {
            Settle::Sent { at } => Some((*lease, *id, *at)),
            _ => None,
        })
        .collect();
    sent.sort_unstable();
    for batch in sent.chunk_by(|a, b| a.0 == b.0) {
        let lease = batch[0].0;
        let Some(at) = batch.iter().map(|(_, _, at)| *at).max() else { continue };
        // One `sent_at` for the batch (the latest): the difference is the batch's duration.
        let sql = format!(
            "UPDATE patient_message SET status = 'SENT', sent_at = $1, locked_until = NULL, last_error = NULL \
             WHERE locked_until = $2 AND id IN ({})",
            placeholders(3, batch.len())
        );
        let mut values: Vec<Value> = vec![at.into(), lease.into()];
        values.extend(batch.iter().map(|(_, id, _)| Value::from(*id)));
        conn.execute_raw(Statement::from_sql_and_values(backend, sql, values)).await?;
    }
    for (id, lease, outcome) in outcomes {
        let (sql, mut values): (&str, Vec<Value>) = match outcome {
            Settle::Sent { .. } => continue,
            Settle::Retry { at, error } => (
                "UPDATE patient_message SET next_attempt_at = $3, locked_until = NULL, last_error = $4 \
                 WHERE id = $1 AND locked_until = $2",
                vec![(*at).into(), truncate(error).into()],
            ),
            Settle::Failed { error } => (
                "UPDATE patient_message SET status = 'FAILED', locked_until = NULL, last_error = $3 \
                 WHERE id = $1 AND locked_until = $2",
                vec![truncate(error).into()],
            ),
            Settle::Skipped { reason } => (
                "UPDATE patient_message SET status = 'SKIPPED', locked_until = NULL, last_error = $3 \
                 WHERE id = $1 AND locked_until = $2",
                vec![truncate(reason).into()],
            ),
            Settle::Released { at } => (
                "UPDATE patient_message SET next_attempt_at = $3, locked_until = NULL, attempts = attempts - 1 \
                 WHERE id = $1 AND locked_until = $2",
                vec![(*at).into()],
            ),
        };
        values.splice(0..0, [Value::from(*id), (*lease).into()]);
        conn.execute_raw(Statement::from_sql_and_values(backend, sql, values)).await?;
    }
    Ok(())
}

/// The queue as a worker sees it at `now`: messages due (pending, not leased) and the time the
/// oldest of them has waited.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct QueueDepth {
    /// Pending messages due now.
    pub due: i64,
    /// How long the oldest due message has been due, in seconds (0 with none).
    pub oldest_due_secs: f64,
}

/// [`QueueDepth`] at `now` (one indexed statement).
pub async fn depth(conn: &impl ConnectionTrait, now: DateTime<Utc>) -> Result<QueueDepth, StoreError> {
    #[derive(FromQueryResult)]
    struct Row {
        due: i64,
        oldest: Option<DateTime<Utc>>,
    }
    let backend = conn.get_database_backend();
    let sql = "SELECT COUNT(*) AS due, MIN(next_attempt_at) AS oldest FROM patient_message \
               WHERE status = 'PENDING' AND next_attempt_at <= $1";
    let row = Row::find_by_statement(Statement::from_sql_and_values(backend, sql, [now.into()])).one(conn).await?;
    Ok(row.map_or_else(QueueDepth::default, |r| QueueDepth {
        due: r.due,
        oldest_due_secs: r.oldest.map_or(0.0, |t| (now - t).as_seconds_f64().max(0.0)),
    }))
}

/// Deletes up to `limit` finished messages (sent, given up or skipped) whose last attempt ended
/// before `before`, and returns how many it deleted. A finished message keeps the lease end of
/// its last attempt in `next_attempt_at` (every attempt runs under a claim's lease), so one
/// partial index (`ix_patient_message_finished`) finds them; pending ones, reminders not yet due
/// among them, are never candidates. On PostgreSQL the rows are taken `SKIP LOCKED`, so
/// instances deleting at once take disjoint rows and wait for nobody.
pub async fn delete_finished(
    conn: &impl ConnectionTrait,
    before: DateTime<Utc>,
    limit: u64,
) -> Result<u64, StoreError> {
    let backend = conn.get_database_backend();
    // Predicate and key as the index spells them (see the retention migration).
    let finished = "SELECT id FROM patient_message WHERE status <> 'PENDING' AND next_attempt_at < $1 LIMIT $2";
    let sql = format!("DELETE FROM patient_message WHERE id {}", super::claimed_ids(backend, finished));
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let done = conn.execute_raw(Statement::from_sql_and_values(backend, sql, [before.into(), limit.into()])).await?;
    Ok(done.rows_affected())
}

/// Messages of an appointment, oldest first (for tests and support).
pub async fn of_appointment(
    conn: &impl ConnectionTrait,
    appointment_id: i64,
) -> Result<Vec<patient_message::Model>, StoreError> {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
    Ok(patient_message::Entity::find()
        .filter(patient_message::Column::AppointmentId.eq(appointment_id))
        .order_by_asc(patient_message::Column::Id)
        .all(conn)
        .await?)
}

/// `$from, $from+1, …` (`count` of them).
fn placeholders(from: usize, count: usize) -> String {
    (from..from + count).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ")
}

/// Error texts are kept short: a failing server's whole answer does not belong in every row.
fn truncate(text: &str) -> String {
    text.chars().take(500).collect()
}
