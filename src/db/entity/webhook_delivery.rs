//! `webhook_delivery`: one appointment event on its way to one endpoint.

use sea_orm::entity::prelude::*;

/// Stored status of a delivery still to be sent (or being sent).
pub const PENDING: &str = "PENDING";
/// Stored status of a delivery an endpoint accepted (2xx).
pub const SUCCEEDED: &str = "SUCCEEDED";
/// Stored status of a delivery given up on.
pub const FAILED: &str = "FAILED";

/// One delivery.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_delivery")]
pub struct Model {
    /// Primary key.
    #[sea_orm(primary_key)]
    pub id: i64,
    /// The endpoint it goes to.
    pub endpoint_id: i64,
    /// The outbox row whose event it carries (unique with `endpoint_id`).
    pub outbox_id: i64,
    /// The appointment the event is about.
    pub appointment_id: i64,
    /// The `webhook-id` header: the event's id, the same on every attempt.
    pub event_id: String,
    /// The event type (`appointment.booked`, …).
    pub event_type: String,
    /// The body every attempt sends, byte for byte.
    pub payload: String,
    /// `PENDING`, `SUCCEEDED` or `FAILED`.
    pub status: String,
    /// Attempts made so far.
    pub attempts: i32,
    /// Attempts allowed before it is `FAILED` (a redelivery allows one more).
    pub max_attempts: i32,
    /// When it is due (set exactly while `PENDING`; while being sent, the end of the lease).
    pub next_attempt_at: Option<DateTimeUtc>,
    /// Marks the claim of the worker sending it.
    pub lease_token: Option<i64>,
    /// HTTP status of the last attempt, if it got an answer.
    pub last_status_code: Option<i32>,
    /// When the last attempt started.
    pub last_attempt_at: Option<DateTimeUtc>,
    /// Why the last attempt failed without an answer (timeout, refused address, …).
    pub last_error: Option<String>,
    /// When it was recorded.
    pub created_at: DateTimeUtc,
    /// The W3C `traceparent` of the span whose transaction wrote the row (the trace its
    /// follow-up work joins); `None` when there was none.
    pub trace_context: Option<String>,
}

/// No relations are navigated through sea-orm; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
