//! Durable follow-up work of committed appointment events: the messages to the patient and the
//! deliveries to partners' webhook endpoints. The relay hands each pass's events to every
//! [`FollowUp`] inside the transaction that deletes their outbox rows, so the work is recorded
//! exactly when the rows go (and, like them, only for changes that committed).

use chrono::{DateTime, Utc};
use sea_orm::DatabaseTransaction;

use crate::{
    db::{entity::outbox, StoreError},
    model::{AppointmentEvent, AppointmentState},
    telemetry::traces::TraceParent,
};

/// One committed appointment event, as the outbox row recorded it. The row id is unique per
/// event: a pass rolled back and taken again carries the same ids, which lets a follow-up
/// keep its work idempotent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Notification {
    /// The outbox row it came from.
    pub outbox_id: i64,
    /// What happened.
    pub event: AppointmentEvent,
    /// The appointment it happened to.
    pub appointment_id: i64,
    /// The appointment as the event left it (`None` for rows recorded before this was kept:
    /// then as the appointment is now).
    pub state: Option<AppointmentState>,
    /// When the change committed (the outbox row's time): where delivery lags are measured from.
    pub committed_at: DateTime<Utc>,
    /// The span whose transaction wrote the row: the trace its messages and deliveries join.
    pub trace: Option<TraceParent>,
}

impl Notification {
    /// The event an outbox row carries; `None` for a row that only changes a slot.
    pub fn from_row(row: &outbox::Model) -> Option<Self> {
        let (event, appointment_id) = row.event()?;
        Some(Self {
            outbox_id: row.id,
            event,
            appointment_id,
            state: row.appointment_state(),
            committed_at: row.created_at,
            trace: row.trace_context.as_deref().and_then(TraceParent::parse),
        })
    }
}

/// Records the work that follows committed appointment events.
#[async_trait::async_trait]
pub trait FollowUp: Send + Sync + 'static {
    /// Records what `events` call for, in `tx`. An error rolls the relay's pass back: its rows
    /// stay, and the pass (live events included) is retried with backoff.
    async fn record(&self, tx: &DatabaseTransaction, events: &[Notification]) -> Result<(), StoreError>;

    /// Called after the transaction in which [`FollowUp::record`] ran committed, so that the
    /// workers sending what was recorded start at once instead of at their next poll. Must not
    /// block.
    fn committed(&self) {}
}
