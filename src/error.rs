//! The two kinds of "no" of every layer that serves requests (`booking`, `notify`,
//! `webhooks`), mapped once at each edge (`graphql::error`, `fhir::outcome`): refusals that
//! are data, and errors that end a request.
//!
//! This module sits right above [`crate::db`] and below every layer that uses it. It is not
//! part of [`crate::model`] (which depends on nothing) because [`ServiceError::Store`] carries
//! the [`StoreError`] as it is: `?` converts a failed query into it, a retry can ask whether
//! the database aborted a transaction ([`StoreError::is_transient`]), and the edge can answer
//! by the failure's class ([`StoreError::class`]: `UNAVAILABLE`, `OVERLOADED` or `INTERNAL`). An opaque variant below `db` would
//! lose all three. It depends on `db` for that one type; `db` depends on nothing here.
//!
//! Both kinds name the value at fault in the domain's words ([`Fault`]: a [`Field`] and the
//! [`Place`] the operation took it from), never as a path of one transport: each edge says
//! once, by a `match` over every field, how its requests name that value.

use crate::db::{FailureClass, StoreError};

/// A value a caller sends, in the domain's words: a field of an operation's request (such as
/// `booking::BookRequest`) or a parameter of the operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    /// The id of the record the operation is about: the doctor, slot or appointment read, the
    /// appointment confirmed or cancelled, the waitlist entry left, the webhook endpoint
    /// deleted or rotated.
    Id,
    /// The patient a booker acts for, or whose contact details are read.
    PatientId,
    /// The slot of a booking or hold (the first one of a longer appointment).
    SlotId,
    /// The caller's idempotency key.
    IdempotencyKey,
    /// The appointment's length in minutes (or the length the bookable starts are asked for).
    DurationMinutes,
    /// The appointment a reschedule moves.
    AppointmentId,
    /// The slot a reschedule moves the appointment to.
    NewSlotId,
    /// The doctor whose slots, schedule or waitlist the operation is about.
    DoctorId,
    /// The doctor's day (of a published schedule, of a waitlist entry).
    Date,
    /// The end of the range of slots to close.
    To,
    /// Why slots are closed.
    Reason,
    /// A new doctor's name.
    Name,
    /// A new doctor's specialty.
    Specialty,
    /// A new doctor's time zone.
    Timezone,
    /// The local time a published schedule starts at.
    StartTime,
    /// The local time a published schedule ends at.
    EndTime,
    /// The length of each published slot.
    SlotMinutes,
    /// The seats of each published slot.
    Capacity,
    /// A patient's email address.
    Email,
    /// A patient's phone number.
    Phone,
    /// The locale of a patient's messages.
    Locale,
    /// A webhook endpoint's URL.
    Url,
    /// The webhook endpoint whose deliveries are listed.
    EndpointId,
    /// The webhook delivery to send again.
    DeliveryId,
    /// How many items a page holds.
    First,
    /// Where a page starts (a cursor of the previous page).
    After,
    /// The start of a window searched (the slot search's `from`).
    From,
    /// The doctors a search is limited to.
    DoctorIds,
    /// The days of the week a search is limited to.
    Weekdays,
    /// The local time of day a searched slot starts at or after.
    EarliestTime,
    /// The local time of day a searched slot starts before.
    LatestTime,
    /// The first day of a working-hours pattern.
    ValidFrom,
    /// The week of a working-hours pattern (the message names the interval).
    Weekly,
    /// The provider of an identity link.
    Issuer,
    /// The provider's subject of an identity link.
    Subject,
}

impl Field {
    /// The value's name as callers write it in a request (`slotId`), which the transports use
    /// unless they have a name of their own. No wildcard: a new field does not compile until
    /// it has a name here.
    pub fn name(self) -> &'static str {
        match self {
            Self::Id => "id",
            Self::PatientId => "patientId",
            Self::SlotId => "slotId",
            Self::IdempotencyKey => "idempotencyKey",
            Self::DurationMinutes => "durationMinutes",
            Self::AppointmentId => "appointmentId",
            Self::NewSlotId => "newSlotId",
            Self::DoctorId => "doctorId",
            Self::Date => "date",
            Self::To => "to",
            Self::Reason => "reason",
            Self::Name => "name",
            Self::Specialty => "specialty",
            Self::Timezone => "timezone",
            Self::StartTime => "startTime",
            Self::EndTime => "endTime",
            Self::SlotMinutes => "slotMinutes",
            Self::Capacity => "capacity",
            Self::Email => "email",
            Self::Phone => "phone",
            Self::Locale => "locale",
            Self::Url => "url",
            Self::EndpointId => "endpointId",
            Self::DeliveryId => "deliveryId",
            Self::First => "first",
            Self::After => "after",
            Self::From => "from",
            Self::DoctorIds => "doctorIds",
            Self::Weekdays => "weekdays",
            Self::EarliestTime => "earliestTime",
            Self::LatestTime => "latestTime",
            Self::ValidFrom => "validFrom",
            Self::Weekly => "weekly",
            Self::Issuer => "issuer",
            Self::Subject => "subject",
        }
    }
}

/// Where an operation took a value from. The same field may come either way (a booking's
/// patient is a field of its request, the patient whose contact details are read is a
/// parameter), and callers name the two apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Place {
    /// A field of the request the operation takes as one value (a booking's, a new doctor's,
    /// a new webhook endpoint's, …).
    Request,
    /// A parameter of the operation itself (the id of the record it is about, a page's size).
    Parameter,
}

/// The value an answer is about: which one, and where the operation took it from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fault {
    /// Which value.
    pub field: Field,
    /// Where the operation took it from.
    pub place: Place,
}

impl Field {
    /// This field of the operation's request.
    pub const fn in_request(self) -> Fault {
        Fault { field: self, place: Place::Request }
    }

    /// This parameter of the operation.
    pub const fn as_param(self) -> Fault {
        Fault { field: self, place: Place::Parameter }
    }
}

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
    /// The patient missed `NO_SHOW_LIMIT` or more appointments in the last 365 days.
    NoShowLimitReached,
    /// The provider's identity already has a patient.
    IdentityAlreadyLinked,
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
            Self::NoShowLimitReached => "NO_SHOW_LIMIT_REACHED",
            Self::IdentityAlreadyLinked => "IDENTITY_ALREADY_LINKED",
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
    /// The value at fault, when one is.
    pub field: Option<Fault>,
}

impl Refusal {
    /// A refusal with no particular field.
    pub fn new(code: RefusalCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), field: None }
    }

    /// An `INVALID_INPUT` refusal about one value.
    pub fn invalid(field: Fault, message: impl Into<String>) -> Self {
        Self::about(RefusalCode::InvalidInput, field, message)
    }

    /// A refusal about one value.
    pub fn about(code: RefusalCode, field: Fault, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), field: Some(field) }
    }

    // The refusals every seat-taking operation words the same way.

    /// `SLOT_NOT_FOUND`, about the field that named the slot.
    pub(crate) fn slot_not_found(field: Fault) -> Self {
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
    pub(crate) fn key_reused(field: Fault) -> Self {
        Self::about(
            RefusalCode::IdempotencyKeyReused,
            field,
            "this idempotency key was used for a different request; use a new key",
        )
    }

    /// `APPOINTMENT_NOT_FOUND`, about the field that named the appointment.
    pub(crate) fn appointment_not_found(field: Fault) -> Self {
        Self::about(RefusalCode::AppointmentNotFound, field, "no appointment with this id")
    }

    /// `APPOINTMENT_NOT_ACTIVE`, about the field that named the appointment.
    pub(crate) fn not_active(field: Fault) -> Self {
        Self::about(RefusalCode::AppointmentNotActive, field, "this appointment is cancelled or expired")
    }

    /// `APPOINTMENT_NOT_ACTIVE` for a desk move from a state it does not start from.
    pub(crate) fn not_in_state(field: Fault, status: &str) -> Self {
        Self::about(RefusalCode::AppointmentNotActive, field, format!("this appointment is {status}"))
    }

    /// `NO_SHOW_LIMIT_REACHED`.
    pub(crate) fn no_show_limit() -> Self {
        Self::new(
            RefusalCode::NoShowLimitReached,
            "this patient missed too many appointments in the last 365 days to book online; please call the clinic",
        )
    }

    /// `HOLD_EXPIRED`, about the field that named the appointment.
    pub(crate) fn hold_expired(field: Fault) -> Self {
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
        /// The value at fault.
        field: Fault,
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
    /// The database failed; details go to the log only, and its class
    /// ([`StoreError::class`]) decides the code.
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
            Self::Store(e) => match e.class() {
                FailureClass::Unavailable => "UNAVAILABLE",
                FailureClass::Overloaded => "OVERLOADED",
                FailureClass::Constraint | FailureClass::Internal => "INTERNAL",
            },
        }
    }

    /// An `INVALID_INPUT` error about one value.
    pub fn invalid(field: Fault, message: impl Into<String>) -> Self {
        Self::InvalidInput { message: message.into(), field }
    }
}

/// Answer of an operation that reports refusals as data.
pub type Outcome<T> = Result<Result<T, Refusal>, ServiceError>;
