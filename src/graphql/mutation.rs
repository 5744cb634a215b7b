//! The booking part of the `Mutation` root: thin resolvers over [`BookingService`].

use async_graphql::{Context, Object, Result, ID};

use super::{
    context::caller,
    error::IntoGraphql,
    types::{
        Appointment, BookAppointmentInput, BookAppointmentPayload, CancelAppointmentPayload, CreateDoctorInput, Doctor,
        PublishScheduleInput, PublishSchedulePayload, Slot,
    },
};
use crate::booking::{BookRequest, BookingService, NewDoctor, PublishRequest};

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
        let req = BookRequest {
            slot_id: input.slot_id.0,
            idempotency_key: input.idempotency_key,
            patient_id: input.patient_id.map(|p| p.0),
        };
        let outcome = ctx.data::<BookingService>()?.book(caller(ctx)?, &req).await.gql()?;
        Ok(match outcome {
            Ok(b) => BookAppointmentPayload {
                appointment: Some(Appointment(b.appointment)),
                replayed: b.replayed,
                user_errors: vec![],
            },
            Err(r) => BookAppointmentPayload { appointment: None, replayed: false, user_errors: vec![r.into()] },
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
