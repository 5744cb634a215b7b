//! Reads: doctors, slots and appointments, with the visibility rules applied to every object.

use chrono::{NaiveDate, Utc};

use super::{
    input::{parse_duration, parse_id},
    BookingService,
};
use crate::{
    auth::{AppointmentAccess, Caller, Principal, Role},
    db::{
        appointments::{self, AppointmentRecord, Filter},
        doctors,
        entity::{doctor, time_slot},
        slots, StoreError,
    },
    error::{Field, ServiceError},
    guard::Stamp,
    model::{self, day_bounds, DayRange},
};

/// Most appointments `myAppointments` returns (newest first).
pub const MY_APPOINTMENTS_LIMIT: u64 = 500;
/// Largest `first` of the doctors connection.
pub const MAX_PAGE: i32 = 100;

/// One page of doctors.
#[derive(Clone, Debug)]
pub struct DoctorPage {
    /// The doctors, by id.
    pub doctors: Vec<doctor::Model>,
    /// Whether more follow.
    pub has_next: bool,
}

/// The bookable slots of a doctor's day.
#[derive(Clone, Debug)]
pub struct SlotList {
    /// The slots, by start.
    pub slots: Vec<time_slot::Model>,
    /// The doctor's generation taken before the rows were read ([`crate::guard::Generations`]):
    /// whatever is made of them is current while it is. `None` for an unknown doctor (one may
    /// be created next).
    pub stamp: Option<Stamp>,
}

/// The facts of `record` that decide visibility.
pub(crate) fn access(r: &AppointmentRecord) -> AppointmentAccess<'_> {
    AppointmentAccess {
        patient_id: r.appointment.patient_id,
        doctor_id: r.doctor_id,
        booked_by: &r.appointment.booked_by,
        first_booked_by: r.appointment.first_booked_by.as_deref(),
    }
}

/// Parses the id parameter `field`, as `INVALID_INPUT` when malformed.
pub fn parse_arg_id(field: Field, raw: &str) -> Result<i64, ServiceError> {
    parse_id(field.name(), raw).map_err(|m| ServiceError::invalid(field.as_param(), m))
}

/// A doctor's day in UTC, by the doctor's zone.
pub fn doctor_day(doctor: &doctor::Model, date: NaiveDate) -> Result<DayRange, ServiceError> {
    Ok(model::doctor_day(doctor.id, &doctor.timezone, date).map_err(StoreError::Inconsistent)?)
}

impl SlotList {
    /// `slots` read under `stamp`; an answer made of them ends when the first one starts.
    fn new(slots: Vec<time_slot::Model>, mut stamp: Stamp) -> Self {
        if let Some(first) = slots.iter().map(|s| s.start_at).min() {
            stamp.expire_at(first);
        }
        Self { slots, stamp: Some(stamp) }
    }
}

impl BookingService {
    /// One doctor.
    pub async fn doctor(&self, raw_id: &str) -> Result<Option<doctor::Model>, ServiceError> {
        let id = parse_arg_id(Field::Id, raw_id)?;
        Ok(doctors::find(self.db.conn(), id).await?)
    }

    /// A page of doctors after the doctor `after` (exclusive), `first` long.
    pub async fn doctors(&self, first: Option<i32>, after: Option<i64>) -> Result<DoctorPage, ServiceError> {
        let first = first.unwrap_or(20);
        if !(0..=MAX_PAGE).contains(&first) {
            return Err(ServiceError::invalid(
                Field::First.as_param(),
                format!("first must be between 0 and {MAX_PAGE}"),
            ));
        }
        let limit = first.unsigned_abs().into();
        let mut doctors = doctors::page(self.db.conn(), after, limit + 1).await?;
        let has_next = doctors.len() as u64 > limit;
        doctors.truncate(first.unsigned_abs() as usize);
        Ok(DoctorPage { doctors, has_next })
    }

    /// One slot.
    pub async fn slot(&self, raw_id: &str) -> Result<Option<time_slot::Model>, ServiceError> {
        let id = parse_arg_id(Field::Id, raw_id)?;
        Ok(slots::find(self.db.conn(), id).await?)
    }

    /// The slots of a doctor's day that can still be booked; empty for an unknown doctor. With
    /// `duration_minutes`, the slots at which an appointment of that length could start now
    /// (each slot of its run open, with a seat, ahead). Served from the slot-list cache when it
    /// has the day (a few seconds stale at most).
    pub async fn available_slots(
        &self,
        raw_doctor_id: &str,
        date: NaiveDate,
        duration_minutes: Option<i32>,
    ) -> Result<SlotList, ServiceError> {
        let id = parse_arg_id(Field::DoctorId, raw_doctor_id)?;
        if let Some(minutes) = duration_minutes {
            let minutes =
                parse_duration(minutes).map_err(|m| ServiceError::invalid(Field::DurationMinutes.as_param(), m))?;
            return self.available_runs(id, date, minutes).await;
        }
        let mut stamp = self.guard.generations.stamp(id);
        let now = Utc::now();
        if let Some(mut rows) = self.guard.slots.get(id, date).await {
            // Cached a few seconds ago: drop what has started since.
            rows.retain(|s| s.start_at > now);
            if let Some(staleness) = self.guard.slots.staleness() {
                stamp.expire_within(staleness);
            }
            return Ok(SlotList::new(rows, stamp));
        }
        // An unknown doctor's empty list is not cached: the doctor may be created next.
        let Some(tz) = self.timezone(id).await? else {
            return Ok(SlotList { slots: Vec::new(), stamp: None });
        };
        let (from, to) = day_bounds(tz, date);
        let range = DayRange { doctor_id: id, from, to };
        let rows = self.reads.available(range, now).await?;
        self.guard.slots.put(id, date, &rows).await;
        Ok(SlotList::new(rows, stamp))
    }

    /// [`BookingService::available_slots`] with a duration: the day's slots and those the
    /// runs may reach into the next day, read uncached (the rendered answers are still kept).
    async fn available_runs(&self, doctor_id: i64, date: NaiveDate, minutes: i64) -> Result<SlotList, ServiceError> {
        let stamp = self.guard.generations.stamp(doctor_id);
        let Some(tz) = self.timezone(doctor_id).await? else {
            return Ok(SlotList { slots: Vec::new(), stamp: None });
        };
        let (from, to) = day_bounds(tz, date);
        let length = chrono::Duration::minutes(minutes);
        let candidates = slots::starting_in(self.db.conn(), doctor_id, from, to + length).await?;
        let now = Utc::now();
        let bookable = |s: &time_slot::Model| s.available() > 0 && s.start_at > now;
        let starts = candidates
            .iter()
            .filter(|s| s.start_at < to && bookable(s))
            .filter(|s| {
                slots::contiguous_run(&candidates, s.start_at, s.start_at + length)
                    .is_some_and(|run| run.iter().all(bookable))
            })
            .cloned()
            .collect();
        Ok(SlotList::new(starts, stamp))
    }

    /// The stamp to take before reading any of the doctor's slots, so that what is made of the
    /// read (a kept answer) is known stale after the doctor's next change.
    pub fn slots_stamp(&self, doctor_id: i64) -> Stamp {
        self.guard.generations.stamp(doctor_id)
    }

    /// One appointment, if the caller may see it (`None` otherwise: no existence oracle).
    pub async fn appointment(
        &self,
        principal: &Principal,
        raw_id: &str,
    ) -> Result<Option<AppointmentRecord>, ServiceError> {
        let id = parse_arg_id(Field::Id, raw_id)?;
        let Some(caller) = principal.caller() else {
            return Ok(None);
        };
        let record = appointments::find_record(self.db.conn(), id).await?;
        Ok(record.filter(|r| caller.may_see(access(r))))
    }

    /// The caller's appointments: a patient's own, a doctor's slots', those a partner or admin made.
    pub async fn my_appointments(&self, caller: &Caller) -> Result<Vec<AppointmentRecord>, ServiceError> {
        let filter = match caller.role {
            Role::Patient => Filter::Patient(caller.patient_id.ok_or(ServiceError::Unauthenticated)?),
            Role::Doctor => Filter::Doctor(caller.doctor_id.ok_or(ServiceError::Unauthenticated)?),
            Role::Partner | Role::Admin => Filter::BookedBy(caller.scope()),
        };
        let mut records = appointments::list(self.db.conn(), filter, MY_APPOINTMENTS_LIMIT).await?;
        records.retain(|r| caller.may_see(access(r)));
        Ok(records)
    }
}
