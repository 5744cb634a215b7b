//! `closeSlots`: a doctor calls in sick. Every slot of the doctor starting in `[from, to)` is
//! closed (it never takes a seat again) and its active appointments are cancelled by the
//! clinic, each giving its seats back once, all in one transaction.

use chrono::{DateTime, Utc};
use sea_orm::ConnectionTrait;

use super::{changes::Changes, retrying, BookingService};
use crate::{
    auth::Caller,
    db::{
        appointments, doctors,
        entity::{appointment, time_slot},
        micros, slots, waitlist, StoreError,
    },
    error::{Field, Outcome, Refusal},
    model::{AppointmentEvent, CancelledBy, DayRange, WaitlistStatus},
};

/// Longest reason kept with closed slots.
pub(super) const MAX_REASON: usize = 500;

/// A close request as the caller sent it.
#[derive(Clone, Debug)]
pub struct CloseRequest {
    /// The doctor's id.
    pub doctor_id: String,
    /// First instant closed (inclusive).
    pub from: DateTime<Utc>,
    /// First instant not closed (exclusive).
    pub to: DateTime<Utc>,
    /// Why, as the clinic says it (kept with the slots).
    pub reason: Option<String>,
}

/// The answer to a close.
#[derive(Clone, Debug)]
pub struct Closed {
    /// Slots this call closed (closing again counts none).
    pub closed: u64,
    /// The appointments this call cancelled, by start.
    pub cancelled: Vec<appointment::Model>,
}

impl BookingService {
    /// Closes a doctor's slots in a range (admins, or that doctor).
    #[tracing::instrument(level = "debug", skip_all, fields(caller = %caller.scope(), doctor = %req.doctor_id))]
    pub async fn close_slots(&self, caller: &Caller, req: &CloseRequest) -> Outcome<Closed> {
        let doctor_id = match super::managed_doctor(caller, &req.doctor_id, "close these slots")? {
            Ok(id) => id,
            Err(refusal) => return Ok(Err(refusal)),
        };
        if req.to <= req.from {
            return Ok(Err(Refusal::invalid(Field::To.in_request(), "to must be after from")));
        }
        let reason = req.reason.as_deref().map(str::trim).filter(|r| !r.is_empty());
        if reason.is_some_and(|r| r.chars().count() > MAX_REASON) {
            return Ok(Err(Refusal::invalid(
                Field::Reason.in_request(),
                format!("reason is at most {MAX_REASON} characters"),
            )));
        }
        if doctors::find(self.db.conn(), doctor_id).await?.is_none() {
            return Ok(Err(Refusal::invalid(Field::DoctorId.in_request(), "no doctor with this id")));
        }
        let range = DayRange { doctor_id, from: micros(req.from), to: micros(req.to) };
        let done = retrying(|| async {
            let now = micros(Utc::now());
            let tx = self.db.begin_write().await?;
            let mut changes = Changes::default();
            let (closed, mut cancelled) = close_range(&tx, range, reason, now, &mut changes).await?;
            if !changes.is_empty() {
                changes.record(&tx, now).await?;
            }
            tx.commit().await?;
            cancelled.sort_unstable_by_key(|a| (a.start_at, a.id));
            Ok::<_, StoreError>((closed.len() as u64, cancelled, changes))
        })
        .await?;
        let (closed, cancelled, changes) = done;
        self.committed(&changes).await;
        Ok(Ok(Closed { closed, cancelled }))
    }
}

/// Closes the doctor's open slots starting in `range` and cancels their active appointments
/// for the clinic, in the caller's transaction: the slots first (a booking racing the close
/// waits for the slot's lock and then finds it closed), then the cancellations, each giving
/// its seats back once; offers among them lapse, and nothing is offered to the waitlist (the
/// seats are gone, not freed). Returns the slots it closed and the appointments it cancelled.
pub(super) async fn close_range(
    tx: &impl ConnectionTrait,
    range: DayRange,
    reason: Option<&str>,
    now: DateTime<Utc>,
    changes: &mut Changes,
) -> Result<(Vec<time_slot::Model>, Vec<appointment::Model>), StoreError> {
    let closed = slots::close(tx, range, reason, now).await?;
    let in_range: Vec<i64> =
        slots::starting_in(tx, range.doctor_id, range.from, range.to).await?.iter().map(|s| s.id).collect();
    let cancelled = appointments::cancel_in_slots(tx, &in_range, now, CancelledBy::Clinic).await?;
    changes.closed(&closed);
    changes.release(tx, &cancelled, Some(AppointmentEvent::Cancelled)).await?;
    let gone: Vec<i64> = cancelled.iter().map(|a| a.id).collect();
    waitlist::settle_offers(tx, &gone, WaitlistStatus::Lapsed, now).await?;
    Ok((closed, cancelled))
}
