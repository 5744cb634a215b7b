//! `cancelAppointment`: a conditional BOOKED → CANCELLED that releases the seat exactly once.

use chrono::Utc;

use super::{input::parse_id, read, BookingService, Outcome, Refusal, RefusalCode, ServiceError};
use crate::{
    auth::{Caller, Role},
    db::{appointments, entity::appointment, micros, outbox, slots, StoreError},
    events::SlotChange,
};

/// The answer to a cancel.
#[derive(Clone, Debug)]
pub struct Cancelled {
    /// The appointment as it is now.
    pub appointment: appointment::Model,
    /// True when this request did the cancelling; false when it was cancelled already.
    pub cancelled: bool,
}

impl BookingService {
    /// Cancels an appointment the caller may see.
    #[tracing::instrument(level = "debug", skip_all, fields(caller = %caller.scope(), appointment = %raw_id))]
    pub async fn cancel(&self, caller: &Caller, raw_id: &str) -> Outcome<Cancelled> {
        if caller.role == Role::Doctor {
            return Err(ServiceError::Forbidden("doctors cannot cancel appointments".into()));
        }
        let id = match parse_id("id", raw_id) {
            Ok(id) => id,
            Err(msg) => return Ok(Err(Refusal::invalid(&["id"], msg))),
        };
        let _entered = self.enter_bulkhead().await?;
        // Who holds it, where and who made it never change: reading them first is safe.
        let record = appointments::find_record(self.db.conn(), id).await?;
        let Some(record) = record.filter(|r| caller.may_cancel(read::access(r))) else {
            return Ok(Err(Refusal {
                code: RefusalCode::AppointmentNotFound,
                message: "no appointment with this id".into(),
                field: Some(vec!["id".into()]),
            }));
        };
        let now = micros(Utc::now());
        let tx = self.db.begin_write().await.map_err(StoreError::from)?;
        let Some(cancelled) = appointments::mark_cancelled(&tx, id, now).await? else {
            tx.rollback().await.map_err(StoreError::from)?;
            let current =
                appointments::find_record(self.db.conn(), id).await?.map_or(record.appointment, |r| r.appointment);
            return Ok(Ok(Cancelled { appointment: current, cancelled: false }));
        };
        let slot = slots::release_seat(&tx, cancelled.slot_id).await?;
        outbox::record(&tx, appointment::CANCELLED, cancelled.id, &slot, now).await?;
        tx.commit().await.map_err(StoreError::from)?;
        self.sink.committed(SlotChange::from_slot(&slot));
        self.guard.known_full.mark_open(&slot).await;
        self.slot_changed(&slot).await;
        Ok(Ok(Cancelled { appointment: cancelled, cancelled: true }))
    }
}
