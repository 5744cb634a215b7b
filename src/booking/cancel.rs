//! `cancelAppointment`: a conditional `HELD`/`BOOKED` → `CANCELLED` that gives the seats back
//! exactly once.

use chrono::Utc;

use super::{cancelled_by, changes::Changes, input::parse_id, read, retrying, BookingService};
use crate::{
    auth::Caller,
    db::{
        appointments::{self, AppointmentRecord},
        entity::appointment,
        micros, StoreError,
    },
    error::{Fault, Field, Outcome, Refusal, ServiceError},
    model::AppointmentEvent,
};

/// The answer to a cancel.
#[derive(Clone, Debug)]
pub struct Cancelled {
    /// The appointment as it is now.
    pub appointment: appointment::Model,
    /// True when this request did the cancelling; false when it was no longer active.
    pub cancelled: bool,
}

impl BookingService {
    /// Cancels an appointment the caller may cancel (on the booking lane).
    #[tracing::instrument(level = "debug", skip_all, fields(caller = %caller.scope(), appointment = %raw_id))]
    pub async fn cancel(&self, caller: &Caller, raw_id: &str) -> Outcome<Cancelled> {
        let (caller, raw_id) = (caller.clone(), raw_id.to_owned());
        self.on_lane(move |s| async move { s.cancel_here(&caller, &raw_id).await }).await
    }

    async fn cancel_here(&self, caller: &Caller, raw_id: &str) -> Outcome<Cancelled> {
        super::not_a_doctor(caller, "cancel appointments")?;
        let record = match self.changeable(caller, raw_id, Field::Id.as_param()).await? {
            Ok(r) => r,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let _entered = self.enter_bulkhead().await?;
        let id = record.appointment.id;
        let done = retrying(|| async {
            let now = micros(Utc::now());
            let tx = self.db.begin_request_write().await?;
            let Some(cancelled) = appointments::mark_cancelled(&tx, id, now, cancelled_by(caller)).await? else {
                tx.rollback().await?;
                return Ok::<_, StoreError>(None);
            };
            let mut changes = Changes::default();
            changes.release(&tx, std::slice::from_ref(&cancelled), Some(AppointmentEvent::Cancelled)).await?;
            self.offer_freed(&tx, &mut changes, &[cancelled.id], now).await?;
            changes.record(&tx, now).await?;
            tx.commit().await?;
            Ok(Some((cancelled, changes)))
        })
        .await?;
        let Some((cancelled, changes)) = done else {
            // Not active any more (cancelled, expired, or a concurrent transition won).
            let current =
                appointments::find_record(self.db.conn(), id).await?.map_or(record.appointment, |r| r.appointment);
            // The desk's statuses keep their seat for good: that is a refusal, not a repeat.
            if current.status().holds_seat() && !current.status().is_open() {
                let word = current.status().as_str().to_lowercase();
                return Ok(Err(Refusal::not_in_state(Field::Id.as_param(), &word)));
            }
            return Ok(Ok(Cancelled { appointment: current, cancelled: false }));
        };
        self.committed(&changes).await;
        Ok(Ok(Cancelled { appointment: cancelled, cancelled: true }))
    }

    /// The appointment `raw_id` names, when the caller may change it (cancel, confirm,
    /// reschedule): `APPOINTMENT_NOT_FOUND` about `field` otherwise, also for one the caller
    /// may not see. Who holds an appointment, where and who made it never change, so reading
    /// them first decides nothing about seats.
    pub(super) async fn changeable(
        &self,
        caller: &Caller,
        raw_id: &str,
        field: Fault,
    ) -> Result<Result<AppointmentRecord, Refusal>, ServiceError> {
        let id = match parse_id(Field::Id.name(), raw_id) {
            Ok(id) => id,
            Err(msg) => return Ok(Err(Refusal::invalid(field, msg))),
        };
        let record = appointments::find_record(self.db.conn(), id).await?;
        Ok(record.filter(|r| caller.may_cancel(read::access(r))).ok_or_else(|| Refusal::appointment_not_found(field)))
    }
}
