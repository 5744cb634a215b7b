//! The two kinds of "no" of every layer that serves requests (`booking`, `notify`,
//! `webhooks`), mapped once at each edge (`graphql::error`, `fhir::outcome`): refusals that
//! are data, and errors that end a request.
//!
//! This module sits right above [`crate::db`] and below every layer that uses it. It is not
//! part of [`crate::model`] (which depends on nothing) because [`ServiceError::Store`] carries
//! the [`StoreError`] as it is: `?` converts a failed query into it, a retry can ask whether
//! the database aborted a transaction ([`StoreError::is_transient`]), and the edge can answer
//! a busy database `OVERLOADED` ([`StoreError::is_busy`]). An opaque variant below `db` would
//! lose all three. It depends on `db` for that one type; `db` depends on nothing here.

use crate::db::StoreError;

/// The codes of expected refusals, reported in `userErrors`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RefusalCode {
    /// No seat left.
    SlotFull,
    /// The patient already holds an active (HELD or BOOKED) appointment in the slot.
    AlreadyBooked,
    /// No such slot.
    SlotNotFound,
    /// The slot has started.
    SlotInPast,
    /// The caller used this key for a different request.
    IdempotencyKeyReused,
    /// A value of the input is malformed.
    InvalidInput,
    /// No such appointment, or not one the caller may see.
    AppointmentNotFound,
    /// The patient holds another active appointment overlapping this one in time.
    OverlappingAppointment,
    /// The hold ran out before it was confirmed.
    HoldExpired,
    /// The appointment is cancelled or expired: it can no longer change.
    AppointmentNotActive,
    /// The slot is closed: it never takes a seat again.
    SlotClosed,
    /// The patient already waits (or has an offer) for this doctor and day.
    AlreadyOnWaitlist,
}

impl RefusalCode {
    /// The code as written in the API and in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SlotFull => "SLOT_FULL",
            Self::AlreadyBooked => "ALREADY_BOOKED",
            Self::SlotNotFound => "SLOT_NOT_FOUND",
            Self::SlotInPast => "SLOT_IN_PAST",
            Self::IdempotencyKeyReused => "IDEMPOTENCY_KEY_REUSED",
            Self::InvalidInput => "INVALID_INPUT",
            Self::AppointmentNotFound => "APPOINTMENT_NOT_FOUND",
            Self::OverlappingAppointment => "OVERLAPPING_APPOINTMENT",
            Self::HoldExpired => "HOLD_EXPIRED",
            Self::AppointmentNotActive => "APPOINTMENT_NOT_ACTIVE",
            Self::SlotClosed => "SLOT_CLOSED",
            Self::AlreadyOnWaitlist => "ALREADY_ON_WAITLIST",
        }
    }
}

/// An expected refusal: the request was understood and answered "no".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// What kind of no.
    pub code: RefusalCode,
    /// A sentence for people.
    pub message: String,
    /// Path of the input field at fault, e.g. `["input", "slotId"]`.
    pub field: Option<Vec<String>>,
}

impl Refusal {
    /// A refusal with no particular field.
    pub fn new(code: RefusalCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), field: None }
    }

    /// An `INVALID_INPUT` refusal about one input field.
    pub fn invalid(field: &[&str], message: impl Into<String>) -> Self {
        Self::about(RefusalCode::InvalidInput, field, message)
    }

    /// A refusal about one input field.
    pub fn about(code: RefusalCode, field: &[&str], message: impl Into<String>) -> Self {
        Self { code, message: message.into(), field: Some(field.iter().map(|s| (*s).to_owned()).collect()) }
    }

    // The refusals every seat-taking operation words the same way.

    /// `SLOT_NOT_FOUND`, about the field that named the slot.
    pub(crate) fn slot_not_found(field: &[&str]) -> Self {
        Self::about(RefusalCode::SlotNotFound, field, "no slot with this id")
    }

    /// `SLOT_IN_PAST`.
    pub(crate) fn slot_in_past() -> Self {
        Self::new(RefusalCode::SlotInPast, "this slot has already started")
    }

    /// `SLOT_CLOSED`.
    pub(crate) fn slot_closed() -> Self {
        Self::new(RefusalCode::SlotClosed, "this slot is closed and takes no bookings")
    }

    /// `ALREADY_BOOKED`.
    pub(crate) fn already_booked() -> Self {
        Self::new(RefusalCode::AlreadyBooked, "this patient already holds a booking in this slot")
    }

    /// `OVERLAPPING_APPOINTMENT`.
    pub(crate) fn overlapping() -> Self {
        Self::new(RefusalCode::OverlappingAppointment, "this patient holds another appointment at this time")
    }

    /// `SLOT_FULL`.
    pub(crate) fn slot_full() -> Self {
        Self::new(RefusalCode::SlotFull, "this slot has no seat left")
    }

    /// `IDEMPOTENCY_KEY_REUSED`, about the field that carried the key.
    pub(crate) fn key_reused(field: &[&str]) -> Self {
        Self::about(
            RefusalCode::IdempotencyKeyReused,
            field,
            "this idempotency key was used for a different request; use a new key",
        )
    }

    /// `APPOINTMENT_NOT_FOUND`, about the field that named the appointment.
    pub(crate) fn appointment_not_found(field: &[&str]) -> Self {
        Self::about(RefusalCode::AppointmentNotFound, field, "no appointment with this id")
    }

    /// `APPOINTMENT_NOT_ACTIVE`, about the field that named the appointment.
    pub(crate) fn not_active(field: &[&str]) -> Self {
        Self::about(RefusalCode::AppointmentNotActive, field, "this appointment is cancelled or expired")
    }

    /// `HOLD_EXPIRED`, about the field that named the appointment.
    pub(crate) fn hold_expired(field: &[&str]) -> Self {
        Self::about(RefusalCode::HoldExpired, field, "this hold ran out before it was confirmed")
    }
}

/// A failure that ends the request (a top-level GraphQL error with `extensions.code`).
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// No (valid) token where one is needed.
    #[error("authentication required: send a bearer token")]
    Unauthenticated,
    /// The caller's role does not allow this.
    #[error("{0}")]
    Forbidden(String),
    /// A bad value for an operation without `userErrors`.
    #[error("{message}")]
    InvalidInput {
        /// A sentence for people.
        message: String,
        /// Path of the field at fault.
        field: Vec<String>,
    },
    /// Too many booking attempts for one patient.
    #[error("too many booking attempts for this patient; retry in {retry_after_secs} s")]
    RateLimited {
        /// Seconds until an attempt will be let in.
        retry_after_secs: u64,
    },
    /// The booking path is saturated; retrying shortly is safe.
    #[error("the service is busy; retry shortly")]
    Overloaded,
    /// The database failed; details go to the log only.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ServiceError {
    /// The error's stable code (`extensions.code`, and a metrics label).
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unauthenticated => "UNAUTHENTICATED",
            Self::Forbidden(_) => "FORBIDDEN",
            Self::InvalidInput { .. } => "INVALID_INPUT",
            Self::RateLimited { .. } => "RATE_LIMITED",
            Self::Overloaded => "OVERLOADED",
            Self::Store(_) => "INTERNAL",
        }
    }

    /// An `INVALID_INPUT` error about one input field.
    pub fn invalid(field: &[&str], message: impl Into<String>) -> Self {
        Self::InvalidInput { message: message.into(), field: field.iter().map(|s| (*s).to_owned()).collect() }
    }
}

/// Answer of an operation that reports refusals as data.
pub type Outcome<T> = Result<Result<T, Refusal>, ServiceError>;
