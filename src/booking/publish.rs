//! `createDoctor` and `publishSchedule`.

use chrono::{NaiveDate, Utc};

use super::{
    input::{parse_id, parse_local_time, parse_timezone},
    schedule::{plan_day, PlanError},
    BookingService,
};
use crate::{
    auth::{Caller, Role},
    db::{
        doctors,
        entity::{doctor, time_slot},
        outbox, slots, StoreError,
    },
    error::{Field, ServiceError},
    model::day_bounds,
};

/// Longest doctor name or specialty.
const MAX_TEXT: usize = 200;
/// Largest capacity of one slot (the GraphQL `Int` range).
const MAX_CAPACITY: i32 = i32::MAX;

/// Input of `createDoctor`.
#[derive(Clone, Debug)]
pub struct NewDoctor {
    /// Display name.
    pub name: String,
    /// Free-text specialty.
    pub specialty: Option<String>,
    /// IANA zone; UTC when absent.
    pub timezone: Option<String>,
}

/// Input of `publishSchedule`, values not yet parsed.
#[derive(Clone, Debug)]
pub struct PublishRequest {
    /// The doctor's id.
    pub doctor_id: String,
    /// The day, in the doctor's zone.
    pub date: NaiveDate,
    /// `HH:MM` local.
    pub start_time: String,
    /// `HH:MM` local (24:00 for midnight at the end of the day).
    pub end_time: String,
    /// Minutes per slot (default 15).
    pub slot_minutes: Option<i32>,
    /// Seats per slot (default 1).
    pub capacity: Option<i32>,
}

/// The answer to `publishSchedule`.
#[derive(Clone, Debug)]
pub struct Published {
    /// Every slot of the schedule, new or kept, by start.
    pub slots: Vec<time_slot::Model>,
    /// How many were created by this call.
    pub created: u64,
    /// How many existed already and were kept.
    pub existing: u64,
}

impl BookingService {
    /// Creates a doctor (admins only).
    pub async fn create_doctor(&self, caller: &Caller, new: NewDoctor) -> Result<doctor::Model, ServiceError> {
        if caller.role != Role::Admin {
            return Err(ServiceError::Forbidden("only admins create doctors".into()));
        }
        let name = new.name.trim();
        if name.is_empty() || name.chars().count() > MAX_TEXT {
            return Err(ServiceError::invalid(
                Field::Name.in_request(),
                format!("name must be 1 to {MAX_TEXT} characters"),
            ));
        }
        let specialty = new.specialty.as_deref().map(str::trim).filter(|s| !s.is_empty());
        if specialty.is_some_and(|s| s.chars().count() > MAX_TEXT) {
            return Err(ServiceError::invalid(
                Field::Specialty.in_request(),
                format!("specialty must be at most {MAX_TEXT} characters"),
            ));
        }
        let tz = match new.timezone.as_deref() {
            None => chrono_tz::UTC,
            Some(raw) => parse_timezone(raw).map_err(|m| ServiceError::invalid(Field::Timezone.in_request(), m))?,
        };
        let _writing = self.db.writing().await;
        Ok(doctors::insert(self.db.conn(), name, specialty, tz.name()).await?)
    }

    /// Creates a day's slots; existing `(doctor, start)` slots are kept and counted.
    #[tracing::instrument(level = "debug", skip_all, fields(doctor = %req.doctor_id, date = %req.date))]
    pub async fn publish_schedule(&self, caller: &Caller, req: PublishRequest) -> Result<Published, ServiceError> {
        let doctor_id = parse_id(Field::DoctorId.name(), &req.doctor_id)
            .map_err(|m| ServiceError::invalid(Field::DoctorId.in_request(), m))?;
        if !caller.manages_doctor(doctor_id) {
            return Err(ServiceError::Forbidden("only admins and the doctor may publish this schedule".into()));
        }
        let start = parse_local_time(Field::StartTime.name(), &req.start_time)
            .map_err(|m| ServiceError::invalid(Field::StartTime.in_request(), m))?;
        let end = parse_local_time(Field::EndTime.name(), &req.end_time)
            .map_err(|m| ServiceError::invalid(Field::EndTime.in_request(), m))?;
        let slot_minutes = req.slot_minutes.unwrap_or(15);
        if !(1..=1440).contains(&slot_minutes) {
            return Err(ServiceError::invalid(
                Field::SlotMinutes.in_request(),
                "slotMinutes must be between 1 and 1440",
            ));
        }
        let capacity = req.capacity.unwrap_or(1);
        if !(1..=MAX_CAPACITY).contains(&capacity) {
            return Err(ServiceError::invalid(Field::Capacity.in_request(), "capacity must be at least 1"));
        }
        let doctor = doctors::find(self.db.conn(), doctor_id)
            .await?
            .ok_or_else(|| ServiceError::invalid(Field::DoctorId.in_request(), "no doctor with this id"))?;
        let tz = parse_timezone(&doctor.timezone)
            .map_err(|m| StoreError::Inconsistent(format!("doctor {doctor_id}: {m}")))?;
        if day_bounds(tz, req.date).1 <= Utc::now() {
            return Err(ServiceError::invalid(Field::Date.in_request(), "this date has already ended"));
        }
        let plan = plan_day(tz, req.date, start, end, slot_minutes.unsigned_abs()).map_err(|e| match e {
            PlanError::EndNotAfterStart => ServiceError::invalid(Field::EndTime.in_request(), e.to_string()),
            PlanError::TooManySlots => ServiceError::invalid(Field::SlotMinutes.in_request(), e.to_string()),
        })?;
        // The outbox row commits with the slots, so every instance hears of them (it drops the
        // lists it keeps of the doctor) exactly when they exist.
        let created = async {
            let tx = self.db.begin_write().await?;
            let created = slots::insert_skipping_existing(&tx, doctor_id, capacity, &plan).await?;
            if created > 0 {
                outbox::record_published(&tx, doctor_id, Utc::now()).await?;
            }
            tx.commit().await?;
            Ok::<_, StoreError>(created)
        }
        .await?;
        if created > 0 {
            self.guard.slots.invalidate(doctor_id, req.date).await;
            self.sink.published(doctor_id);
        }
        let starts: Vec<_> = plan.iter().map(|s| s.start_at).collect();
        let slots = slots::at_starts(self.db.conn(), doctor_id, &starts).await?;
        let existing = (slots.len() as u64).saturating_sub(created);
        Ok(Published { slots, created, existing })
    }
}
