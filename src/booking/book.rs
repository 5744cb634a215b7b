//! `bookAppointment`: idempotent, never overbooking, refusals told apart precisely.

use chrono::Utc;
use sea_orm::TransactionTrait;

use super::{
    input::{booking_fingerprint, parse_id, parse_idempotency_key},
    BookingService, Outcome, Refusal, RefusalCode, ServiceError,
};
use crate::{
    auth::{Caller, Role},
    db::{
        appointments::{self, InsertError, NewAppointment},
        entity::{appointment, time_slot},
        micros, outbox, slots, StoreError,
    },
    events::SlotChange,
};

/// A booking request as the caller sent it (values not yet parsed).
#[derive(Clone, Debug)]
pub struct BookRequest {
    /// The slot's id.
    pub slot_id: String,
    /// The caller's idempotency key.
    pub idempotency_key: String,
    /// The patient, for partners and admins.
    pub patient_id: Option<String>,
}

/// A successful booking (or the replay of one).
#[derive(Clone, Debug)]
pub struct Booked {
    /// The appointment.
    pub appointment: appointment::Model,
    /// True when this answers a retry of an earlier booking.
    pub replayed: bool,
}

/// The parsed request.
struct Parsed<'a> {
    slot_id: i64,
    patient_id: i64,
    key: &'a str,
    scope: String,
    fingerprint: String,
}

impl BookingService {
    /// Books a seat for a patient.
    #[tracing::instrument(skip_all, fields(caller = %caller.scope(), slot = %req.slot_id))]
    pub async fn book(&self, caller: &Caller, req: &BookRequest) -> Outcome<Booked> {
        let parsed = match parse(caller, req)? {
            Ok(p) => p,
            Err(refusal) => return Ok(Err(refusal)),
        };
        if let Some(answer) = self.replay(&parsed).await? {
            return Ok(answer);
        }
        let now = micros(Utc::now());
        let tx = self.db.conn().begin().await.map_err(StoreError::from)?;
        let Some(slot) = slots::take_seat(&tx, parsed.slot_id, now).await? else {
            tx.rollback().await.map_err(StoreError::from)?;
            // A concurrent retry with this key may have taken the last seat and committed.
            if let Some(answer) = self.replay(&parsed).await? {
                return Ok(answer);
            }
            return Ok(Err(self.why_not_bookable(&parsed, now).await?));
        };
        let new = NewAppointment {
            slot_id: slot.id,
            patient_id: parsed.patient_id,
            booked_by: &parsed.scope,
            idempotency_key: parsed.key,
            request_hash: &parsed.fingerprint,
            created_at: now,
        };
        let appointment = match appointments::insert(&tx, new).await {
            Ok(a) => a,
            Err(refused) => {
                // The rollback gives the seat back.
                tx.rollback().await.map_err(StoreError::from)?;
                return match refused {
                    InsertError::AlreadyBooked => Ok(Err(already_booked())),
                    InsertError::KeyTaken => match self.replay(&parsed).await? {
                        Some(answer) => Ok(answer),
                        None => Err(StoreError::Inconsistent("idempotency key taken but not found".into()).into()),
                    },
                    InsertError::Store(e) => Err(e.into()),
                };
            }
        };
        outbox::record(&tx, appointment::BOOKED, appointment.id, &slot, now).await?;
        tx.commit().await.map_err(StoreError::from)?;
        self.sink.committed(SlotChange::from_slot(&slot));
        Ok(Ok(Booked { appointment, replayed: false }))
    }

    /// The answer for a key the caller used before: a replay, or a refusal when the request
    /// differs. `None` when the key is new.
    async fn replay(&self, p: &Parsed<'_>) -> Result<Option<Result<Booked, Refusal>>, ServiceError> {
        let Some(existing) = appointments::find_by_key(self.db.conn(), &p.scope, p.key).await? else {
            return Ok(None);
        };
        if existing.request_hash != p.fingerprint {
            return Ok(Some(Err(Refusal {
                code: RefusalCode::IdempotencyKeyReused,
                message: "this idempotency key was used for a different booking; use a new key".into(),
                field: Some(vec!["input".into(), "idempotencyKey".into()]),
            })));
        }
        Ok(Some(Ok(Booked { appointment: existing, replayed: true })))
    }

    /// Why the conditional update took no seat. Read after the fact, only to word the refusal:
    /// the decision itself was the update's.
    async fn why_not_bookable(&self, p: &Parsed<'_>, now: chrono::DateTime<Utc>) -> Result<Refusal, ServiceError> {
        let Some(slot) = slots::find(self.db.conn(), p.slot_id).await? else {
            return Ok(slot_not_found());
        };
        Ok(refusal_for(&slot, now, appointments::holds_seat(self.db.conn(), slot.id, p.patient_id).await?))
    }
}

fn refusal_for(slot: &time_slot::Model, now: chrono::DateTime<Utc>, holds_seat: bool) -> Refusal {
    if slot.start_at <= now {
        Refusal::new(RefusalCode::SlotInPast, "this slot has already started")
    } else if holds_seat {
        already_booked()
    } else {
        Refusal::new(RefusalCode::SlotFull, "this slot has no seat left")
    }
}

fn already_booked() -> Refusal {
    Refusal::new(RefusalCode::AlreadyBooked, "this patient already holds a booking in this slot")
}

fn slot_not_found() -> Refusal {
    Refusal {
        code: RefusalCode::SlotNotFound,
        message: "no slot with this id".into(),
        field: Some(vec!["input".into(), "slotId".into()]),
    }
}

/// Checks the role rules and parses the values, in the order a caller fixes them.
fn parse<'a>(caller: &Caller, req: &'a BookRequest) -> Result<Result<Parsed<'a>, Refusal>, ServiceError> {
    let patient_id = match caller.role {
        Role::Doctor => return Err(ServiceError::Forbidden("doctors cannot book appointments".into())),
        Role::Patient => {
            let own = caller.patient_id.ok_or(ServiceError::Unauthenticated)?;
            if let Some(raw) = &req.patient_id {
                match parse_id("patientId", raw) {
                    Ok(id) if id == own => {}
                    Ok(_) => return Err(ServiceError::Forbidden("patients book for themselves only".into())),
                    Err(msg) => return Ok(Err(Refusal::invalid(&["input", "patientId"], msg))),
                }
            }
            own
        }
        Role::Partner | Role::Admin => match &req.patient_id {
            None => {
                return Ok(Err(Refusal::invalid(
                    &["input", "patientId"],
                    "patientId is required when booking on a patient's behalf",
                )))
            }
            Some(raw) => match parse_id("patientId", raw) {
                Ok(id) => id,
                Err(msg) => return Ok(Err(Refusal::invalid(&["input", "patientId"], msg))),
            },
        },
    };
    let slot_id = match parse_id("slotId", &req.slot_id) {
        Ok(id) => id,
        Err(msg) => return Ok(Err(Refusal::invalid(&["input", "slotId"], msg))),
    };
    let key = match parse_idempotency_key(&req.idempotency_key) {
        Ok(k) => k,
        Err(msg) => return Ok(Err(Refusal::invalid(&["input", "idempotencyKey"], msg))),
    };
    Ok(Ok(Parsed {
        slot_id,
        patient_id,
        key,
        scope: caller.scope(),
        fingerprint: booking_fingerprint(slot_id, patient_id),
    }))
}
