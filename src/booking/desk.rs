//! The day at the front desk: check-in (`BOOKED` → `ARRIVED`), completion (`ARRIVED` →
//! `FULFILLED`) and no-show (`BOOKED` → `NOSHOW`), each one conditional transition like a
//! cancel; the doctor's day sheet; a patient's recent no-shows.
//!
//! None of the moves gives a seat back (the visit's time is spent), so no slot changes and
//! live availability hears nothing; the event still goes through the outbox, in the same
//! transaction, to partners' webhooks (patients are not messaged about it).

use chrono::{DateTime, NaiveDate, TimeDelta, Utc};

use super::{changes::Changes, input::parse_id, read, retrying, BookingService};
use crate::{
    auth::{Caller, Role},
    db::{
        appointments::{self, AppointmentRecord},
        entity::appointment,
        micros, StoreError,
    },
    error::{Field, Outcome, Refusal, ServiceError},
    model::{day_bounds, AppointmentEvent, AppointmentStatus},
};

/// How long before its slot starts a patient may be checked in.
const EARLY_CHECK_IN: TimeDelta = TimeDelta::hours(1);
/// How far back `noShowCount` and `NO_SHOW_LIMIT` look.
const NO_SHOW_WINDOW: TimeDelta = TimeDelta::days(365);

/// One of the desk's moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeskMove {
    /// `checkInAppointment`: `BOOKED` → `ARRIVED`.
    CheckIn,
    /// `completeAppointment`: `ARRIVED` → `FULFILLED`.
    Complete,
    /// `markNoShow`: `BOOKED` → `NOSHOW`.
    NoShow,
}

impl DeskMove {
    /// The status the move starts from.
    pub fn from(self) -> AppointmentStatus {
        match self {
            Self::CheckIn | Self::NoShow => AppointmentStatus::Booked,
            Self::Complete => AppointmentStatus::Arrived,
        }
    }

    /// The status it ends in.
    pub fn to(self) -> AppointmentStatus {
        match self {
            Self::CheckIn => AppointmentStatus::Arrived,
            Self::Complete => AppointmentStatus::Fulfilled,
            Self::NoShow => AppointmentStatus::NoShow,
        }
    }

    fn event(self) -> AppointmentEvent {
        match self {
            Self::CheckIn => AppointmentEvent::Arrived,
            Self::Complete => AppointmentEvent::Fulfilled,
            Self::NoShow => AppointmentEvent::NoShow,
        }
    }

    fn what(self) -> &'static str {
        match self {
            Self::CheckIn => "check in",
            Self::Complete => "complete",
            Self::NoShow => "mark as no-show",
        }
    }
}

/// The answer to a desk move.
#[derive(Clone, Debug)]
pub struct Moved {
    /// The appointment as it is now.
    pub appointment: appointment::Model,
    /// True when this request made the move; false when it was already made.
    pub changed: bool,
}

impl BookingService {
    /// Makes a desk move on an appointment of a doctor the caller manages (on the booking lane).
    #[tracing::instrument(level = "debug", skip_all, fields(caller = %caller.scope(), appointment = %raw_id))]
    pub async fn desk_move(&self, caller: &Caller, raw_id: &str, kind: DeskMove) -> Outcome<Moved> {
        let (caller, raw_id) = (caller.clone(), raw_id.to_owned());
        self.on_lane(move |s| async move { s.desk_move_here(&caller, &raw_id, kind).await }).await
    }

    async fn desk_move_here(&self, caller: &Caller, raw_id: &str, kind: DeskMove) -> Outcome<Moved> {
        let field = Field::Id.as_param();
        let id = match parse_id(Field::Id.name(), raw_id) {
            Ok(id) => id,
            Err(msg) => return Ok(Err(Refusal::invalid(field, msg))),
        };
        // Who holds it, in whose slot, and when it starts never change: reading them first
        // decides nothing the transition does not decide again.
        let record = appointments::find_record(self.db.conn(), id).await?;
        let Some(record) = record.filter(|r| caller.may_see(read::access(r))) else {
            return Ok(Err(Refusal::appointment_not_found(field)));
        };
        if !caller.manages_doctor(record.doctor_id) {
            return Err(ServiceError::Forbidden(format!(
                "only admins and the appointment's doctor may {} an appointment",
                kind.what()
            )));
        }
        if let Some(answer) = settled(kind, record.appointment.clone()) {
            return Ok(answer);
        }
        let now = micros(Utc::now());
        if let Some(message) = self.outside_window(kind, &record, now).await? {
            return Ok(Err(Refusal::invalid(field, message)));
        }
        let moved = retrying(|| async {
            let tx = self.db.begin_request_write().await?;
            // The row stays in the overlap rule's index under its new status: the patient's
            // lock first, as every transaction writing such a row takes it.
            appointments::lock_patient(&tx, record.appointment.patient_id).await?;
            let Some(moved) = appointments::mark_desk(&tx, id, kind.from(), kind.to(), now).await? else {
                tx.rollback().await?;
                return Ok::<_, StoreError>(None);
            };
            let mut changes = Changes::default();
            changes.event(kind.event(), &moved, false);
            changes.record(&tx, now).await?;
            tx.commit().await?;
            Ok(Some(moved))
        })
        .await?;
        if let Some(appointment) = moved {
            return Ok(Ok(Moved { appointment, changed: true }));
        }
        // A concurrent request moved it first: say how it stands now.
        let current =
            appointments::find_record(self.db.conn(), id).await?.map_or(record.appointment, |r| r.appointment);
        Ok(settled(kind, current.clone()).unwrap_or(Ok(Moved { appointment: current, changed: false })))
    }

    /// Why `kind` may not be made now, for an appointment in its starting state: check-in from
    /// an hour before the start to the end of the doctor's day (in its zone) the visit starts
    /// on; a no-show once the visit has started.
    async fn outside_window(
        &self,
        kind: DeskMove,
        record: &AppointmentRecord,
        now: DateTime<Utc>,
    ) -> Result<Option<String>, ServiceError> {
        let start = record.appointment.start_at;
        Ok(match kind {
            DeskMove::Complete => None,
            DeskMove::NoShow => (now < start).then(|| "a no-show can be marked only once the visit has started".into()),
            DeskMove::CheckIn => {
                let tz = self
                    .timezone(record.doctor_id)
                    .await?
                    .ok_or_else(|| StoreError::Inconsistent(format!("doctor {} is missing", record.doctor_id)))?;
                let (_, day_end) = day_bounds(tz, start.with_timezone(&tz).date_naive());
                if now < start - EARLY_CHECK_IN {
                    Some("check-in opens one hour before the visit starts".into())
                } else if now >= day_end {
                    Some("check-in closed at the end of the visit's day".into())
                } else {
                    None
                }
            }
        })
    }

    /// The appointments of the doctor's slots on `date` (in the doctor's zone), every status
    /// but `EXPIRED`, by the slot's start then id. Admins and that doctor only (`FORBIDDEN`
    /// otherwise); empty for an unknown doctor.
    pub async fn day_sheet(
        &self,
        caller: &Caller,
        raw_doctor_id: &str,
        date: NaiveDate,
    ) -> Result<Vec<AppointmentRecord>, ServiceError> {
        let forbidden = || ServiceError::Forbidden("only admins and the doctor may read a day sheet".into());
        if !matches!(caller.role, Role::Admin | Role::Doctor) {
            return Err(forbidden());
        }
        let doctor_id = read::parse_arg_id(Field::DoctorId, raw_doctor_id)?;
        if !caller.manages_doctor(doctor_id) {
            return Err(forbidden());
        }
        let Some(tz) = self.timezone(doctor_id).await? else {
            return Ok(Vec::new());
        };
        let (from, to) = day_bounds(tz, date);
        Ok(appointments::day_sheet(self.db.conn(), doctor_id, from, to).await?)
    }

    /// How many appointments of the patient were marked no-show in the last 365 days (by
    /// their start).
    pub async fn no_show_count(&self, patient_id: i64) -> Result<i64, ServiceError> {
        let since = micros(Utc::now() - NO_SHOW_WINDOW);
        Ok(appointments::no_show_count(self.db.conn(), patient_id, since).await?)
    }

    /// Whether `NO_SHOW_LIMIT` refuses the patient a new booking or hold: never for an admin's
    /// request, nor when no limit is set.
    pub(super) async fn over_no_show_limit(&self, patient_id: i64, by_admin: bool) -> Result<bool, ServiceError> {
        if self.no_show_limit == 0 || by_admin {
            return Ok(false);
        }
        Ok(self.no_show_count(patient_id).await? >= i64::from(self.no_show_limit))
    }
}

/// The answer without a write for an appointment `kind` does not move: `changed: false` when
/// it is already where `kind` leads, `APPOINTMENT_NOT_ACTIVE` from any state but its start.
fn settled(kind: DeskMove, current: appointment::Model) -> Option<Result<Moved, Refusal>> {
    let status = current.status();
    if status == kind.to() {
        Some(Ok(Moved { appointment: current, changed: false }))
    } else if status != kind.from() {
        let word = status.as_str().to_lowercase();
        Some(Err(Refusal::not_in_state(Field::Id.as_param(), &word)))
    } else {
        None
    }
}
