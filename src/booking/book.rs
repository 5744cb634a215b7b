//! `bookAppointment`: idempotent, never overbooking, refusals told apart precisely.

use chrono::Utc;
use sea_orm::DbBackend;

use super::{
    input::{booking_fingerprint, parse_id, parse_idempotency_key},
    lookup::KeyOrSeatAnswer,
    BookingService, Outcome, Refusal, RefusalCode, ServiceError,
};
use crate::{
    auth::{Caller, Role},
    db::{
        appointments::{self, InsertError, KeyOrSeat, NewAppointment},
        book_pg,
        entity::{appointment, time_slot},
        micros, outbox, slots, StoreError,
    },
    events::SlotChange,
    guard::Entered,
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
    #[tracing::instrument(level = "debug", skip_all, fields(caller = %caller.scope(), slot = %req.slot_id))]
    pub async fn book(&self, caller: &Caller, req: &BookRequest) -> Outcome<Booked> {
        let outcome = self.book_guarded(caller, req).await;
        metrics::counter!("booking_attempts_total", "outcome" => outcome_label(&outcome)).increment(1);
        outcome
    }

    /// The guards in order (rate limit, known-full, bulkhead), then the database.
    async fn book_guarded(&self, caller: &Caller, req: &BookRequest) -> Outcome<Booked> {
        let parsed = match parse(caller, req)? {
            Ok(p) => p,
            Err(refusal) => return Ok(Err(refusal)),
        };
        // Both checks in one Redis round trip (the connection pipelines them).
        let (allowed, known_full) =
            tokio::join!(self.guard.limiter.check(parsed.patient_id), self.guard.known_full.get(parsed.slot_id));
        if let Err(retry_after_secs) = allowed {
            return Err(ServiceError::RateLimited { retry_after_secs });
        }
        if known_full.is_some() {
            return self.answer_known_full(&parsed).await;
        }
        let entered = self.enter_bulkhead().await?;
        self.book_in_db(&parsed, entered).await
    }

    /// A slot seen full: no transaction and no lock, but one read (coalesced with concurrent
    /// ones on PostgreSQL) of what still outranks `SLOT_FULL` (a replay of the caller's key, the
    /// patient's own seat) and of the slot itself. The mark is only a hint: a slot that has a
    /// seat after all (a cancel whose clearing of the mark was lost while Redis was away) is
    /// booked through the database as usual, so the mark can never refuse a free seat.
    async fn answer_known_full(&self, p: &Parsed<'_>) -> Outcome<Booked> {
        // On PostgreSQL the read is not held behind the bulkhead: it shares the batcher's one
        // connection, so it cannot take the pool, and the more of them one statement answers,
        // the less each costs the database. Elsewhere it reads through the pool.
        let entered = match self.db.backend() {
            DbBackend::Postgres => None,
            _ => Some(self.enter_bulkhead().await?),
        };
        let (by_key, holds_seat, slot) = self.key_seat_slot(p).await?;
        if let Some(existing) = by_key {
            return Ok(replay_of(p, existing));
        }
        let now = micros(Utc::now());
        let Some(slot) = slot else {
            return Ok(Err(slot_not_found()));
        };
        let refusal = if slot.start_at <= now {
            Refusal::new(RefusalCode::SlotInPast, "this slot has already started")
        } else if holds_seat {
            already_booked()
        } else if slot.booked_count < slot.capacity {
            self.guard.known_full.mark_open(&slot).await;
            let entered = match entered {
                Some(e) => e,
                None => self.enter_bulkhead().await?,
            };
            return self.book_in_db(p, entered).await;
        } else {
            metrics::counter!("known_full_rejects_total").increment(1);
            Refusal::new(RefusalCode::SlotFull, "this slot has no seat left")
        };
        Ok(Err(refusal))
    }

    /// The caller's appointment with the key, whether the patient holds a seat in the slot, and
    /// the slot as it is now: one read without locks, coalesced with concurrent ones on
    /// PostgreSQL.
    async fn key_seat_slot(&self, p: &Parsed<'_>) -> Result<KeyOrSeatAnswer, ServiceError> {
        if self.db.backend() == DbBackend::Postgres {
            let batcher = self.lookups.get_or_init(|| super::lookup::lookup_batcher(self.db.clone()));
            let lookup = KeyOrSeat {
                booked_by: p.scope.clone(),
                key: p.key.to_owned(),
                slot_id: p.slot_id,
                patient_id: p.patient_id,
            };
            return Ok(batcher.ask(lookup).await?);
        }
        let (by_key, holds_seat) =
            appointments::key_or_seat(self.db.conn(), &p.scope, p.key, p.slot_id, p.patient_id).await?;
        Ok((by_key, holds_seat, slots::find(self.db.conn(), p.slot_id).await?))
    }

    /// The booking itself. There is no lookup of the key first: a retry of a success meets the
    /// unique constraint on (caller, key) and is answered from the row that holds it, which
    /// keeps the common path short. On PostgreSQL the update and both inserts are one statement
    /// (one round trip, see [`crate::db::book_pg`]); on SQLite, one transaction.
    async fn book_in_db(&self, parsed: &Parsed<'_>, entered: Entered) -> Outcome<Booked> {
        let now = micros(Utc::now());
        let new = NewAppointment {
            slot_id: parsed.slot_id,
            patient_id: parsed.patient_id,
            booked_by: &parsed.scope,
            idempotency_key: parsed.key,
            request_hash: &parsed.fingerprint,
            created_at: now,
        };
        let taken = if self.db.backend() == DbBackend::Postgres {
            book_pg::book(&self.db, new).await
        } else {
            self.book_in_transaction(new, now).await
        };
        let (slot, appointment) = match taken {
            Ok(Some(done)) => done,
            Ok(None) => {
                // Why the update took no seat, read after the fact only to word the answer (the
                // decision was the update's). The key may have booked this slot before, or,
                // concurrently, its last seat.
                let (by_key, holds_seat, slot) = self.key_seat_slot(parsed).await?;
                if let Some(existing) = by_key {
                    return Ok(replay_of(parsed, existing));
                }
                let Some(slot) = slot else {
                    return Ok(Err(slot_not_found()));
                };
                if slot.booked_count >= slot.capacity && slot.start_at > now {
                    self.guard.known_full.mark_full(&slot).await;
                }
                return Ok(Err(refusal_for(&slot, now, holds_seat)));
            }
            // A retry of the booking that holds the seat breaks both unique indexes, and the
            // database may name either: the key decides.
            Err(InsertError::AlreadyBooked) => {
                return Ok(self.replay(parsed).await?.unwrap_or_else(|| Err(already_booked())))
            }
            Err(InsertError::KeyTaken) => {
                return match self.replay(parsed).await? {
                    Some(answer) => Ok(answer),
                    None => Err(StoreError::Inconsistent("idempotency key taken but not found".into()).into()),
                }
            }
            Err(InsertError::Store(e)) => return Err(e.into()),
        };
        // What follows the commit needs no connection: give the bulkhead place back first.
        drop(entered);
        self.sink.committed(SlotChange::from_slot(&slot));
        self.slot_changed(&slot).await;
        if slot.booked_count >= slot.capacity {
            self.guard.known_full.mark_full(&slot).await;
        }
        Ok(Ok(Booked { appointment, replayed: false }))
    }

    /// The booking as a transaction: the conditional update, then the inserts. `None` when the
    /// update took no seat; on a refused insert the rollback gives the seat back.
    async fn book_in_transaction(
        &self,
        new: NewAppointment<'_>,
        now: chrono::DateTime<Utc>,
    ) -> Result<Option<(time_slot::Model, appointment::Model)>, InsertError> {
        let tx = self.db.begin_write().await.map_err(StoreError::from)?;
        let Some(slot) = slots::take_seat(&tx, new.slot_id, now).await? else {
            tx.rollback().await.map_err(StoreError::from)?;
            return Ok(None);
        };
        let appointment = match appointments::insert(&tx, new).await {
            Ok(a) => a,
            Err(refused) => {
                tx.rollback().await.map_err(StoreError::from)?;
                return Err(refused);
            }
        };
        outbox::record(&tx, appointment::BOOKED, appointment.id, &slot, now).await?;
        tx.commit().await.map_err(StoreError::from)?;
        Ok(Some((slot, appointment)))
    }

    /// The answer for a key the caller used before: a replay, or a refusal when the request
    /// differs. `None` when the key is new.
    async fn replay(&self, p: &Parsed<'_>) -> Result<Option<Result<Booked, Refusal>>, ServiceError> {
        let existing = appointments::find_by_key(self.db.conn(), &p.scope, p.key).await?;
        Ok(existing.map(|e| replay_of(p, e)))
    }
}

/// The answer to a key used before: a replay, or a refusal when the request differs.
fn replay_of(p: &Parsed<'_>, existing: appointment::Model) -> Result<Booked, Refusal> {
    if existing.request_hash != p.fingerprint {
        return Err(Refusal {
            code: RefusalCode::IdempotencyKeyReused,
            message: "this idempotency key was used for a different booking; use a new key".into(),
            field: Some(vec!["input".into(), "idempotencyKey".into()]),
        });
    }
    Ok(Booked { appointment: existing, replayed: true })
}

/// The `booking_attempts_total` label of an outcome.
fn outcome_label(outcome: &Outcome<Booked>) -> &'static str {
    match outcome {
        Ok(Ok(b)) if b.replayed => "REPLAYED",
        Ok(Ok(_)) => "BOOKED",
        Ok(Err(refusal)) => refusal.code.as_str(),
        Err(ServiceError::RateLimited { .. }) => "RATE_LIMITED",
        Err(ServiceError::Overloaded) => "OVERLOADED",
        Err(ServiceError::Unauthenticated | ServiceError::Forbidden(_)) => "FORBIDDEN",
        Err(ServiceError::InvalidInput { .. }) => "INVALID_INPUT",
        Err(ServiceError::Store(_)) => "INTERNAL",
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
