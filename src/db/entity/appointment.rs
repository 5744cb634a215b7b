//! `appointment`: a seat (or a run of seats) held by a patient, and where it is in its life.

use sea_orm::entity::prelude::*;

use crate::model::{AppointmentState, AppointmentStatus, CancelledBy};

/// Stored status of a held seat (see [`AppointmentStatus`]).
pub const HELD: &str = "HELD";
/// Stored status of a booked seat.
pub const BOOKED: &str = "BOOKED";
/// Stored status of a cancelled appointment.
pub const CANCELLED: &str = "CANCELLED";
/// Stored status of a hold that ran out.
pub const EXPIRED: &str = "EXPIRED";
/// Stored status of a patient who checked in.
pub const ARRIVED: &str = "ARRIVED";
/// Stored status of a patient who was seen.
pub const FULFILLED: &str = "FULFILLED";
/// Stored status of a patient who did not come.
pub const NOSHOW: &str = "NOSHOW";

/// One appointment row.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "appointment")]
pub struct Model {
    /// Primary key.
    #[sea_orm(primary_key)]
    pub id: i64,
    /// The first slot (the only one, unless `slot_count` > 1).
    pub slot_id: i64,
    /// The patient holding the seat.
    pub patient_id: i64,
    /// One of [`crate::model::status::LIFECYCLE`]'s words.
    pub status: String,
    /// Scope (`role:sub`) of the caller whose request made this row; its idempotency key is
    /// scoped by it.
    pub booked_by: String,
    /// The caller's idempotency key.
    pub idempotency_key: String,
    /// Fingerprint of the request, to tell a retry from a reused key.
    pub request_hash: String,
    /// When it was made.
    pub created_at: DateTimeUtc,
    /// When it was cancelled.
    pub cancelled_at: Option<DateTimeUtc>,
    /// Start of its first slot.
    pub start_at: DateTimeUtc,
    /// End of its last slot.
    pub end_at: DateTimeUtc,
    /// How many consecutive slots it takes a seat in.
    pub slot_count: i32,
    /// Until when a hold keeps its seat (set while `HELD`, kept on `EXPIRED`).
    pub expires_at: Option<DateTimeUtc>,
    /// `PATIENT`, `PARTNER` or `CLINIC`, for a cancelled appointment.
    pub cancelled_by: Option<String>,
    /// The appointment this one replaced.
    pub rescheduled_from: Option<i64>,
    /// The appointment that replaced this one.
    pub rescheduled_to: Option<i64>,
    /// `booked_by` of the appointment a reschedule chain started from, when someone else
    /// rescheduled it (a partner keeps seeing what it booked).
    pub first_booked_by: Option<String>,
    /// When the patient checked in (set from `ARRIVED` on).
    pub arrived_at: Option<DateTimeUtc>,
    /// When the patient was seen (set on `FULFILLED`).
    pub completed_at: Option<DateTimeUtc>,
}

impl Model {
    /// The status as a value; a word the code does not know reads as cancelled (it takes no
    /// seat, and the CHECK constraint makes it impossible anyway).
    pub fn status(&self) -> AppointmentStatus {
        AppointmentStatus::parse(&self.status).unwrap_or(AppointmentStatus::Cancelled)
    }

    /// The fields that change after the row is made, as they are in this row.
    pub fn state(&self) -> AppointmentState {
        AppointmentState {
            status: self.status(),
            expires_at: self.expires_at,
            cancelled_at: self.cancelled_at,
            cancelled_by: self.cancelled_by.as_deref().and_then(CancelledBy::parse),
            rescheduled_to: self.rescheduled_to,
        }
    }

    /// This row as `state` left it: the fields that never change from this row, the others
    /// from `state` (what an event's transaction left, read later from its outbox row).
    pub fn as_left(&self, state: &AppointmentState) -> Self {
        Self {
            status: state.status.as_str().to_owned(),
            expires_at: state.expires_at,
            cancelled_at: state.cancelled_at,
            cancelled_by: state.cancelled_by.map(|c| c.as_str().to_owned()),
            rescheduled_to: state.rescheduled_to,
            // Set once by the desk's moves and never changed after: as the event left them
            // when the event's status had them.
            arrived_at: self
                .arrived_at
                .filter(|_| matches!(state.status, AppointmentStatus::Arrived | AppointmentStatus::Fulfilled)),
            completed_at: self.completed_at.filter(|_| state.status == AppointmentStatus::Fulfilled),
            ..self.clone()
        }
    }
}

/// No relations are navigated through sea-orm; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
