//! `rescheduleAppointment`: an appointment moved to another slot in one transaction, all or
//! nothing. The old appointment's conditional transition to `CANCELLED` (its row lock
//! serializes concurrent moves of it: exactly one wins), then the slots it releases and the
//! slots it takes locked together by id (so concurrent reschedules and bookings wait for each
//! other instead of deadlocking), the release, the conditional updates on the new slots, and
//! the new row linked both ways. If any seat is missing the transaction rolls back and the old
//! appointment is untouched.

use chrono::{DateTime, Utc};

use super::{
    book::{refusal_for, span_of},
    cancelled_by,
    changes::Changes,
    input::{parse_id, parse_idempotency_key, reschedule_fingerprint},
    retrying, BookingService,
};
use crate::{
    auth::Caller,
    db::{
        appointments::{self, InsertError, NewAppointment},
        entity::{appointment, time_slot},
        micros,
        slots::{self, Run},
        waitlist, StoreError,
    },
    error::{Field, Outcome, Refusal, ServiceError},
    model::{AppointmentEvent, AppointmentStatus},
};

/// A reschedule request as the caller sent it.
#[derive(Clone, Debug)]
pub struct RescheduleRequest {
    /// The appointment to move.
    pub appointment_id: String,
    /// The first slot of its new place.
    pub new_slot_id: String,
    /// The caller's idempotency key (the same key space as bookings).
    pub idempotency_key: String,
}

/// The answer to a reschedule.
#[derive(Clone, Debug)]
pub struct Rescheduled {
    /// The new appointment.
    pub appointment: appointment::Model,
    /// The old one, as it is now.
    pub previous: appointment::Model,
    /// True when this answers a retry of an earlier reschedule.
    pub replayed: bool,
}

/// Why the transaction moved nothing.
enum Unmoved {
    /// The old appointment was not active (or a concurrent move won).
    NotActive,
    /// A slot of the new place had no seat.
    NoSeat,
    /// The insert broke a constraint.
    Refused(InsertError),
}

impl BookingService {
    /// Moves an appointment the caller may cancel to the run of slots starting at a new slot (on
    /// the booking lane).
    #[tracing::instrument(level = "debug", skip_all, fields(caller = %caller.scope(), appointment = %req.appointment_id))]
    pub async fn reschedule(&self, caller: &Caller, req: &RescheduleRequest) -> Outcome<Rescheduled> {
        let (caller, req) = (caller.clone(), req.clone());
        self.on_lane(move |s| async move {
            let outcome = s.reschedule_here(&caller, &req).await;
            s.durable_replay(outcome, |r| r.replayed).await
        })
        .await
    }

    async fn reschedule_here(&self, caller: &Caller, req: &RescheduleRequest) -> Outcome<Rescheduled> {
        super::not_a_doctor(caller, "reschedule appointments")?;
        let old = match self.changeable(caller, &req.appointment_id, Field::AppointmentId.in_request()).await? {
            Ok(r) => r.appointment,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let new_slot_id = match parse_id(Field::NewSlotId.name(), &req.new_slot_id) {
            Ok(id) => id,
            Err(msg) => return Ok(Err(Refusal::invalid(Field::NewSlotId.in_request(), msg))),
        };
        let key = match parse_idempotency_key(&req.idempotency_key) {
            Ok(k) => k,
            Err(msg) => return Ok(Err(Refusal::invalid(Field::IdempotencyKey.in_request(), msg))),
        };
        let scope = caller.scope();
        let fingerprint = reschedule_fingerprint(old.id, new_slot_id);
        // A known key answers first: a replay, or the refusal of a reused key.
        if let Some(answer) = self.replay_reschedule(&scope, key, &fingerprint).await? {
            return Ok(answer);
        }
        let now = micros(Utc::now());
        if !movable(&old, now) {
            return Ok(Err(Refusal::not_active(Field::AppointmentId.in_request())));
        }
        let minutes = (old.end_at - old.start_at).num_minutes();
        let run = match slots::run_from(self.db.conn(), new_slot_id, minutes).await? {
            Run::NoSlot => return Ok(Err(Refusal::slot_not_found(Field::NewSlotId.in_request()))),
            Run::NotCovered(_) => {
                return Ok(Err(Refusal::invalid(
                    Field::NewSlotId.in_request(),
                    "no run of consecutive slots starting at this slot covers the appointment's length",
                )))
            }
            Run::Slots(run) => run,
        };
        let old_slots = appointments::slots_of(self.db.conn(), std::slice::from_ref(&old)).await?;
        let old_slots = old_slots.get(&old.id).cloned().unwrap_or_default();
        let new_ids: Vec<i64> = run.iter().map(|s| s.id).collect();
        // Slots' times never change, and a closed slot never opens again: these refusals need
        // no transaction. Moving to where it already is (the same first slot) is
        // `ALREADY_BOOKED`; a longer appointment may shift onto part of its own run, whose
        // seats the move gives back and takes again.
        if run.iter().any(|s| s.start_at <= now) {
            return Ok(Err(Refusal::slot_in_past()));
        }
        if run.iter().any(|s| s.closed_at.is_some()) {
            return Ok(Err(Refusal::slot_closed()));
        }
        if new_slot_id == old.slot_id {
            return Ok(Err(Refusal::already_booked()));
        }
        let by = cancelled_by(caller);
        // The chain's first booker keeps seeing the appointment when someone else moves it.
        let first_booked_by =
            old.first_booked_by.clone().or_else(|| (old.booked_by != scope).then(|| old.booked_by.clone()));
        let new = NewAppointment {
            status: old.status(),
            patient_id: old.patient_id,
            booked_by: &scope,
            idempotency_key: key,
            request_hash: &fingerprint,
            created_at: now,
            expires_at: old.expires_at.filter(|_| old.status() == AppointmentStatus::Held),
            rescheduled_from: Some(old.id),
            first_booked_by: first_booked_by.as_deref(),
        };
        let mut locked: Vec<i64> = old_slots.iter().chain(&new_ids).copied().collect();
        locked.sort_unstable();
        locked.dedup();
        let moved = retrying(|| self.move_in_transaction(&old, &locked, &new_ids, &new, by, now)).await;
        let (appointment, previous, changes) = match moved {
            Ok(Ok(done)) => done,
            Ok(Err(Unmoved::NotActive)) => {
                // A concurrent move with the same key may be what won.
                if let Some(answer) = self.replay_reschedule(&scope, key, &fingerprint).await? {
                    return Ok(answer);
                }
                return Ok(Err(Refusal::not_active(Field::AppointmentId.in_request())));
            }
            Ok(Err(Unmoved::Refused(InsertError::KeyTaken))) => {
                return match self.replay_reschedule(&scope, key, &fingerprint).await? {
                    Some(answer) => Ok(answer),
                    None => Err(StoreError::Inconsistent("idempotency key taken but not found".into()).into()),
                };
            }
            Ok(Err(Unmoved::Refused(InsertError::Store(e)))) | Err(e) => return Err(e.into()),
            Ok(Err(Unmoved::NoSeat | Unmoved::Refused(InsertError::Overlapping))) => {
                return self.unmoved_refusal(&old, &new_ids, now).await;
            }
        };
        self.committed(&changes).await;
        Ok(Ok(Rescheduled { appointment, previous, replayed: false }))
    }

    /// The move itself (see the module doc). `Ok(Err(…))` when nothing changed.
    async fn move_in_transaction(
        &self,
        old: &appointment::Model,
        locked: &[i64],
        new_ids: &[i64],
        new: &NewAppointment<'_>,
        by: crate::model::CancelledBy,
        now: DateTime<Utc>,
    ) -> Result<Result<(appointment::Model, appointment::Model, Changes), Unmoved>, StoreError> {
        let tx = self.db.begin_write().await?;
        appointments::lock_patient(&tx, old.patient_id).await?;
        let Some(mut previous) = appointments::mark_moved(&tx, old.id, now, by).await? else {
            tx.rollback().await?;
            return Ok(Err(Unmoved::NotActive));
        };
        slots::lock(&tx, locked).await?;
        let mut changes = Changes::default();
        changes.release(&tx, std::slice::from_ref(&previous), None).await?;
        let taken = slots::take_seats(&tx, new_ids, now).await?;
        if taken.len() != new_ids.len() {
            tx.rollback().await?;
            return Ok(Err(Unmoved::NoSeat));
        }
        let appointment = match appointments::insert(&tx, new, &taken).await {
            Ok(a) => a,
            Err(InsertError::Store(e)) => return Err(e),
            Err(refused) => {
                tx.rollback().await?;
                return Ok(Err(Unmoved::Refused(refused)));
            }
        };
        appointments::set_rescheduled_to(&tx, previous.id, appointment.id).await?;
        previous.rescheduled_to = Some(appointment.id);
        // A waitlist offer that moves stays the entry's offer.
        waitlist::move_offer(&tx, previous.id, appointment.id).await?;
        changes.taken(&taken);
        changes.event(AppointmentEvent::Rescheduled, &appointment, true);
        // The seats it left (and did not take again) go to the waitlist.
        self.offer_freed(&tx, &mut changes, &[], now).await?;
        changes.record(&tx, now).await?;
        tx.commit().await?;
        Ok(Ok((appointment, previous, changes)))
    }

    /// Why the move could not take its seats, read after the rollback only to word the answer.
    async fn unmoved_refusal(
        &self,
        old: &appointment::Model,
        new_ids: &[i64],
        now: DateTime<Utc>,
    ) -> Outcome<Rescheduled> {
        let mut run: Vec<time_slot::Model> = slots::find_many(self.db.conn(), new_ids).await?;
        run.sort_unstable_by_key(|s| s.start_at);
        let Some(span) = span_of(&run) else {
            return Ok(Err(Refusal::slot_not_found(Field::NewSlotId.in_request())));
        };
        // The appointment being moved does not count against its new place.
        let conflicts = appointments::conflicts(self.db.conn(), old.patient_id, span, new_ids, Some(old.id)).await?;
        Ok(Err(refusal_for(&run, now, conflicts)))
    }

    /// The answer to a key the caller used before, if it did.
    async fn replay_reschedule(
        &self,
        scope: &str,
        key: &str,
        fingerprint: &str,
    ) -> Result<Option<Result<Rescheduled, Refusal>>, ServiceError> {
        let Some(existing) = appointments::find_by_key(self.db.conn(), scope, key).await? else {
            return Ok(None);
        };
        if existing.request_hash != fingerprint {
            return Ok(Some(Err(Refusal::key_reused(Field::IdempotencyKey.in_request()))));
        }
        let previous = match existing.rescheduled_from {
            Some(id) => appointments::find_record(self.db.conn(), id).await?.map(|r| r.appointment),
            None => None,
        };
        let previous =
            previous.ok_or_else(|| StoreError::Inconsistent(format!("appointment {} lost its origin", existing.id)))?;
        Ok(Some(Ok(Rescheduled { appointment: existing, previous, replayed: true })))
    }
}

/// Whether an appointment may still move: booked, or held and not yet run out.
fn movable(a: &appointment::Model, now: DateTime<Utc>) -> bool {
    match a.status() {
        AppointmentStatus::Booked => true,
        AppointmentStatus::Held => a.expires_at.is_some_and(|e| e > now),
        // Cancelled, expired, or reached by the desk: no longer open.
        _ => false,
    }
}
