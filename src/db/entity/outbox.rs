//! `outbox`: side effects of committed changes, waiting for the relay. A row carries a slot's
//! state after a change (for live availability), an appointment event (for messages to the
//! patient and partners), or both; or, alone, the doctor whose schedule gained slots.

use sea_orm::entity::prelude::*;

use crate::model::{
    AppointmentEvent, AppointmentState, AppointmentStatus, CancelledBy, SlotChange, SCHEDULE_PUBLISHED,
};

/// One pending event.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "outbox")]
pub struct Model {
    /// Primary key; also the publishing order.
    #[sea_orm(primary_key)]
    pub id: i64,
    /// An [`AppointmentEvent`] word, [`crate::model::SLOT_ONLY`] for a slot change alone, or
    /// [`SCHEDULE_PUBLISHED`].
    pub kind: String,
    /// The appointment the event is about.
    pub appointment_id: Option<i64>,
    /// The slot that changed (none for an event that changes no slot: a confirm).
    pub slot_id: Option<i64>,
    /// The slot's doctor (the publishing doctor of a [`SCHEDULE_PUBLISHED`] row).
    pub doctor_id: Option<i64>,
    /// The slot's start.
    pub start_at: Option<DateTimeUtc>,
    /// The slot's capacity.
    pub capacity: Option<i32>,
    /// The slot's booked count after the change.
    pub booked_count: Option<i32>,
    /// The slot's version after the change.
    pub version: Option<i64>,
    /// When the change committed (about).
    pub created_at: DateTimeUtc,
    /// Whether the slot is closed after the change.
    pub slot_closed: Option<bool>,
    /// The appointment's status as the event left it (with the four columns below, its
    /// [`AppointmentState`]); `None` in rows written before it was recorded.
    pub appointment_status: Option<String>,
    /// The appointment's `expires_at` as the event left it.
    pub appointment_expires_at: Option<DateTimeUtc>,
    /// The appointment's `cancelled_at` as the event left it.
    pub appointment_cancelled_at: Option<DateTimeUtc>,
    /// The appointment's `cancelled_by` as the event left it.
    pub appointment_cancelled_by: Option<String>,
    /// The appointment's `rescheduled_to` as the event left it.
    pub appointment_rescheduled_to: Option<i64>,
    /// The W3C `traceparent` of the span whose transaction wrote the row (the trace its
    /// follow-up work joins); `None` when there was none.
    pub trace_context: Option<String>,
}

impl Model {
    /// The slot change the row carries, if any.
    pub fn slot_change(&self) -> Option<SlotChange> {
        Some(SlotChange {
            slot_id: self.slot_id?,
            doctor_id: self.doctor_id?,
            start_at: self.start_at?,
            capacity: self.capacity?,
            booked_count: self.booked_count?,
            version: self.version?,
            closed: self.slot_closed.unwrap_or(false),
        })
    }

    /// The doctor whose schedule gained slots, for a [`SCHEDULE_PUBLISHED`] row.
    pub fn published_doctor(&self) -> Option<i64> {
        (self.kind == SCHEDULE_PUBLISHED).then_some(self.doctor_id).flatten()
    }

    /// The appointment event the row carries, if any.
    pub fn event(&self) -> Option<(AppointmentEvent, i64)> {
        Some((AppointmentEvent::parse(&self.kind)?, self.appointment_id?))
    }

    /// The appointment as the row's event left it; `None` for a row written before the state
    /// was recorded (its messages then describe the appointment as it is when they are made).
    pub fn appointment_state(&self) -> Option<AppointmentState> {
        Some(AppointmentState {
            status: AppointmentStatus::parse(self.appointment_status.as_deref()?)?,
            expires_at: self.appointment_expires_at,
            cancelled_at: self.appointment_cancelled_at,
            cancelled_by: self.appointment_cancelled_by.as_deref().and_then(CancelledBy::parse),
            rescheduled_to: self.appointment_rescheduled_to,
        })
    }
}

/// No relations.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
