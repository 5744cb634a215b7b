//! Working hours and time off (contract, part three): thin resolvers over
//! [`BookingService`]'s `hours` operations, and their types.

use async_graphql::{Context, InputObject, Object, Result, SimpleObject, ID};
use chrono::{DateTime, Utc};

use super::{
    context::caller,
    error::IntoGraphql,
    scalars::Date,
    types::{loader_error, Appointment, Doctor, UserError},
    weekday::Weekday,
};
use crate::{
    booking::{
        hours::{clock, Interval},
        BookingService, HoursRequest, Pattern, TimeOffRequest, WeeklyRequest,
    },
    db::entity::time_off,
    graphql::loaders::Loaders,
};

/// A `setWorkingHours` request.
#[derive(InputObject, Debug)]
pub struct SetWorkingHoursInput {
    /// The doctor.
    pub doctor_id: ID,
    /// First day the pattern holds, in the doctor's zone (not before today).
    pub valid_from: Date,
    /// The week's intervals; several per weekday allowed, none overlapping. Empty: no hours.
    pub weekly: Vec<WeeklyHoursInput>,
}

/// One interval of a weekday.
#[derive(InputObject, Debug)]
pub struct WeeklyHoursInput {
    /// The day of the week, in the doctor's zone.
    pub weekday: Weekday,
    /// `HH:MM`, local to the doctor.
    pub start_time: String,
    /// `HH:MM`, local to the doctor (`24:00`: midnight at the end of the day).
    pub end_time: String,
    /// Minutes per slot (default 15); the interval must hold at least one.
    pub slot_minutes: Option<i32>,
    /// Seats per slot (default 1).
    pub capacity: Option<i32>,
}

/// A doctor's weekly pattern from its first day on.
#[derive(SimpleObject, Debug)]
#[graphql(serial)]
pub struct WorkingHours {
    /// First day, in the doctor's zone.
    pub valid_from: Date,
    /// Last day (the day before the next pattern's first); null while no later one is set.
    pub valid_until: Option<Date>,
    /// The week's intervals, by weekday and start.
    pub weekly: Vec<WeeklyHours>,
}

/// One interval of a weekday.
#[derive(SimpleObject, Debug)]
#[graphql(serial)]
pub struct WeeklyHours {
    /// The day of the week, in the doctor's zone.
    pub weekday: Weekday,
    /// `HH:MM`, local to the doctor.
    pub start_time: String,
    /// `HH:MM`, local to the doctor.
    pub end_time: String,
    /// Minutes per slot.
    pub slot_minutes: i32,
    /// Seats per slot.
    pub capacity: i32,
}

impl From<Pattern> for WorkingHours {
    fn from(p: Pattern) -> Self {
        Self {
            valid_from: Date(p.valid_from),
            valid_until: p.valid_until.map(Date),
            weekly: p.weekly.iter().map(WeeklyHours::from).collect(),
        }
    }
}

impl From<&Interval> for WeeklyHours {
    fn from(iv: &Interval) -> Self {
        Self {
            weekday: iv.weekday.into(),
            start_time: clock(iv.start_minute),
            end_time: clock(iv.end_minute),
            slot_minutes: i32::try_from(iv.slot_minutes).unwrap_or(i32::MAX),
            capacity: iv.capacity,
        }
    }
}

/// The answer to `setWorkingHours`.
#[derive(SimpleObject)]
#[graphql(serial)]
pub struct SetWorkingHoursPayload {
    /// The pattern just set, unless refused.
    pub working_hours: Option<WorkingHours>,
    /// Slots made by this call.
    pub created: i32,
    /// Slots of the earlier pattern this call took away.
    pub removed: i32,
    /// Active appointments left in slots the new pattern does not have (those slots are kept,
    /// closed); nothing is cancelled.
    pub conflicts: Vec<Appointment>,
    /// Why it was refused; empty otherwise (nothing changed then).
    pub user_errors: Vec<UserError>,
}

/// An `addTimeOff` request.
#[derive(InputObject, Debug)]
pub struct AddTimeOffInput {
    /// The doctor; left out: the whole clinic (admins only).
    pub doctor_id: Option<ID>,
    /// Slots starting at or after this instant are closed…
    pub from: DateTime<Utc>,
    /// …up to this one (exclusive).
    pub to: DateTime<Utc>,
    /// Why (kept with the entry and the closed slots; at most 500 characters).
    pub reason: Option<String>,
}

/// A range without slots, for one doctor or the whole clinic.
pub struct TimeOff(pub(crate) time_off::Model);

/// A range without slots, for one doctor or the whole clinic.
#[Object(serial)]
impl TimeOff {
    /// Stable id.
    async fn id(&self) -> ID {
        ID(self.0.id.to_string())
    }

    /// The doctor; null for the whole clinic.
    async fn doctor(&self, ctx: &Context<'_>) -> Result<Option<Doctor>> {
        let Some(id) = self.0.doctor_id else { return Ok(None) };
        let found = ctx.data::<Loaders>()?.doctors.load_one(id).await.map_err(loader_error)?;
        Ok(found.map(Doctor))
    }

    /// First instant off.
    async fn from(&self) -> DateTime<Utc> {
        self.0.from_at
    }

    /// First instant no longer off.
    async fn to(&self) -> DateTime<Utc> {
        self.0.to_at
    }

    /// Why, as the clinic said.
    async fn reason(&self) -> Option<&str> {
        self.0.reason.as_deref()
    }
}

/// The answer to `addTimeOff`.
#[derive(SimpleObject)]
#[graphql(serial)]
pub struct AddTimeOffPayload {
    /// The entry, unless refused.
    pub time_off: Option<TimeOff>,
    /// Slots this call closed.
    pub closed: i32,
    /// The appointments this call cancelled (`cancelledBy: CLINIC`), by start.
    pub cancelled_appointments: Vec<Appointment>,
    /// Why it was refused; empty otherwise.
    pub user_errors: Vec<UserError>,
}

/// The answer to `removeTimeOff`.
#[derive(SimpleObject)]
#[graphql(serial)]
pub struct RemoveTimeOffPayload {
    /// The entry, unless refused.
    pub time_off: Option<TimeOff>,
    /// True when this call removed it; false when it was removed already.
    pub removed: bool,
    /// Slots that take seats again: those the entry had closed, opened, and the pattern's slots
    /// of its range made within the horizon.
    pub reopened: i32,
    /// Why it was refused; empty otherwise.
    pub user_errors: Vec<UserError>,
}

fn count(n: u64) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// Reads of the clinic's time off.
#[derive(Default)]
pub struct HoursQuery;

#[Object]
impl HoursQuery {
    /// The clinic-wide time off in force that overlaps `[from, to)` (either end may be left
    /// out), by start. Public.
    async fn clinic_time_off(
        &self,
        ctx: &Context<'_>,
        from: Option<DateTime<Utc>>,
        to: Option<DateTime<Utc>>,
    ) -> Result<Vec<TimeOff>> {
        let rows = ctx.data::<BookingService>()?.time_off(None, from, to).await.gql()?;
        Ok(rows.into_iter().map(TimeOff).collect())
    }
}

/// Working hours and time off.
#[derive(Default)]
pub struct HoursMutation;

#[Object]
impl HoursMutation {
    /// Sets the doctor's weekly pattern from `validFrom` on (replacing what was set for those
    /// days) and brings every day up to the horizon to it. Admins, or that doctor.
    async fn set_working_hours(
        &self,
        ctx: &Context<'_>,
        input: SetWorkingHoursInput,
    ) -> Result<SetWorkingHoursPayload> {
        let req = HoursRequest {
            doctor_id: input.doctor_id.0,
            valid_from: input.valid_from.0,
            weekly: input
                .weekly
                .into_iter()
                .map(|w| WeeklyRequest {
                    weekday: w.weekday.into(),
                    start_time: w.start_time,
                    end_time: w.end_time,
                    slot_minutes: w.slot_minutes,
                    capacity: w.capacity,
                })
                .collect(),
        };
        let outcome = ctx.data::<BookingService>()?.set_working_hours(caller(ctx)?, &req).await.gql()?;
        Ok(match outcome {
            Ok(s) => SetWorkingHoursPayload {
                working_hours: Some(s.pattern.into()),
                created: count(s.created),
                removed: count(s.removed),
                conflicts: s.conflicts.into_iter().map(Appointment).collect(),
                user_errors: vec![],
            },
            Err(r) => SetWorkingHoursPayload {
                working_hours: None,
                created: 0,
                removed: 0,
                conflicts: vec![],
                user_errors: vec![r.into()],
            },
        })
    }

    /// Closes every slot of the doctor (or, without `doctorId`, of every doctor) starting in
    /// `[from, to)` as `closeSlots` does, and keeps working hours from making slots there.
    /// Admins; or a doctor for itself.
    async fn add_time_off(&self, ctx: &Context<'_>, input: AddTimeOffInput) -> Result<AddTimeOffPayload> {
        let req = TimeOffRequest {
            doctor_id: input.doctor_id.map(|d| d.0),
            from: input.from,
            to: input.to,
            reason: input.reason,
        };
        let outcome = ctx.data::<BookingService>()?.add_time_off(caller(ctx)?, &req).await.gql()?;
        Ok(match outcome {
            Ok(a) => AddTimeOffPayload {
                time_off: Some(TimeOff(a.time_off)),
                closed: count(a.closed),
                cancelled_appointments: a.cancelled.into_iter().map(Appointment).collect(),
                user_errors: vec![],
            },
            Err(r) => AddTimeOffPayload {
                time_off: None,
                closed: 0,
                cancelled_appointments: vec![],
                user_errors: vec![r.into()],
            },
        })
    }

    /// Ends a time-off entry: the slots it closed open again and the pattern's slots in its
    /// range are made (within the horizon at once). Whoever may add it.
    async fn remove_time_off(&self, ctx: &Context<'_>, id: ID) -> Result<RemoveTimeOffPayload> {
        let outcome = ctx.data::<BookingService>()?.remove_time_off(caller(ctx)?, &id).await.gql()?;
        Ok(match outcome {
            Ok(r) => RemoveTimeOffPayload {
                time_off: Some(TimeOff(r.time_off)),
                removed: r.removed,
                reopened: count(r.reopened),
                user_errors: vec![],
            },
            Err(r) => RemoveTimeOffPayload { time_off: None, removed: false, reopened: 0, user_errors: vec![r.into()] },
        })
    }
}
