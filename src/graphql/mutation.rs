//! The booking part of the `Mutation` root: thin resolvers over [`BookingService`].

use async_graphql::{Context, Object, Result, ID};

use super::{
    context::caller,
    error::IntoGraphql,
    types::{
        Appointment, BookAppointmentInput, BookAppointmentPayload, CancelAppointmentPayload, CloseSlotsInput,
        CloseSlotsPayload, ConfirmAppointmentPayload, CreateDoctorInput, Doctor, HoldSlotInput, HoldSlotPayload,
        PublishScheduleInput, PublishSchedulePayload, RescheduleAppointmentInput, RescheduleAppointmentPayload, Slot,
    },
};
use crate::booking::{BookRequest, BookingService, CloseRequest, NewDoctor, PublishRequest, RescheduleRequest};

/// Write operations on doctors, schedules and appointments.
#[derive(Default)]
pub struct BookingMutation;

#[Object]
impl BookingMutation {
    /// Creates a doctor. Admins only.
    async fn create_doctor(&self, ctx: &Context<'_>, input: CreateDoctorInput) -> Result<Doctor> {
        let new = NewDoctor { name: input.name, specialty: input.specialty, timezone: input.timezone };
        Ok(Doctor(ctx.data::<BookingService>()?.create_doctor(caller(ctx)?, new).await.gql()?))
    }

    /// Creates a day's slots in the doctor's zone; safe to re-run (existing slots are kept and
    /// counted in `existing`). Admins, or that doctor.
    async fn publish_schedule(&self, ctx: &Context<'_>, input: PublishScheduleInput) -> Result<PublishSchedulePayload> {
        let req = PublishRequest {
            doctor_id: input.doctor_id.0,
            date: input.date.0,
            start_time: input.start_time,
            end_time: input.end_time,
            slot_minutes: input.slot_minutes,
            capacity: input.capacity,
        };
        let done = ctx.data::<BookingService>()?.publish_schedule(caller(ctx)?, req).await.gql()?;
        Ok(PublishSchedulePayload {
            slots: done.slots.into_iter().map(Slot).collect(),
            created: i32::try_from(done.created).unwrap_or(i32::MAX),
            existing: i32::try_from(done.existing).unwrap_or(i32::MAX),
        })
    }

    /// Books a seat. Refusals (SLOT_FULL, ALREADY_BOOKED, …) come back in `userErrors`.
    async fn book_appointment(&self, ctx: &Context<'_>, input: BookAppointmentInput) -> Result<BookAppointmentPayload> {
        let req = BookRequest::from(input);
        let outcome = ctx.data::<BookingService>()?.book(caller(ctx)?, &req).await.gql()?;
        super::record_outcome(&outcome);
        Ok(match outcome {
            Ok(b) => BookAppointmentPayload {
                appointment: Some(Appointment(b.appointment)),
                replayed: b.replayed,
                user_errors: vec![],
            },
            Err(r) => BookAppointmentPayload { appointment: None, replayed: false, user_errors: vec![r.into()] },
        })
    }

    /// Holds a seat until now + `HOLD_TTL_SECS` (600 by default), like a booking in every
    /// other way; `confirmAppointment` makes it a booking, else it expires and its seat is
    /// given back.
    async fn hold_slot(&self, ctx: &Context<'_>, input: HoldSlotInput) -> Result<HoldSlotPayload> {
        let req = BookRequest {
            slot_id: input.slot_id.0,
            idempotency_key: input.idempotency_key,
            patient_id: input.patient_id.map(|p| p.0),
            duration_minutes: input.duration_minutes,
        };
        let outcome = ctx.data::<BookingService>()?.hold(caller(ctx)?, &req).await.gql()?;
        super::record_outcome(&outcome);
        Ok(match outcome {
            Ok(b) => HoldSlotPayload {
                appointment: Some(Appointment(b.appointment)),
                replayed: b.replayed,
                user_errors: vec![],
            },
            Err(r) => HoldSlotPayload { appointment: None, replayed: false, user_errors: vec![r.into()] },
        })
    }

    /// Makes a hold a booking, while it has not run out. Whoever may cancel it may confirm it.
    async fn confirm_appointment(&self, ctx: &Context<'_>, id: ID) -> Result<ConfirmAppointmentPayload> {
        let outcome = ctx.data::<BookingService>()?.confirm(caller(ctx)?, &id).await.gql()?;
        Ok(match outcome {
            Ok(c) => ConfirmAppointmentPayload {
                appointment: Some(Appointment(c.appointment)),
                confirmed: c.confirmed,
                user_errors: vec![],
            },
            Err(r) => ConfirmAppointmentPayload { appointment: None, confirmed: false, user_errors: vec![r.into()] },
        })
    }

    /// Moves an appointment to the run of slots starting at `newSlotId`, all or nothing: the
    /// old one is cancelled and a new one takes its patient, status, expiry and length.
    async fn reschedule_appointment(
        &self,
        ctx: &Context<'_>,
        input: RescheduleAppointmentInput,
    ) -> Result<RescheduleAppointmentPayload> {
        let req = RescheduleRequest {
            appointment_id: input.appointment_id.0,
            new_slot_id: input.new_slot_id.0,
            idempotency_key: input.idempotency_key,
        };
        let outcome = ctx.data::<BookingService>()?.reschedule(caller(ctx)?, &req).await.gql()?;
        Ok(match outcome {
            Ok(r) => RescheduleAppointmentPayload {
                appointment: Some(Appointment(r.appointment)),
                previous: Some(Appointment(r.previous)),
                replayed: r.replayed,
                user_errors: vec![],
            },
            Err(r) => RescheduleAppointmentPayload {
                appointment: None,
                previous: None,
                replayed: false,
                user_errors: vec![r.into()],
            },
        })
    }

    /// Closes the doctor's slots starting in `[from, to)` and cancels their active
    /// appointments, for the clinic. Admins, or that doctor.
    async fn close_slots(&self, ctx: &Context<'_>, input: CloseSlotsInput) -> Result<CloseSlotsPayload> {
        let req = CloseRequest { doctor_id: input.doctor_id.0, from: input.from, to: input.to, reason: input.reason };
        let outcome = ctx.data::<BookingService>()?.close_slots(caller(ctx)?, &req).await.gql()?;
        Ok(match outcome {
            Ok(c) => CloseSlotsPayload {
                closed: i32::try_from(c.closed).unwrap_or(i32::MAX),
                cancelled_appointments: c.cancelled.into_iter().map(Appointment).collect(),
                user_errors: vec![],
            },
            Err(r) => CloseSlotsPayload { closed: 0, cancelled_appointments: vec![], user_errors: vec![r.into()] },
        })
    }

    /// Cancels an appointment, releasing its seat once; cancelling again changes nothing.
    async fn cancel_appointment(&self, ctx: &Context<'_>, id: ID) -> Result<CancelAppointmentPayload> {
        let outcome = ctx.data::<BookingService>()?.cancel(caller(ctx)?, &id).await.gql()?;
        Ok(match outcome {
            Ok(c) => CancelAppointmentPayload {
                appointment: Some(Appointment(c.appointment)),
                cancelled: c.cancelled,
                user_errors: vec![],
            },
            Err(r) => CancelAppointmentPayload { appointment: None, cancelled: false, user_errors: vec![r.into()] },
        })
    }
}
