//! Taking seats for a new appointment (a booking or a hold): one call, whichever database.
//!
//! [`take`] takes a seat in each slot of a run by one conditional update per slot, inserts the
//! appointment and records its outbox rows, all or nothing. It picks the form itself: one slot
//! on PostgreSQL is one statement ([`book_pg::book`], one round trip); SQLite, and several
//! slots anywhere, run the general transaction ([`take_in_transaction`]). Both forms are
//! public so that a test can run the same request each way and compare the rows they leave
//! (`tests/api/seats.rs`): they must be the same booking.

use super::{
    appointments::{self, InsertError, NewAppointment},
    book_pg,
    entity::{appointment, time_slot},
    outbox::{self, NewRow},
    slots, Db, StoreError,
};
use crate::model::SLOT_ONLY;

/// What a taking returns: the slots as it left them (by start) and the new appointment.
pub type Taken = (Vec<time_slot::Model>, appointment::Model);

/// Takes a seat in each of `slot_ids` (a run, first slot first) for `new` (`BOOKED` or `HELD`,
/// its `created_at` the moment the slots must start after), inserts it and records its event
/// in the outbox, all or nothing. `Ok(None)` when a slot had no seat (unknown, full, closed or
/// started); a refused insert is told apart like [`appointments::insert`]'s, and then nothing
/// was changed.
pub async fn take(db: &Db, slot_ids: &[i64], new: &NewAppointment<'_>) -> Result<Option<Taken>, InsertError> {
    match slot_ids {
        [slot_id] if db.backend() == sea_orm::DbBackend::Postgres => {
            Ok(book_pg::book(db, *slot_id, new).await?.map(|(slot, appointment)| (vec![slot], appointment)))
        }
        _ => take_in_transaction(db, slot_ids, new).await,
    }
}

/// [`take`] as one transaction, on any database and for any run: the patient's lock, the seat
/// updates, the insert, then the outbox rows (the event with the first slot's state, then one
/// row per other slot, by id), committed together. The rollback of a refused insert gives the
/// seats back.
pub async fn take_in_transaction(
    db: &Db,
    slot_ids: &[i64],
    new: &NewAppointment<'_>,
) -> Result<Option<Taken>, InsertError> {
    let now = new.created_at;
    let tx = db.begin_request_write().await?;
    appointments::lock_patient(&tx, new.patient_id).await?;
    let taken = slots::take_seats(&tx, slot_ids, now).await?;
    if taken.len() != slot_ids.len() {
        tx.rollback().await.map_err(StoreError::from)?;
        return Ok(None);
    }
    let appointment = match appointments::insert(&tx, new, &taken).await {
        Ok(a) => a,
        Err(refused) => {
            tx.rollback().await.map_err(StoreError::from)?;
            return Err(refused);
        }
    };
    let state = appointment.state();
    let first = taken.iter().find(|s| s.id == appointment.slot_id);
    // The event of a new appointment is named by its status (BOOKED, HELD), as in `book_pg`.
    let event = NewRow { kind: new.status.as_str(), appointment: Some((appointment.id, &state)), slot: first };
    let mut others: Vec<&time_slot::Model> = taken.iter().filter(|s| s.id != appointment.slot_id).collect();
    others.sort_unstable_by_key(|s| s.id);
    let rows = others.into_iter().map(|s| NewRow { kind: SLOT_ONLY, appointment: None, slot: Some(s) });
    outbox::record_many(&tx, std::iter::once(event).chain(rows), now).await?;
    tx.commit().await.map_err(StoreError::from)?;
    Ok(Some((taken, appointment)))
}

#[cfg(test)]
mod tests {
    use crate::model::{AppointmentEvent, AppointmentStatus};

    /// Both forms write a new appointment's status word as its event's kind.
    #[test]
    fn a_new_appointments_status_names_its_event() {
        assert_eq!(AppointmentStatus::Booked.as_str(), AppointmentEvent::Booked.as_str());
        assert_eq!(AppointmentStatus::Held.as_str(), AppointmentEvent::Held.as_str());
    }
}
