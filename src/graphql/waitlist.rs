//! The waitlist part of the API: `joinWaitlist`, `leaveWaitlist`, `myWaitlist`, thin over
//! [`BookingService`].

use async_graphql::{Context, Enum, InputObject, Object, Result, SimpleObject, ID};
use chrono::{DateTime, NaiveDate, Utc};

use super::{
    context::caller,
    error::{internal, IntoGraphql},
    loaders::Loaders,
    scalars::Date,
    types::{Appointment, Doctor, UserError},
    RequestContext,
};
use crate::{
    booking::{read::access, BookingService, JoinRequest},
    db::entity::waitlist_entry,
    model,
};

/// Where a waitlist entry is.
#[derive(Enum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum WaitlistStatus {
    /// Waiting for a seat.
    Waiting,
    /// A freed seat is held for the patient: see `offer` (confirm it with `confirmAppointment`).
    Offered,
    /// The offer was confirmed.
    Fulfilled,
    /// The offer expired or was cancelled; the seat went to the next in line.
    Lapsed,
    /// The patient stopped waiting.
    Left,
}

impl From<model::WaitlistStatus> for WaitlistStatus {
    fn from(s: model::WaitlistStatus) -> Self {
        match s {
            model::WaitlistStatus::Waiting => Self::Waiting,
            model::WaitlistStatus::Offered => Self::Offered,
            model::WaitlistStatus::Fulfilled => Self::Fulfilled,
            model::WaitlistStatus::Lapsed => Self::Lapsed,
            model::WaitlistStatus::Left => Self::Left,
        }
    }
}

/// A patient waiting for a seat with a doctor on a day.
pub struct WaitlistEntry(waitlist_entry::Model);

/// A patient waiting for a seat with a doctor on a day.
#[Object(serial)]
impl WaitlistEntry {
    /// Stable id.
    async fn id(&self) -> ID {
        ID(self.0.id.to_string())
    }

    /// The doctor.
    async fn doctor(&self, ctx: &Context<'_>) -> Result<Doctor> {
        let found = ctx.data::<Loaders>()?.doctors.load_one(self.0.doctor_id).await.map_err(|e| {
            tracing::error!(error = %e, "loader failed");
            internal()
        })?;
        found.map(Doctor).ok_or_else(internal)
    }

    /// The day waited for, in the doctor's zone.
    async fn date(&self) -> Result<Date> {
        NaiveDate::parse_from_str(&self.0.date, "%Y-%m-%d").map(Date).map_err(|_| internal())
    }

    /// The patient waiting.
    async fn patient_id(&self) -> ID {
        ID(self.0.patient_id.to_string())
    }

    /// Where the entry is.
    async fn status(&self) -> WaitlistStatus {
        self.0.status().into()
    }

    /// When the patient joined (entries are served in this order).
    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }

    /// The hold made for the patient when a seat was offered, when the caller may see it.
    async fn offer(&self, ctx: &Context<'_>) -> Result<Option<Appointment>> {
        let (Some(id), Some(caller)) = (self.0.offer_appointment_id, ctx.data::<RequestContext>()?.principal.caller())
        else {
            return Ok(None);
        };
        let found = ctx.data::<Loaders>()?.appointments.load_one(id).await.map_err(|e| {
            tracing::error!(error = %e, "loader failed");
            internal()
        })?;
        Ok(found.filter(|r| caller.may_see(access(r))).map(|r| Appointment(r.appointment)))
    }
}

/// A request to wait for a seat.
#[derive(InputObject, Debug)]
pub struct JoinWaitlistInput {
    /// The doctor.
    pub doctor_id: ID,
    /// The day, in the doctor's zone (not one that has ended).
    pub date: Date,
    /// 1–64 characters from `!` to `~`, unique per caller per join; retries reuse it.
    pub idempotency_key: String,
    /// The patient; partners and admins must pass it, patients may pass their own.
    pub patient_id: Option<ID>,
}

/// The answer to `joinWaitlist`.
#[derive(SimpleObject)]
#[graphql(serial)]
pub struct JoinWaitlistPayload {
    /// The entry (OFFERED at once when a seat was free), unless refused.
    pub entry: Option<WaitlistEntry>,
    /// True when this answers a retry of an earlier join with the same key.
    pub replayed: bool,
    /// Why the join was refused (ALREADY_ON_WAITLIST, INVALID_INPUT, …); empty otherwise.
    pub user_errors: Vec<UserError>,
}

/// The answer to `leaveWaitlist`.
#[derive(SimpleObject)]
#[graphql(serial)]
pub struct LeaveWaitlistPayload {
    /// The entry as it is now, unless refused.
    pub entry: Option<WaitlistEntry>,
    /// True when this call took it off the waitlist; false when it was not waiting.
    pub left: bool,
    /// Why the leave was refused (INVALID_INPUT on `id`: malformed, unknown, or not the
    /// caller's); empty otherwise.
    pub user_errors: Vec<UserError>,
}

/// Waitlist reads.
#[derive(Default)]
pub struct WaitlistQuery;

#[Object]
impl WaitlistQuery {
    /// The caller's waitlist entries, newest first (at most 500): a patient's own, those a
    /// partner made, every one for an admin.
    async fn my_waitlist(&self, ctx: &Context<'_>) -> Result<Vec<WaitlistEntry>> {
        let entries = ctx.data::<BookingService>()?.my_waitlist(caller(ctx)?).await.gql()?;
        Ok(entries.into_iter().map(WaitlistEntry).collect())
    }
}

/// Waitlist writes.
#[derive(Default)]
pub struct WaitlistMutation;

#[Object]
impl WaitlistMutation {
    /// Waits for a seat with a doctor on a day. A seat that frees (a cancel, an expiry, a
    /// reschedule away) is held for the longest-waiting patient who can take it, for
    /// `WAITLIST_OFFER_SECS`; a seat free when joining is offered at once.
    async fn join_waitlist(&self, ctx: &Context<'_>, input: JoinWaitlistInput) -> Result<JoinWaitlistPayload> {
        let req = JoinRequest {
            doctor_id: input.doctor_id.0,
            date: input.date.0,
            idempotency_key: input.idempotency_key,
            patient_id: input.patient_id.map(|p| p.0),
        };
        let outcome = ctx.data::<BookingService>()?.join_waitlist(caller(ctx)?, &req).await.gql()?;
        Ok(match outcome {
            Ok(j) => {
                JoinWaitlistPayload { entry: Some(WaitlistEntry(j.entry)), replayed: j.replayed, user_errors: vec![] }
            }
            Err(r) => JoinWaitlistPayload { entry: None, replayed: false, user_errors: vec![r.into()] },
        })
    }

    /// Stops waiting. An OFFERED entry leaves by cancelling its offer (`cancelAppointment`).
    async fn leave_waitlist(&self, ctx: &Context<'_>, id: ID) -> Result<LeaveWaitlistPayload> {
        let outcome = ctx.data::<BookingService>()?.leave_waitlist(caller(ctx)?, &id).await.gql()?;
        Ok(match outcome {
            Ok(l) => LeaveWaitlistPayload { entry: Some(WaitlistEntry(l.entry)), left: l.left, user_errors: vec![] },
            Err(r) => LeaveWaitlistPayload { entry: None, left: false, user_errors: vec![r.into()] },
        })
    }
}
