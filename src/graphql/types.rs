//! GraphQL output and input types. Each output type lists its fields by hand over an internal
//! row, so a new column never reaches the API by accident.
//!
//! Output types resolve their fields one after another (`serial`). async-graphql's default
//! polls an object's fields as a `FuturesUnordered`: a task allocation and atomic wake-ups per
//! field, which made up about a fifth of a slot list's CPU (40 slots × 3 fields) while nearly
//! every field is a plain value. Items of a list are still resolved together, so DataLoader
//! calls of sibling objects (a slot's `doctor`, an appointment's `slot`) still share a batch.

use async_graphql::{Context, Enum, InputObject, Object, Result, SimpleObject, ID};
use chrono::{DateTime, Utc};

use super::{error::internal, loaders::Loaders, scalars::Date};
use crate::{
    booking::{read::doctor_day, Refusal, RefusalCode},
    db::entity::{appointment, doctor, time_slot},
};

/// A doctor whose schedule holds slots.
pub struct Doctor(pub(crate) doctor::Model);

/// A doctor whose schedule holds slots.
#[Object(serial)]
impl Doctor {
    /// Stable id.
    async fn id(&self) -> ID {
        ID(self.0.id.to_string())
    }

    /// Display name.
    async fn name(&self) -> &str {
        &self.0.name
    }

    /// Free-text specialty.
    async fn specialty(&self) -> Option<&str> {
        self.0.specialty.as_deref()
    }

    /// IANA time zone; every `date` of this doctor means a day in it.
    async fn timezone(&self) -> &str {
        &self.0.timezone
    }

    /// All slots of that day (in the doctor's zone), full and past ones too, by start.
    async fn slots(&self, ctx: &Context<'_>, date: Date) -> Result<Vec<Slot>> {
        let range = doctor_day(&self.0, date.0).map_err(super::error::to_graphql)?;
        let rows = ctx.data::<Loaders>()?.day_slots.load_one(range).await.map_err(loader_error)?;
        Ok(rows.unwrap_or_default().into_iter().map(Slot).collect())
    }
}

/// A bookable interval of one doctor.
pub struct Slot(pub(crate) time_slot::Model);

/// A bookable interval of one doctor.
#[Object(serial)]
impl Slot {
    /// Stable id.
    async fn id(&self) -> ID {
        ID(self.0.id.to_string())
    }

    /// The doctor.
    async fn doctor(&self, ctx: &Context<'_>) -> Result<Doctor> {
        let found = ctx.data::<Loaders>()?.doctors.load_one(self.0.doctor_id).await.map_err(loader_error)?;
        found.map(Doctor).ok_or_else(|| missing("doctor", self.0.doctor_id))
    }

    /// Start, RFC 3339.
    async fn start_at(&self) -> DateTime<Utc> {
        self.0.start_at
    }

    /// End, RFC 3339.
    async fn end_at(&self) -> DateTime<Utc> {
        self.0.end_at
    }

    /// Seats in total.
    async fn capacity(&self) -> i32 {
        self.0.capacity
    }

    /// Seats taken: always the number of BOOKED appointments.
    async fn booked_count(&self) -> i32 {
        self.0.booked_count
    }

    /// Seats left.
    async fn available(&self) -> i32 {
        self.0.capacity - self.0.booked_count
    }

    /// Increases with every change of `bookedCount`.
    async fn version(&self) -> i64 {
        self.0.version
    }
}

/// Whether an appointment holds its seat.
#[derive(Enum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum AppointmentStatus {
    /// Holds a seat.
    Booked,
    /// Cancelled; the seat was given back.
    Cancelled,
}

/// A seat in a slot held by a patient.
pub struct Appointment(pub(crate) appointment::Model);

/// A seat in a slot held by a patient.
#[Object(serial)]
impl Appointment {
    /// Stable id.
    async fn id(&self) -> ID {
        ID(self.0.id.to_string())
    }

    /// The slot.
    async fn slot(&self, ctx: &Context<'_>) -> Result<Slot> {
        let found = ctx.data::<Loaders>()?.slots.load_one(self.0.slot_id).await.map_err(loader_error)?;
        found.map(Slot).ok_or_else(|| missing("slot", self.0.slot_id))
    }

    /// The patient holding it.
    async fn patient_id(&self) -> ID {
        ID(self.0.patient_id.to_string())
    }

    /// BOOKED or CANCELLED.
    async fn status(&self) -> AppointmentStatus {
        if self.0.status == appointment::CANCELLED {
            AppointmentStatus::Cancelled
        } else {
            AppointmentStatus::Booked
        }
    }

    /// When it was booked.
    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }

    /// When it was cancelled.
    async fn cancelled_at(&self) -> Option<DateTime<Utc>> {
        self.0.cancelled_at
    }
}

fn loader_error(err: std::sync::Arc<crate::db::StoreError>) -> async_graphql::Error {
    tracing::error!(error = %err, "loader failed");
    internal()
}

fn missing(what: &str, id: i64) -> async_graphql::Error {
    tracing::error!(what, id, "referenced row is missing");
    internal()
}

/// The codes of expected refusals.
#[derive(Enum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum UserErrorCode {
    /// No seat left.
    SlotFull,
    /// The patient already holds a BOOKED appointment in this slot.
    AlreadyBooked,
    /// No such slot.
    SlotNotFound,
    /// The slot has started; past slots are never bookable.
    SlotInPast,
    /// This idempotency key was used by this caller for a different request.
    IdempotencyKeyReused,
    /// A value of the input is malformed (see `field`).
    InvalidInput,
    /// No such appointment, or not one the caller may see.
    AppointmentNotFound,
    /// The patient holds another active appointment overlapping this one in time.
    OverlappingAppointment,
}

impl From<RefusalCode> for UserErrorCode {
    fn from(code: RefusalCode) -> Self {
        match code {
            RefusalCode::SlotFull => Self::SlotFull,
            RefusalCode::AlreadyBooked => Self::AlreadyBooked,
            RefusalCode::SlotNotFound => Self::SlotNotFound,
            RefusalCode::SlotInPast => Self::SlotInPast,
            RefusalCode::IdempotencyKeyReused => Self::IdempotencyKeyReused,
            RefusalCode::InvalidInput => Self::InvalidInput,
            RefusalCode::AppointmentNotFound => Self::AppointmentNotFound,
            RefusalCode::OverlappingAppointment => Self::OverlappingAppointment,
        }
    }
}

/// An expected refusal, reported as data.
#[derive(SimpleObject, Clone, Debug)]
#[graphql(serial)]
pub struct UserError {
    /// Machine-readable reason.
    pub code: UserErrorCode,
    /// A sentence for people.
    pub message: String,
    /// Path of the input field at fault, when one is.
    pub field: Option<Vec<String>>,
}

impl From<Refusal> for UserError {
    fn from(r: Refusal) -> Self {
        Self { code: r.code.into(), message: r.message, field: r.field }
    }
}

/// A new doctor.
#[derive(InputObject, Debug)]
pub struct CreateDoctorInput {
    /// Display name (1–200 characters).
    pub name: String,
    /// Free-text specialty.
    pub specialty: Option<String>,
    /// IANA time zone, e.g. `Europe/Paris`; default `UTC`.
    pub timezone: Option<String>,
}

/// A day of slots to publish.
#[derive(InputObject, Debug)]
pub struct PublishScheduleInput {
    /// The doctor.
    pub doctor_id: ID,
    /// The day, in the doctor's time zone.
    pub date: Date,
    /// First slot's start, `HH:MM` local to the doctor.
    pub start_time: String,
    /// End of the last slot, `HH:MM` local (`24:00` = midnight ending the day).
    pub end_time: String,
    /// Minutes per slot (1–1440, default 15).
    pub slot_minutes: Option<i32>,
    /// Seats per slot (≥ 1, default 1).
    pub capacity: Option<i32>,
}

/// A booking request.
#[derive(InputObject, Debug)]
pub struct BookAppointmentInput {
    /// The slot.
    pub slot_id: ID,
    /// 1–64 characters from `!` to `~`, unique per caller per booking; retries reuse it.
    pub idempotency_key: String,
    /// The patient; partners and admins must pass it, patients may pass their own.
    pub patient_id: Option<ID>,
}

/// The answer to `publishSchedule`.
#[derive(SimpleObject)]
#[graphql(serial)]
pub struct PublishSchedulePayload {
    /// Every slot of the published range, new and kept, by start.
    pub slots: Vec<Slot>,
    /// Slots created by this call.
    pub created: i32,
    /// Slots that existed already and were kept.
    pub existing: i32,
}

/// The answer to `bookAppointment`.
#[derive(SimpleObject)]
#[graphql(serial)]
pub struct BookAppointmentPayload {
    /// The appointment, unless refused.
    pub appointment: Option<Appointment>,
    /// True when this answers a retry of an earlier success with the same key.
    pub replayed: bool,
    /// Why the booking was refused; empty on success.
    pub user_errors: Vec<UserError>,
}

/// The answer to `cancelAppointment`.
#[derive(SimpleObject)]
#[graphql(serial)]
pub struct CancelAppointmentPayload {
    /// The appointment as it is now, unless refused.
    pub appointment: Option<Appointment>,
    /// True when this call cancelled it; false when it was cancelled already.
    pub cancelled: bool,
    /// Why the cancel was refused; empty otherwise.
    pub user_errors: Vec<UserError>,
}

/// A slot's state after a committed change (or its current state, first).
#[derive(SimpleObject, Clone, Debug)]
#[graphql(serial)]
pub struct SlotAvailabilityEvent {
    /// The slot.
    pub slot_id: ID,
    /// Its doctor.
    pub doctor_id: ID,
    /// Its start.
    pub start_at: DateTime<Utc>,
    /// Seats in total.
    pub capacity: i32,
    /// Seats taken.
    pub booked_count: i32,
    /// Seats left.
    pub available: i32,
    /// Increases with every change; drop an event whose version is not above the last seen.
    pub version: i64,
}

impl From<&crate::events::SlotChange> for SlotAvailabilityEvent {
    fn from(c: &crate::events::SlotChange) -> Self {
        Self {
            slot_id: ID(c.slot_id.to_string()),
            doctor_id: ID(c.doctor_id.to_string()),
            start_at: c.start_at,
            capacity: c.capacity,
            booked_count: c.booked_count,
            available: c.capacity - c.booked_count,
            version: c.version,
        }
    }
}
