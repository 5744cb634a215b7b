//! The day at the front desk: `daySheet` and the desk's moves (`checkInAppointment`,
//! `completeAppointment`, `markNoShow`), thin over [`BookingService`].

use async_graphql::{Context, Object, Result, ID};

use super::{
    context::caller,
    error::IntoGraphql,
    scalars::Date,
    types::{Appointment, AppointmentTransitionPayload},
};
use crate::booking::{BookingService, DeskMove};

/// The desk's reads.
#[derive(Default)]
pub struct DeskQuery;

#[Object]
impl DeskQuery {
    /// The appointments in the doctor's slots of that day (in the doctor's zone), every status
    /// but EXPIRED, by the slot's start then id. Admins, or that doctor (FORBIDDEN otherwise).
    async fn day_sheet(&self, ctx: &Context<'_>, doctor_id: ID, date: Date) -> Result<Vec<Appointment>> {
        let records = ctx.data::<BookingService>()?.day_sheet(caller(ctx)?, &doctor_id, date.0).await.gql()?;
        Ok(records.into_iter().map(|r| Appointment(r.appointment)).collect())
    }
}

/// The desk's moves: each one conditional transition; none gives the seat back.
#[derive(Default)]
pub struct DeskMutation;

#[Object]
impl DeskMutation {
    /// BOOKED → ARRIVED, from one hour before the start to the end of the doctor's day.
    /// Admins, or the appointment's doctor.
    async fn check_in_appointment(&self, ctx: &Context<'_>, id: ID) -> Result<AppointmentTransitionPayload> {
        run(ctx, &id, DeskMove::CheckIn).await
    }

    /// ARRIVED → FULFILLED: the patient was seen. Admins, or the appointment's doctor.
    async fn complete_appointment(&self, ctx: &Context<'_>, id: ID) -> Result<AppointmentTransitionPayload> {
        run(ctx, &id, DeskMove::Complete).await
    }

    /// BOOKED → NOSHOW, once the visit has started. Admins, or the appointment's doctor.
    async fn mark_no_show(&self, ctx: &Context<'_>, id: ID) -> Result<AppointmentTransitionPayload> {
        run(ctx, &id, DeskMove::NoShow).await
    }
}

async fn run(ctx: &Context<'_>, id: &ID, kind: DeskMove) -> Result<AppointmentTransitionPayload> {
    let outcome = ctx.data::<BookingService>()?.desk_move(caller(ctx)?, id, kind).await.gql()?;
    Ok(match outcome {
        Ok(m) => AppointmentTransitionPayload {
            appointment: Some(Appointment(m.appointment)),
            changed: m.changed,
            user_errors: vec![],
        },
        Err(r) => AppointmentTransitionPayload { appointment: None, changed: false, user_errors: vec![r.into()] },
    })
}
