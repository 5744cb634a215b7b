//! `confirmAppointment`: a hold becomes a booking in one conditional transition, `HELD` →
//! `BOOKED` while `expires_at` is ahead. It races the expiry job on the same row, and the
//! database lets exactly one of them win: the expiry's transition requires `HELD` too.

use chrono::Utc;

use super::{changes::Changes, retrying, BookingService};
use crate::{
    auth::Caller,
    db::{appointments, entity::appointment, micros, waitlist, StoreError},
    error::{Field, Outcome, Refusal},
    model::{AppointmentEvent, AppointmentStatus, WaitlistStatus},
};

/// The answer to a confirm.
#[derive(Clone, Debug)]
pub struct Confirmed {
    /// The appointment as it is now.
    pub appointment: appointment::Model,
    /// True when this request confirmed it; false when it was booked already.
    pub confirmed: bool,
}

impl BookingService {
    /// Confirms a hold the caller may cancel (on the booking lane).
    #[tracing::instrument(level = "debug", skip_all, fields(caller = %caller.scope(), appointment = %raw_id))]
    pub async fn confirm(&self, caller: &Caller, raw_id: &str) -> Outcome<Confirmed> {
        let (caller, raw_id) = (caller.clone(), raw_id.to_owned());
        self.on_lane(move |s| async move { s.confirm_here(&caller, &raw_id).await }).await
    }

    async fn confirm_here(&self, caller: &Caller, raw_id: &str) -> Outcome<Confirmed> {
        super::not_a_doctor(caller, "confirm appointments")?;
        let record = match self.changeable(caller, raw_id, Field::Id.as_param()).await? {
            Ok(r) => r,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let id = record.appointment.id;
        let now = micros(Utc::now());
        let confirmed = retrying(|| async {
            let tx = self.db.begin_write().await?;
            // Confirming re-enters the row in the overlap rule's index: the patient's lock first.
            appointments::lock_patient(&tx, record.appointment.patient_id).await?;
            let Some(confirmed) = appointments::mark_confirmed(&tx, id, now).await? else {
                tx.rollback().await?;
                return Ok::<_, StoreError>(None);
            };
            // A confirmed waitlist offer fulfils its entry.
            waitlist::settle_offers(&tx, &[confirmed.id], WaitlistStatus::Fulfilled, now).await?;
            // No seat moves; the event still goes out (messages, webhooks).
            let mut changes = Changes::default();
            changes.event(AppointmentEvent::Confirmed, &confirmed, false);
            changes.record(&tx, now).await?;
            tx.commit().await?;
            Ok(Some(confirmed))
        })
        .await?;
        if let Some(appointment) = confirmed {
            return Ok(Ok(Confirmed { appointment, confirmed: true }));
        }
        // The transition did not apply: say why from the row as it is now.
        let current =
            appointments::find_record(self.db.conn(), id).await?.map_or(record.appointment, |r| r.appointment);
        Ok(match current.status() {
            AppointmentStatus::Booked => Ok(Confirmed { appointment: current, confirmed: false }),
            // Cancelled, or moved on by the desk.
            AppointmentStatus::Cancelled
            | AppointmentStatus::Arrived
            | AppointmentStatus::Fulfilled
            | AppointmentStatus::NoShow => Err(Refusal::not_active(Field::Id.as_param())),
            // Held but past its expiry (whether or not the expiry job has run), or expired.
            AppointmentStatus::Held | AppointmentStatus::Expired => Err(Refusal::hold_expired(Field::Id.as_param())),
        })
    }
}
