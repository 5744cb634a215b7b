//! Queries of the webhook tables: endpoints, the deliveries the relay records, the workers'
//! claims, and the log of attempts.
//!
//! A worker claims due deliveries by pushing their `next_attempt_at` forward by a lease and
//! marking them with its `lease_token`, in one statement (`FOR UPDATE SKIP LOCKED` on
//! PostgreSQL, so workers of several instances take disjoint rows), and commits at once: no
//! transaction stays open while a partner's server is slow. Its outcome is written only while
//! the token is still its own; a worker that stopped without writing one leaves the delivery
//! due again when the lease ends.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use sea_orm::{
    sea_query::{Expr, ExprTrait},
    ActiveModelTrait,
    ActiveValue::Set,
    ColumnTrait, ConnectionTrait, DbBackend, EntityTrait, FromQueryResult, PaginatorTrait, QueryFilter, QueryOrder,
    QuerySelect, Statement, Value,
};

use super::{
    entity::{
        webhook_attempt as attempt,
        webhook_delivery::{self as delivery, FAILED, PENDING, SUCCEEDED},
        webhook_endpoint as endpoint,
    },
    Db, StoreError,
};

/// An endpoint to insert.
#[derive(Clone)]
pub struct NewEndpoint<'a> {
    /// Scope of the caller creating it.
    pub owner: &'a str,
    /// `partner` or `admin`.
    pub owner_role: &'a str,
    /// The checked URL.
    pub url: &'a str,
    /// The stored event filter (`None` = all).
    pub events: Option<String>,
    /// Its secret.
    pub secret: &'a str,
    /// Now.
    pub created_at: DateTime<Utc>,
}

/// Inserts an endpoint and returns it.
pub async fn insert_endpoint(conn: &impl ConnectionTrait, new: NewEndpoint<'_>) -> Result<endpoint::Model, StoreError> {
    let row = endpoint::ActiveModel {
        owner: Set(new.owner.to_owned()),
        owner_role: Set(new.owner_role.to_owned()),
        url: Set(new.url.to_owned()),
        events: Set(new.events),
        secret: Set(new.secret.to_owned()),
        previous_secret: Set(None),
        previous_secret_until: Set(None),
        enabled: Set(true),
        disabled_at: Set(None),
        created_at: Set(new.created_at),
        ..Default::default()
    };
    Ok(row.insert(conn).await?)
}

/// How many endpoints `owner` has.
pub async fn count_endpoints(conn: &impl ConnectionTrait, owner: &str) -> Result<u64, StoreError> {
    Ok(endpoint::Entity::find().filter(endpoint::Column::Owner.eq(owner)).count(conn).await?)
}

/// One endpoint.
pub async fn find_endpoint(conn: &impl ConnectionTrait, id: i64) -> Result<Option<endpoint::Model>, StoreError> {
    Ok(endpoint::Entity::find_by_id(id).one(conn).await?)
}

/// The endpoints of `owner` (every endpoint for `None`), by id.
pub async fn list_endpoints(
    conn: &impl ConnectionTrait,
    owner: Option<&str>,
) -> Result<Vec<endpoint::Model>, StoreError> {
    let mut q = endpoint::Entity::find().order_by_asc(endpoint::Column::Id);
    if let Some(owner) = owner {
        q = q.filter(endpoint::Column::Owner.eq(owner));
    }
    Ok(q.all(conn).await?)
}

/// The endpoints that still receive events.
pub async fn enabled_endpoints(conn: &impl ConnectionTrait) -> Result<Vec<endpoint::Model>, StoreError> {
    Ok(endpoint::Entity::find()
        .filter(endpoint::Column::Enabled.eq(true))
        .order_by_asc(endpoint::Column::Id)
        .all(conn)
        .await?)
}

/// Deletes an endpoint with its deliveries and their attempts; false when it was gone.
pub async fn delete_endpoint(conn: &impl ConnectionTrait, id: i64) -> Result<bool, StoreError> {
    Ok(endpoint::Entity::delete_by_id(id).exec(conn).await?.rows_affected > 0)
}

/// Enables an endpoint again (a `410` or anything else disabled it): the relay records
/// deliveries for it from the next event on. `None` when the endpoint is gone.
pub async fn enable_endpoint(conn: &impl ConnectionTrait, id: i64) -> Result<Option<endpoint::Model>, StoreError> {
    let mut rows = endpoint::Entity::update_many()
        .col_expr(endpoint::Column::Enabled, Expr::value(true))
        .col_expr(endpoint::Column::DisabledAt, Expr::value(Option::<DateTime<Utc>>::None))
        .filter(endpoint::Column::Id.eq(id))
        .exec_with_returning(conn)
        .await?;
    Ok(rows.pop())
}

/// Replaces an endpoint's secret; the current one stays valid for signing until
/// `previous_until` (one rotated out earlier is dropped). `None` when the endpoint is gone.
pub async fn rotate_secret(
    conn: &impl ConnectionTrait,
    id: i64,
    secret: &str,
    previous_until: DateTime<Utc>,
) -> Result<Option<endpoint::Model>, StoreError> {
    let mut rows = endpoint::Entity::update_many()
        .col_expr(endpoint::Column::PreviousSecret, Expr::col(endpoint::Column::Secret))
        .col_expr(endpoint::Column::PreviousSecretUntil, Expr::value(previous_until))
        .col_expr(endpoint::Column::Secret, Expr::value(secret))
        .filter(endpoint::Column::Id.eq(id))
        .exec_with_returning(conn)
        .await?;
    Ok(rows.pop())
}

/// A delivery to record.
#[derive(Clone, Debug)]
pub struct NewDelivery {
    /// Its endpoint.
    pub endpoint_id: i64,
    /// The outbox row of its event.
    pub outbox_id: i64,
    /// The appointment.
    pub appointment_id: i64,
    /// The event's id (`webhook-id`).
    pub event_id: String,
    /// The event type, as on the wire.
    pub event_type: &'static str,
    /// The body.
    pub payload: String,
    /// Attempts allowed.
    pub max_attempts: i32,
    /// Now: due at once.
    pub created_at: DateTime<Utc>,
    /// The `traceparent` of the change that called for it (its attempts join that trace).
    pub trace_context: Option<String>,
}

/// Rows per insert statement (well under both databases' bound-parameter limits).
const INSERT_CHUNK: usize = 200;

/// Records deliveries; a (outbox row, endpoint) recorded before is skipped. Returns how many
/// were new.
pub async fn insert_deliveries(conn: &impl ConnectionTrait, rows: Vec<NewDelivery>) -> Result<u64, StoreError> {
    let mut inserted = 0;
    for chunk in rows.chunks(INSERT_CHUNK) {
        let result = delivery::Entity::insert_many(chunk.iter().map(|d| new_row(d, None)))
            .on_conflict_do_nothing_on([delivery::Column::OutboxId, delivery::Column::EndpointId])
            .exec_without_returning(conn)
            .await?;
        if let sea_orm::TryInsertResult::Inserted(n) = result {
            inserted += n;
        }
    }
    Ok(inserted)
}

/// [`insert_deliveries`], each new delivery already claimed by this instance's worker: leased
/// until `lease_until` under `token`, as [`claim_due`] would have left it. Returns the new rows,
/// for the worker to be handed.
pub async fn insert_leased(
    conn: &impl ConnectionTrait,
    rows: &[NewDelivery],
    lease_until: DateTime<Utc>,
    token: i64,
) -> Result<Vec<delivery::Model>, StoreError> {
    let mut inserted = Vec::with_capacity(rows.len());
    for chunk in rows.chunks(INSERT_CHUNK) {
        let result = delivery::Entity::insert_many(chunk.iter().map(|d| new_row(d, Some((lease_until, token)))))
            .on_conflict_do_nothing_on([delivery::Column::OutboxId, delivery::Column::EndpointId])
            .exec_with_returning_many(conn)
            .await?;
        if let sea_orm::TryInsertResult::Inserted(rows) = result {
            inserted.extend(rows);
        }
    }
    Ok(inserted)
}

/// The row of a new delivery: due at once, or leased until then under that token.
fn new_row(d: &NewDelivery, lease: Option<(DateTime<Utc>, i64)>) -> delivery::ActiveModel {
    delivery::ActiveModel {
        endpoint_id: Set(d.endpoint_id),
        outbox_id: Set(d.outbox_id),
        appointment_id: Set(d.appointment_id),
        event_id: Set(d.event_id.clone()),
        event_type: Set(d.event_type.to_owned()),
        payload: Set(d.payload.clone()),
        status: Set(PENDING.to_owned()),
        attempts: Set(0),
        max_attempts: Set(d.max_attempts),
        next_attempt_at: Set(Some(lease.map_or(d.created_at, |(until, _)| until))),
        lease_token: Set(lease.map(|(_, token)| token)),
        last_status_code: Set(None),
        last_attempt_at: Set(None),
        last_error: Set(None),
        created_at: Set(d.created_at),
        trace_context: Set(d.trace_context.clone()),
        ..Default::default()
    }
}

/// One delivery.
pub async fn find_delivery(conn: &impl ConnectionTrait, id: i64) -> Result<Option<delivery::Model>, StoreError> {
    Ok(delivery::Entity::find_by_id(id).one(conn).await?)
}

/// Up to `limit` deliveries of an endpoint with an id below `before`, newest first.
pub async fn deliveries_page(
    conn: &impl ConnectionTrait,
    endpoint_id: i64,
    before: Option<i64>,
    limit: u64,
) -> Result<Vec<delivery::Model>, StoreError> {
    let mut q = delivery::Entity::find()
        .filter(delivery::Column::EndpointId.eq(endpoint_id))
        .order_by_desc(delivery::Column::Id)
        .limit(limit);
    if let Some(before) = before {
        q = q.filter(delivery::Column::Id.lt(before));
    }
    Ok(q.all(conn).await?)
}

/// Queues one more attempt of a delivery, due `now`, with its event id and body. A finished
/// one is `PENDING` again with one attempt allowed beyond those made; a pending one is only
/// brought forward, and a worker sending it loses its claim (its answer is still logged).
pub async fn redeliver(
    conn: &impl ConnectionTrait,
    id: i64,
    now: DateTime<Utc>,
) -> Result<Option<delivery::Model>, StoreError> {
    let mut rows = delivery::Entity::update_many()
        .col_expr(
            delivery::Column::MaxAttempts,
            Expr::case(delivery::Column::Status.eq(PENDING), Expr::col(delivery::Column::MaxAttempts))
                .finally(Expr::col(delivery::Column::Attempts).add(1))
                .into(),
        )
        .col_expr(delivery::Column::Status, Expr::value(PENDING))
        .col_expr(delivery::Column::NextAttemptAt, Expr::value(Some(now)))
        .col_expr(delivery::Column::LeaseToken, Expr::value(Option::<i64>::None))
        .filter(delivery::Column::Id.eq(id))
        .exec_with_returning(conn)
        .await?;
    Ok(rows.pop())
}

/// A claimed delivery with what sending it needs.
#[derive(Clone, Debug)]
pub struct Claimed {
    /// The delivery as claimed (its `lease_token` is the worker's).
    pub delivery: delivery::Model,
    /// Its endpoint.
    pub endpoint: endpoint::Model,
}

/// The deliveries a claim takes (on SQLite, which serves one process whose single worker
/// claims, the statement is atomic without a lock).
const DUE: &str = "SELECT d.id FROM webhook_delivery d WHERE d.status = 'PENDING' AND d.next_attempt_at <= $1 \
                   ORDER BY d.next_attempt_at LIMIT $4";

/// Claims up to `limit` deliveries due at `now`, leased until `lease_until` under `token`,
/// oldest due first. Those of a disabled endpoint are claimed too, to be failed (one recorded
/// by a relay pass racing the disabling would otherwise stay pending for ever).
pub async fn claim_due(
    db: &Db,
    now: DateTime<Utc>,
    lease_until: DateTime<Utc>,
    token: i64,
    limit: u64,
) -> Result<Vec<Claimed>, StoreError> {
    let backend = db.backend();
    let sql = format!(
        "UPDATE webhook_delivery SET next_attempt_at = $2, lease_token = $3 WHERE id {} RETURNING *",
        super::claimed_ids(backend, DUE)
    );
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let stmt =
        Statement::from_sql_and_values(backend, sql, [now.into(), lease_until.into(), token.into(), limit.into()]);
    let mut deliveries = {
        let _writing = db.writing().await;
        delivery::Model::find_by_statement(stmt).all(db.conn()).await?
    };
    if deliveries.is_empty() {
        return Ok(Vec::new());
    }
    deliveries.sort_unstable_by_key(|d| (d.next_attempt_at, d.id));
    let ids: Vec<i64> = deliveries.iter().map(|d| d.endpoint_id).collect();
    let endpoints = endpoint::Entity::find().filter(endpoint::Column::Id.is_in(ids)).all(db.conn()).await?;
    Ok(deliveries
        .into_iter()
        .filter_map(|d| {
            // An endpoint deleted in between takes its deliveries with it.
            let endpoint = endpoints.iter().find(|e| e.id == d.endpoint_id)?.clone();
            Some(Claimed { delivery: d, endpoint })
        })
        .collect())
}

/// What became of one attempt.
#[derive(Clone, Debug)]
pub struct Attempt {
    /// The delivery.
    pub delivery_id: i64,
    /// Its endpoint.
    pub endpoint_id: i64,
    /// The worker's claim.
    pub token: i64,
    /// The attempt's number (1 for the first), as the claim saw it.
    pub number: i32,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// How long it took.
    pub duration_ms: i32,
    /// The answer's status, if one came.
    pub status_code: Option<i32>,
    /// Why no acceptable answer came.
    pub error: Option<String>,
    /// The delivery's state after it.
    pub next: Next,
}

/// A delivery's state after an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Accepted (2xx).
    Succeeded,
    /// Failed; try again then.
    Retry(DateTime<Utc>),
    /// Failed with no attempt left.
    Failed,
    /// `410 Gone`: the endpoint is disabled and everything pending for it fails.
    Disable,
}

impl Next {
    /// When the delivery is due again, if it is.
    pub fn retry_at(self) -> Option<DateTime<Utc>> {
        match self {
            Self::Retry(at) => Some(at),
            _ => None,
        }
    }
}

/// Attempts written per statement (7 values each on PostgreSQL).
const RECORD_CHUNK: usize = 128;

/// Writes attempts in one transaction: each one's log row, and its delivery's new state while
/// the claim is still the worker's (otherwise only the count and the last answer: a redelivery
/// or another worker decides what comes next). `Disable` also disables the endpoint and fails
/// what is pending for it. Returns, for each attempt, whether its claim was still the worker's.
///
/// On PostgreSQL the claimed deliveries move in one statement per [`RECORD_CHUNK`], so a busy
/// worker's outcomes cost a few statements and one commit, not four statements and a commit each.
pub async fn record_attempts(db: &Db, attempts: &[Attempt]) -> Result<Vec<bool>, StoreError> {
    use delivery::Column as D;
    if attempts.is_empty() {
        return Ok(Vec::new());
    }
    let tx = db.begin_write().await?;
    // The updates come first: on SQLite the transaction then holds the write lock from its start.
    let mut owned = HashSet::with_capacity(attempts.len());
    for chunk in attempts.chunks(RECORD_CHUNK) {
        owned.extend(settle_claimed(&tx, chunk).await?);
    }
    // A delivery whose row is locked by this transaction cannot go away before it commits.
    let mut present = owned.clone();
    for a in attempts.iter().filter(|a| !owned.contains(&a.delivery_id)) {
        if answered(a).exec(&tx).await?.rows_affected > 0 {
            present.insert(a.delivery_id);
        }
    }
    let logged: Vec<attempt::ActiveModel> = attempts
        .iter()
        .filter(|a| present.contains(&a.delivery_id))
        .map(|a| attempt::ActiveModel {
            delivery_id: Set(a.delivery_id),
            attempt: Set(a.number),
            started_at: Set(a.started_at),
            duration_ms: Set(a.duration_ms),
            status_code: Set(a.status_code),
            error: Set(a.error.clone()),
            ..Default::default()
        })
        .collect();
    for chunk in logged.chunks(RECORD_CHUNK) {
        attempt::Entity::insert_many(chunk.to_vec()).exec_without_returning(&tx).await?;
    }
    for a in attempts.iter().filter(|a| a.next == Next::Disable) {
        endpoint::Entity::update_many()
            .col_expr(endpoint::Column::Enabled, Expr::value(false))
            .col_expr(endpoint::Column::DisabledAt, Expr::value(Some(a.started_at)))
            .filter(endpoint::Column::Id.eq(a.endpoint_id))
            .filter(endpoint::Column::Enabled.eq(true))
            .exec(&tx)
            .await?;
        delivery::Entity::update_many()
            .col_expr(D::Status, Expr::value(FAILED))
            .col_expr(D::NextAttemptAt, Expr::value(Option::<DateTime<Utc>>::None))
            .col_expr(D::LeaseToken, Expr::value(Option::<i64>::None))
            .filter(D::EndpointId.eq(a.endpoint_id))
            .filter(D::Status.eq(PENDING))
            .exec(&tx)
            .await?;
    }
    tx.commit().await?;
    Ok(attempts.iter().map(|a| owned.contains(&a.delivery_id)).collect())
}

/// The update every attempt makes to its delivery, whoever holds the claim: one more attempt
/// counted, and its answer as the last one.
fn answered(a: &Attempt) -> sea_orm::UpdateMany<delivery::Entity> {
    use delivery::Column as D;
    delivery::Entity::update_many()
        .col_expr(D::Attempts, Expr::col(D::Attempts).add(1))
        .col_expr(D::LastStatusCode, Expr::value(a.status_code))
        .col_expr(D::LastAttemptAt, Expr::value(Some(a.started_at)))
        .col_expr(D::LastError, Expr::value(a.error.clone()))
        .filter(D::Id.eq(a.delivery_id))
}

/// The status and next attempt a delivery takes after `a`.
fn outcome(a: &Attempt) -> (&'static str, Option<DateTime<Utc>>) {
    match a.next {
        Next::Succeeded => (SUCCEEDED, None),
        Next::Retry(at) => (PENDING, Some(at)),
        Next::Failed | Next::Disable => (FAILED, None),
    }
}

/// Gives each delivery of `chunk` still claimed under its attempt's token its new state;
/// returns the ids it moved.
async fn settle_claimed(conn: &impl ConnectionTrait, chunk: &[Attempt]) -> Result<Vec<i64>, StoreError> {
    use delivery::Column as D;
    let backend = conn.get_database_backend();
    if backend != DbBackend::Postgres {
        let mut moved = Vec::with_capacity(chunk.len());
        for a in chunk {
            let (status, next_at) = outcome(a);
            let touched = answered(a)
                .col_expr(D::Status, Expr::value(status))
                .col_expr(D::NextAttemptAt, Expr::value(next_at))
                .col_expr(D::LeaseToken, Expr::value(Option::<i64>::None))
                .filter(D::LeaseToken.eq(a.token))
                .exec(conn)
                .await?
                .rows_affected;
            if touched > 0 {
                moved.push(a.delivery_id);
            }
        }
        return Ok(moved);
    }
    // The types of v(id, token, code, started_at, error, status, next_at): a VALUES list of
    // parameters has none of its own.
    const TYPES: [&str; 7] = ["bigint", "bigint", "integer", "timestamptz", "text", "text", "timestamptz"];
    let rows: Vec<String> = (0..chunk.len())
        .map(|i| {
            let cells: Vec<String> =
                TYPES.iter().enumerate().map(|(c, ty)| format!("${}::{ty}", i * TYPES.len() + c + 1)).collect();
            format!("({})", cells.join(", "))
        })
        .collect();
    let sql = format!(
        "UPDATE webhook_delivery d SET attempts = d.attempts + 1, last_status_code = v.code, \
           last_attempt_at = v.started_at, last_error = v.error, status = v.status, \
           next_attempt_at = v.next_at, lease_token = NULL \
         FROM (VALUES {}) AS v(id, token, code, started_at, error, status, next_at) \
         WHERE d.id = v.id AND d.lease_token = v.token \
         RETURNING d.id",
        rows.join(", ")
    );
    let mut values: Vec<Value> = Vec::with_capacity(chunk.len() * TYPES.len());
    for a in chunk {
        let (status, next_at) = outcome(a);
        values.extend([
            a.delivery_id.into(),
            a.token.into(),
            a.status_code.into(),
            a.started_at.into(),
            a.error.clone().into(),
            status.into(),
            next_at.into(),
        ]);
    }
    let rows = conn.query_all_raw(Statement::from_sql_and_values(backend, sql, values)).await?;
    rows.iter().map(|row| row.try_get::<i64>("", "id").map_err(StoreError::from)).collect()
}

/// Fails a claimed delivery without an attempt (its endpoint was disabled meanwhile).
pub async fn abandon(db: &Db, delivery_id: i64, token: i64, why: &str) -> Result<(), StoreError> {
    let _writing = db.writing().await;
    delivery::Entity::update_many()
        .col_expr(delivery::Column::Status, Expr::value(FAILED))
        .col_expr(delivery::Column::NextAttemptAt, Expr::value(Option::<DateTime<Utc>>::None))
        .col_expr(delivery::Column::LeaseToken, Expr::value(Option::<i64>::None))
        .col_expr(delivery::Column::LastError, Expr::value(Some(why.to_owned())))
        .filter(delivery::Column::Id.eq(delivery_id))
        .filter(delivery::Column::LeaseToken.eq(token))
        .exec(db.conn())
        .await?;
    Ok(())
}

/// Gives a claim back without an outcome (the worker is stopping): due again at `now`.
pub async fn release(db: &Db, delivery_id: i64, token: i64, now: DateTime<Utc>) -> Result<(), StoreError> {
    let _writing = db.writing().await;
    delivery::Entity::update_many()
        .col_expr(delivery::Column::NextAttemptAt, Expr::value(Some(now)))
        .col_expr(delivery::Column::LeaseToken, Expr::value(Option::<i64>::None))
        .filter(delivery::Column::Id.eq(delivery_id))
        .filter(delivery::Column::LeaseToken.eq(token))
        .filter(delivery::Column::Status.eq(PENDING))
        .exec(db.conn())
        .await?;
    Ok(())
}

/// Deletes up to `limit` finished deliveries (succeeded or failed) whose last attempt started
/// before `before` (or, without an attempt, that were created before), their attempts with them
/// (`ON DELETE CASCADE`), and returns how many deliveries it deleted. Pending ones are never
/// candidates. The partial index `ix_webhook_delivery_finished` finds them; on PostgreSQL the
/// rows are taken `SKIP LOCKED`, so instances deleting at once take disjoint rows, and a
/// redelivery in flight (it makes the row pending) is skipped.
pub async fn delete_finished(
    conn: &impl ConnectionTrait,
    before: DateTime<Utc>,
    limit: u64,
) -> Result<u64, StoreError> {
    let backend = conn.get_database_backend();
    // Predicate and key as the index spells them (see the retention migration).
    let finished = "SELECT id FROM webhook_delivery \
                    WHERE status <> 'PENDING' AND COALESCE(last_attempt_at, created_at) < $1 LIMIT $2";
    let sql = format!("DELETE FROM webhook_delivery WHERE id {}", super::claimed_ids(backend, finished));
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let done = conn.execute_raw(Statement::from_sql_and_values(backend, sql, [before.into(), limit.into()])).await?;
    Ok(done.rows_affected())
}

/// When the earliest pending delivery (of every instance) is due: the partial due index's
/// first entry, read at each idle turn of a worker.
pub async fn next_due(conn: &impl ConnectionTrait) -> Result<Option<DateTime<Utc>>, StoreError> {
    let due: Option<Option<DateTime<Utc>>> = delivery::Entity::find()
        .select_only()
        .column_as(Expr::col(delivery::Column::NextAttemptAt).min(), "next_due")
        .filter(delivery::Column::Status.eq(PENDING))
        .into_tuple()
        .one(conn)
        .await?;
    Ok(due.flatten())
}

/// How many deliveries are pending (of every instance). It counts the due index, so it is
/// read for the gauge every few seconds only, not at each turn.
pub async fn pending_count(conn: &impl ConnectionTrait) -> Result<u64, StoreError> {
    Ok(delivery::Entity::find().filter(delivery::Column::Status.eq(PENDING)).count(conn).await?)
}
