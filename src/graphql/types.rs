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

use super::{
    context::record_stamp,
    error::{field_path, internal},
    loaders::Loaders,
    scalars::Date,
};
use crate::{
    booking::read::doctor_day,
    db::entity::{appointment, doctor, time_slot},
    error::{Refusal, RefusalCode},
    model,
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
        // Taken before the read: an answer that holds this day is kept only while it is current.
        if let Some(service) = ctx.data_opt::<crate::booking::BookingService>() {
            record_stamp(ctx, Some(service.slots_stamp(self.0.id)));
        }
        let rows = ctx.data::<Loaders>()?.day_slots.load_one(range).await.map_err(loader_error)?;
        Ok(rows.unwrap_or_default().into_iter().map(Slot).collect())
    }

    /// The working-hours pattern in force today, then the later ones, by first day (ended
    /// ones left out).
    async fn working_hours(&self, ctx: &Context<'_>) -> Result<Vec<super::hours::WorkingHours>> {
        let patterns = ctx.data::<crate::booking::BookingService>()?.working_hours(&self.0).await;
        Ok(patterns.map_err(super::error::to_graphql)?.into_iter().map(Into::into).collect())
    }

    /// Its time off and the clinic's, in force and overlapping `[from, to)` (either end may be
    /// left out), by start.
    async fn time_off(
        &self,
        ctx: &Context<'_>,
        from: Option<DateTime<Utc>>,
        to: Option<DateTime<Utc>>,
    ) -> Result<Vec<super::hours::TimeOff>> {
        let rows = ctx.data::<crate::booking::BookingService>()?.time_off(Some(self.0.id), from, to).await;
        Ok(rows.map_err(super::error::to_graphql)?.into_iter().map(super::hours::TimeOff).collect())
    }

    /// The last day, in its zone, whose slots its working hours have made; null before any.
    async fn scheduled_through(&self, ctx: &Context<'_>) -> Result<Option<Date>> {
        let day = ctx.data::<crate::booking::BookingService>()?.scheduled_through(self.0.id).await;
        Ok(day.map_err(super::error::to_graphql)?.map(Date))
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

    /// Seats taken: always the number of HELD and BOOKED appointments in it.
    async fn booked_count(&self) -> i32 {
        self.0.booked_count
    }

    /// Seats left (none in a closed slot).
    async fn available(&self) -> i32 {
        self.0.available()
    }

    /// Closed by the clinic: it takes no seat again.
    async fn closed(&self) -> bool {
        self.0.closed_at.is_some()
    }

    /// Increases with every change of the slot (of `bookedCount`, and its closing).
    async fn version(&self) -> i64 {
        self.0.version
    }
}

/// Where an appointment is in its life. HELD, BOOKED, ARRIVED, FULFILLED and NOSHOW take a
/// seat; only HELD and BOOKED may still be cancelled or rescheduled.
#[derive(Enum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum AppointmentStatus {
    /// A seat kept until `expiresAt`, waiting for `confirmAppointment`.
    Held,
    /// A confirmed seat.
    Booked,
    /// Cancelled; the seat was given back.
    Cancelled,
    /// A hold that was not confirmed in time; the seat was given back.
    Expired,
    /// The patient checked in at the desk (`arrivedAt`).
    Arrived,
    /// The patient was seen (`completedAt`).
    Fulfilled,
    /// The patient did not come.
    #[graphql(name = "NOSHOW")]
    NoShow,
}

impl From<model::AppointmentStatus> for AppointmentStatus {
    fn from(s: model::AppointmentStatus) -> Self {
        match s {
            model::AppointmentStatus::Held => Self::Held,
            model::AppointmentStatus::Booked => Self::Booked,
            model::AppointmentStatus::Cancelled => Self::Cancelled,
            model::AppointmentStatus::Expired => Self::Expired,
            model::AppointmentStatus::Arrived => Self::Arrived,
            model::AppointmentStatus::Fulfilled => Self::Fulfilled,
            model::AppointmentStatus::NoShow => Self::NoShow,
        }
    }
}

/// Who cancelled an appointment.
#[derive(Enum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum CancelledBy {
    /// The patient.
    Patient,
    /// A partner acting for the patient.
    Partner,
    /// The clinic (a doctor or an admin; closing slots included).
    Clinic,
}

impl From<model::CancelledBy> for CancelledBy {
    fn from(c: model::CancelledBy) -> Self {
        match c {
            model::CancelledBy::Patient => Self::Patient,
            model::CancelledBy::Partner => Self::Partner,
            model::CancelledBy::Clinic => Self::Clinic,
        }
    }
}

/// A seat (or a run of seats) in a doctor's slots held by a patient.
pub struct Appointment(pub(crate) appointment::Model);

/// A seat (or a run of seats) in a doctor's slots held by a patient.
#[Object(serial)]
impl Appointment {
    /// Stable id.
    async fn id(&self) -> ID {
        ID(self.0.id.to_string())
    }

    /// The first slot.
    async fn slot(&self, ctx: &Context<'_>) -> Result<Slot> {
        let found = ctx.data::<Loaders>()?.slots.load_one(self.0.slot_id).await.map_err(loader_error)?;
        found.map(Slot).ok_or_else(|| missing("slot", self.0.slot_id))
    }

    /// Every slot it takes a seat in, by start (one, unless it is longer than a slot).
    async fn slots(&self, ctx: &Context<'_>) -> Result<Vec<Slot>> {
        let loaders = ctx.data::<Loaders>()?;
        let ids = if self.0.slot_count > 1 {
            let further = loaders.further_slots.load_one(self.0.id).await.map_err(loader_error)?;
            std::iter::once(self.0.slot_id).chain(further.unwrap_or_default()).collect()
        } else {
            vec![self.0.slot_id]
        };
        let found = loaders.slots.load_many(ids.iter().copied()).await.map_err(loader_error)?;
        let mut slots: Vec<_> = ids.iter().filter_map(|id| found.get(id).cloned()).collect();
        if slots.len() != ids.len() {
            return Err(missing("slot of appointment", self.0.id));
        }
        slots.sort_unstable_by_key(|s| s.start_at);
        Ok(slots.into_iter().map(Slot).collect())
    }

    /// The patient holding it.
    async fn patient_id(&self) -> ID {
        ID(self.0.patient_id.to_string())
    }

    /// Where it is in its life.
    async fn status(&self) -> AppointmentStatus {
        self.0.status().into()
    }

    /// Start of its first slot.
    async fn start_at(&self) -> DateTime<Utc> {
        self.0.start_at
    }

    /// End of its last slot.
    async fn end_at(&self) -> DateTime<Utc> {
        self.0.end_at
    }

    /// Until when a hold keeps its seat: set while HELD, kept on EXPIRED.
    async fn expires_at(&self) -> Option<DateTime<Utc>> {
        self.0.expires_at
    }

    /// When it was made.
    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }

    /// When it was cancelled.
    async fn cancelled_at(&self) -> Option<DateTime<Utc>> {
        self.0.cancelled_at
    }

    /// When the patient checked in (set from ARRIVED on).
    async fn arrived_at(&self) -> Option<DateTime<Utc>> {
        self.0.arrived_at
    }

    /// When the patient was seen (set on FULFILLED).
    async fn completed_at(&self) -> Option<DateTime<Utc>> {
        self.0.completed_at
    }

    /// Who cancelled it (for a reschedule: whoever rescheduled).
    async fn cancelled_by(&self) -> Option<CancelledBy> {
        self.0.cancelled_by.as_deref().and_then(model::CancelledBy::parse).map(Into::into)
    }

    /// The appointment this one replaced, when the caller may see it.
    async fn rescheduled_from(&self, ctx: &Context<'_>) -> Result<Option<Appointment>> {
        linked(ctx, self.0.rescheduled_from).await
    }

    /// The appointment that replaced this one, when the caller may see it.
    async fn rescheduled_to(&self, ctx: &Context<'_>) -> Result<Option<Appointment>> {
        linked(ctx, self.0.rescheduled_to).await
    }
}

/// A linked appointment, by the same visibility rule as every other one.
async fn linked(ctx: &Context<'_>, id: Option<i64>) -> Result<Option<Appointment>> {
    let Some(id) = id else {
        return Ok(None);
    };
    let Some(caller) = ctx.data::<super::RequestContext>()?.principal.caller() else {
        return Ok(None);
    };
    let found = ctx.data::<Loaders>()?.appointments.load_one(id).await.map_err(loader_error)?;
    Ok(found.filter(|r| caller.may_see(crate::booking::read::access(r))).map(|r| Appointment(r.appointment)))
}

pub(super) fn loader_error(err: std::sync::Arc<crate::db::StoreError>) -> async_graphql::Error {
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
    /// The patient already holds a seat (HELD or BOOKED) in this slot.
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
            RefusalCode::HoldExpired => Self::HoldExpired,
            RefusalCode::AppointmentNotActive => Self::AppointmentNotActive,
            RefusalCode::SlotClosed => Self::SlotClosed,
            RefusalCode::AlreadyOnWaitlist => Self::AlreadyOnWaitlist,
            RefusalCode::NoShowLimitReached => Self::NoShowLimitReached,
            RefusalCode::IdentityAlreadyLinked => Self::IdentityAlreadyLinked,
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
        let field = r.field.map(|f| field_path(f).map(str::to_owned).collect());
        Self { code: r.code.into(), message: r.message, field }
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
    /// The appointment's length in minutes (default: the slot's own length); it takes a seat
    /// in `slotId` and in each following slot starting where the previous one ends.
    pub duration_minutes: Option<i32>,
}

/// The service's request: the one reading of the input, for the resolver and the direct path
/// (`graphql::answer::book`) alike.
impl From<BookAppointmentInput> for crate::booking::BookRequest {
    fn from(input: BookAppointmentInput) -> Self {
        Self {
            slot_id: input.slot_id.0,
            idempotency_key: input.idempotency_key,
            patient_id: input.patient_id.map(|p| p.0),
            duration_minutes: input.duration_minutes,
        }
    }
}

/// A hold request: a seat kept for `HOLD_TTL_SECS` until `confirmAppointment`.
#[derive(InputObject, Debug)]
pub struct HoldSlotInput {
    /// The slot (the first one, for a longer appointment).
    pub slot_id: ID,
    /// As for `bookAppointment`; the key space is shared with it.
    pub idempotency_key: String,
    /// The patient; partners and admins must pass it, patients may pass their own.
    pub patient_id: Option<ID>,
    /// The appointment's length in minutes (default: the slot's own length).
    pub duration_minutes: Option<i32>,
}

/// A reschedule request.
#[derive(InputObject, Debug)]
pub struct RescheduleAppointmentInput {
    /// The appointment to move.
    pub appointment_id: ID,
    /// The first slot of its new place (it keeps its length).
    pub new_slot_id: ID,
    /// As for `bookAppointment`; retries reuse it.
    pub idempotency_key: String,
}

/// A range of a doctor's slots to close.
#[derive(InputObject, Debug)]
pub struct CloseSlotsInput {
    /// The doctor.
    pub doctor_id: ID,
    /// Slots starting at or after this instant are closed…
    pub from: DateTime<Utc>,
    /// …up to this one (exclusive).
    pub to: DateTime<Utc>,
    /// Why (kept with the slots; at most 500 characters).
    pub reason: Option<String>,
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

/// The answer to `holdSlot`.
#[derive(SimpleObject)]
#[graphql(serial)]
pub struct HoldSlotPayload {
    /// The held appointment, unless refused.
    pub appointment: Option<Appointment>,
    /// True when this answers a retry of an earlier success with the same key.
    pub replayed: bool,
    /// Why the hold was refused; empty on success.
    pub user_errors: Vec<UserError>,
}

/// The answer to `confirmAppointment`.
#[derive(SimpleObject)]
#[graphql(serial)]
pub struct ConfirmAppointmentPayload {
    /// The appointment as it is now, unless refused.
    pub appointment: Option<Appointment>,
    /// True when this call confirmed it; false when it was booked already.
    pub confirmed: bool,
    /// Why the confirm was refused (HOLD_EXPIRED, APPOINTMENT_NOT_ACTIVE, …); empty otherwise.
    pub user_errors: Vec<UserError>,
}

/// The answer to `rescheduleAppointment`.
#[derive(SimpleObject)]
#[graphql(serial)]
pub struct RescheduleAppointmentPayload {
    /// The new appointment, unless refused.
    pub appointment: Option<Appointment>,
    /// The old one, as it is now (cancelled, linked to the new one), unless refused.
    pub previous: Option<Appointment>,
    /// True when this answers a retry of an earlier success with the same key.
    pub replayed: bool,
    /// Why the reschedule was refused; empty on success (nothing changed then).
    pub user_errors: Vec<UserError>,
}

/// The answer to `closeSlots`.
#[derive(SimpleObject)]
#[graphql(serial)]
pub struct CloseSlotsPayload {
    /// Slots this call closed (closing again counts none).
    pub closed: i32,
    /// The appointments this call cancelled, by start.
    pub cancelled_appointments: Vec<Appointment>,
    /// Why the close was refused; empty otherwise.
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

/// The answer to `checkInAppointment`, `completeAppointment` and `markNoShow`.
#[derive(SimpleObject)]
#[graphql(serial)]
pub struct AppointmentTransitionPayload {
    /// The appointment as it is now, unless refused.
    pub appointment: Option<Appointment>,
    /// True when this call moved it; false when it was already in the target state.
    pub changed: bool,
    /// Why the move was refused; empty otherwise.
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
    /// Seats left (none in a closed slot).
    pub available: i32,
    /// Increases with every change; drop an event whose version is not above the last seen.
    pub version: i64,
    /// Closed by the clinic: it takes no seat again.
    pub closed: bool,
}

impl From<&crate::events::SlotChange> for SlotAvailabilityEvent {
    fn from(c: &crate::events::SlotChange) -> Self {
        Self {
            slot_id: ID(c.slot_id.to_string()),
            doctor_id: ID(c.doctor_id.to_string()),
            start_at: c.start_at,
            capacity: c.capacity,
            booked_count: c.booked_count,
            available: c.available(),
            version: c.version,
            closed: c.closed,
        }
    }
}
