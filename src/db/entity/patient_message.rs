//! `patient_message`: the durable queue of emails and SMS to patients (see the messages
//! migration for what each column means to the queue).

use sea_orm::entity::prelude::*;

/// Stored status of a message waiting for its (next) attempt.
pub const PENDING: &str = "PENDING";
/// Stored status of a message the server or gateway took.
pub const SENT: &str = "SENT";
/// Stored status of a message given up on.
pub const FAILED: &str = "FAILED";
/// Stored status of a reminder that no longer applied when it was due.
pub const SKIPPED: &str = "SKIPPED";

/// One message.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "patient_message")]
pub struct Model {
    /// Primary key; also names the message (`Message-ID`, dev-mode file name).
    #[sea_orm(primary_key)]
    pub id: i64,
    /// The outbox row of the event it came from.
    pub outbox_id: i64,
    /// `EVENT` (about the event itself) or `REMINDER`.
    pub purpose: String,
    /// The appointment event (`BOOKED`, `CANCELLED`, …).
    pub event: String,
    /// The appointment it is about.
    pub appointment_id: i64,
    /// The patient it goes to.
    pub patient_id: i64,
    /// `EMAIL` or `SMS`.
    pub channel: String,
    /// The address or number, as on file when the message was recorded.
    pub recipient: String,
    /// The patient's locale then.
    pub locale: Option<String>,
    /// What rendering needs, as JSON (`crate::notify::Facts`).
    pub facts: String,
    /// `PENDING`, `SENT`, `FAILED` or `SKIPPED`.
    pub status: String,
    /// Attempts so far (each counted when claimed).
    pub attempts: i32,
    /// When a worker may take it next (the lease's end while an attempt runs).
    pub next_attempt_at: DateTimeUtc,
    /// The lease of the running attempt.
    pub locked_until: Option<DateTimeUtc>,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
    /// When the event committed (about), or, for a reminder, when it is due: the start of the
    /// delivery lag.
    pub committed_at: DateTimeUtc,
    /// When it was recorded.
    pub created_at: DateTimeUtc,
    /// When the server or gateway took it.
    pub sent_at: Option<DateTimeUtc>,
    /// The W3C `traceparent` of the span whose transaction wrote the row (the trace its
    /// follow-up work joins); `None` when there was none.
    pub trace_context: Option<String>,
}

/// No relations.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
