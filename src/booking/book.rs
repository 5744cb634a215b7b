//! `bookAppointment` and `holdSlot`: a seat (or a run of seats) taken by one conditional
//! update per slot in the transaction that inserts the appointment; idempotent, never
//! overbooking, refusals told apart precisely.
//!
//! A hold is a booking whose appointment is `HELD` until `expires_at`: the same guards, the
//! same refusals in the same order, the same idempotency keys (shared with bookings: the
//! fingerprint names the operation, so a key used for one is `IDEMPOTENCY_KEY_REUSED` for the
//! other).

use chrono::{DateTime, Utc};

use super::{
    acting_for,
    changes::Changes,
    input::{booking_fingerprint, parse_duration, parse_id, parse_idempotency_key},
    retrying, BookingService,
};
use crate::{
    auth::Caller,
    db::{
        appointments::{self, Conflicts, InsertError, NewAppointment},
        entity::{appointment, time_slot},
        micros, seats,
        slots::{self, Run},
        StoreError,
    },
    error::{Field, Outcome, Refusal, ServiceError},
    guard::{
        flights::{self, Flight},
        Entered,
    },
    model::AppointmentStatus,
};

/// A booking or hold request as the caller sent it (values not yet parsed).
#[derive(Clone, Debug)]
pub struct BookRequest {
    /// The slot's id (the first slot, for a longer appointment).
    pub slot_id: String,
    /// The caller's idempotency key.
    pub idempotency_key: String,
    /// The patient, for partners and admins.
    pub patient_id: Option<String>,
    /// The appointment's length; `None`: the slot's own length.
    pub duration_minutes: Option<i32>,
}

/// A successful booking or hold (or the replay of one).
#[derive(Clone, Debug)]
pub struct Booked {
    /// The appointment.
    pub appointment: appointment::Model,
    /// True when this answers a retry of an earlier success.
    pub replayed: bool,
}

/// What takes the seat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Operation {
    Book,
    Hold,
}

impl Operation {
    fn status(self) -> AppointmentStatus {
        match self {
            Self::Book => AppointmentStatus::Booked,
            Self::Hold => AppointmentStatus::Held,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Book => "book",
            Self::Hold => "hold",
        }
    }
}

/// The parsed request.
struct Parsed<'a> {
    op: Operation,
    slot_id: i64,
    patient_id: i64,
    key: &'a str,
    scope: String,
    fingerprint: String,
    minutes: Option<i64>,
    /// An admin's request, which `NO_SHOW_LIMIT` never refuses.
    by_admin: bool,
}

/// What concurrent retries of one request share: the leader's answer, or the reason it did
/// not have one the followers may repeat.
#[derive(Clone, Debug)]
pub(super) enum Shared {
    /// The leader's booking (followers answer it as a replay) or refusal.
    Answer(Box<Result<Booked, Refusal>>),
    /// The leader was refused by the rate limit.
    RateLimited(u64),
    /// The leader found the service overloaded.
    Overloaded,
}

/// Requests that are retries of each other: same caller, key and input.
pub(super) type FlightKey = (String, String, String);

impl BookingService {
    /// Books a seat (a run of seats, with a duration) for a patient.
    #[tracing::instrument(level = "debug", skip_all, fields(caller = %caller.scope(), slot = %req.slot_id))]
    pub async fn book(&self, caller: &Caller, req: &BookRequest) -> Outcome<Booked> {
        let (caller, req) = (caller.clone(), req.clone());
        self.on_lane(move |s| async move { s.take(Operation::Book, &caller, &req).await }).await
    }

    /// Holds a seat (a run of seats) for a patient until now + the hold TTL.
    #[tracing::instrument(level = "debug", skip_all, fields(caller = %caller.scope(), slot = %req.slot_id))]
    pub async fn hold(&self, caller: &Caller, req: &BookRequest) -> Outcome<Booked> {
        let (caller, req) = (caller.clone(), req.clone());
        self.on_lane(move |s| async move { s.take(Operation::Hold, &caller, &req).await }).await
    }

    async fn take(&self, op: Operation, caller: &Caller, req: &BookRequest) -> Outcome<Booked> {
        let outcome = match parse(op, caller, req) {
            Ok(Ok(p)) => self.take_once(&p).await,
            Ok(Err(refusal)) => Ok(Err(refusal)),
            Err(e) => Err(e),
        };
        let outcome = self.durable_replay(outcome, |b| b.replayed).await;
        metrics::counter!("booking_attempts_total", "operation" => op.name(), "outcome" => outcome_label(&outcome))
            .increment(1);
        outcome
    }

    /// Answers concurrent retries of one request with one attempt (see `guard::flights`).
    async fn take_once(&self, p: &Parsed<'_>) -> Outcome<Booked> {
        let key = (p.scope.clone(), p.key.to_owned(), p.fingerprint.clone());
        loop {
            match self.flights.join(key.clone()) {
                Flight::Lead(leader) => {
                    let outcome = self.take_guarded(p).await;
                    leader.land(shared_of(&outcome));
                    return outcome;
                }
                Flight::Follow(rx) => match flights::answer(rx).await {
                    Some(Shared::Answer(answer)) => {
                        return Ok(answer.map(|b| Booked { replayed: true, ..b }));
                    }
                    Some(Shared::RateLimited(retry_after_secs)) => {
                        return Err(ServiceError::RateLimited { retry_after_secs })
                    }
                    Some(Shared::Overloaded) => return Err(ServiceError::Overloaded),
                    // The leader gave up (cancelled): take a turn of its own.
                    None => continue,
                },
            }
        }
    }

    /// The guards in order (rate limit, known-full, bulkhead), then the database.
    async fn take_guarded(&self, p: &Parsed<'_>) -> Outcome<Booked> {
        // Both checks in one Redis round trip (the connection pipelines them). A longer
        // appointment takes the transaction whatever its first slot's mark says.
        let (allowed, known_full) = tokio::join!(self.guard.limiter.check(p.patient_id), async {
            match p.minutes {
                None => self.guard.known_full.get(p.slot_id).await,
                Some(_) => None,
            }
        });
        if let Err(retry_after_secs) = allowed {
            return self.rate_limited(p, retry_after_secs).await;
        }
        // Before any seat is taken; a retry of an earlier success is still its replay.
        let outcome = if self.over_no_show_limit(p.patient_id, p.by_admin).await? {
            Ok(self.replay(p).await?.unwrap_or_else(|| Err(Refusal::no_show_limit())))
        } else if known_full.is_some() {
            self.answer_known_full(p).await
        } else {
            let entered = self.enter_bulkhead().await?;
            Box::pin(self.take_in_db(p, entered)).await
        };
        // A replay is not an attempt: it gives back what it counted.
        if matches!(&outcome, Ok(Ok(b)) if b.replayed) {
            self.guard.limiter.refund(p.patient_id).await;
        }
        outcome
    }

    /// The answer to a request over the rate limit: still the replay when its key holds an
    /// earlier success (or the refusal when the key was used for something else), which costs
    /// this one read and counts as no attempt; otherwise `RATE_LIMITED`.
    async fn rate_limited(&self, p: &Parsed<'_>, retry_after_secs: u64) -> Outcome<Booked> {
        match appointments::find_by_key(self.db.conn(), &p.scope, p.key).await? {
            Some(existing) => {
                self.guard.limiter.refund(p.patient_id).await;
                Ok(replay_of(p, existing))
            }
            None => Err(ServiceError::RateLimited { retry_after_secs }),
        }
    }

    /// A slot seen full: no transaction and no lock, but one read (coalesced with concurrent
    /// ones where the store can) of what still outranks `SLOT_FULL` (a replay of the caller's
    /// key, the patient's own appointments) and of the slot itself. The mark is only a hint: a
    /// slot that has a seat after all (a release whose clearing of the mark was lost while Redis
    /// was away) is booked through the database as usual, so the mark can never refuse a free
    /// seat.
    async fn answer_known_full(&self, p: &Parsed<'_>) -> Outcome<Booked> {
        // A coalesced read is not held behind the bulkhead: it shares its batcher's one
        // connection, so it cannot take the pool, and the more of them one statement answers,
        // the less each costs the database. A read through the pool waits for its place.
        let entered = if self.reads.take_pool_connections() { Some(self.enter_bulkhead().await?) } else { None };
        let (by_key, conflicts, slot) = self.key_seat_slot(p).await?;
        if let Some(existing) = by_key {
            return Ok(replay_of(p, existing));
        }
        let now = micros(Utc::now());
        let Some(slot) = slot else {
            return Ok(Err(Refusal::slot_not_found(Field::SlotId.in_request())));
        };
        if slot.available() > 0 && slot.start_at > now {
            self.guard.known_full.mark_open(&slot).await;
            let entered = match entered {
                Some(e) => e,
                None => self.enter_bulkhead().await?,
            };
            return Box::pin(self.take_in_db(p, entered)).await;
        }
        let refusal = refusal_for(std::slice::from_ref(&slot), now, conflicts);
        if refusal.code == crate::error::RefusalCode::SlotFull {
            metrics::counter!("known_full_rejects_total").increment(1);
        }
        Ok(Err(refusal))
    }

    /// The caller's appointment with the key, how the patient's appointments stand against the
    /// slot, and the slot as it is now: one read without locks, coalesced with concurrent ones
    /// where the store can.
    async fn key_seat_slot(
        &self,
        p: &Parsed<'_>,
    ) -> Result<(Option<appointment::Model>, Conflicts, Option<time_slot::Model>), ServiceError> {
        let found = self.reads.key_or_seat(&p.scope, p.key, p.slot_id, p.patient_id).await?;
        Ok((found.by_key, found.conflicts, found.slot))
    }

    /// Takes the seats ([`seats::take`]: one statement or a transaction, as the database allows).
    /// There is no lookup of the key first: a retry of a success meets the unique constraint on
    /// (caller, key) and is answered from the row that holds it, which keeps the common path
    /// short.
    ///
    /// Callers box its future: it holds the general transaction's states, kilobytes, and held
    /// inline it would be copied with every refused request's future too, which never runs it.
    async fn take_in_db(&self, p: &Parsed<'_>, entered: Entered) -> Outcome<Booked> {
        let run = match p.minutes {
            None => None,
            Some(minutes) => match slots::run_from(self.db.conn(), p.slot_id, minutes).await? {
                Run::NoSlot => return Ok(self.replay(p).await?.unwrap_or_else(|| Err(not_found()))),
                Run::NotCovered(_) => {
                    return Ok(Err(Refusal::invalid(
                        Field::DurationMinutes.in_request(),
                        "no run of consecutive slots starting at this slot covers exactly this duration",
                    )))
                }
                Run::Slots(run) if run.len() == 1 => None,
                Run::Slots(run) => Some(run),
            },
        };
        let now = micros(Utc::now());
        let expires_at = (p.op == Operation::Hold).then(|| micros(now + self.hold_ttl));
        let new = NewAppointment {
            status: p.op.status(),
            patient_id: p.patient_id,
            booked_by: &p.scope,
            idempotency_key: p.key,
            request_hash: &p.fingerprint,
            created_at: now,
            expires_at,
            rescheduled_from: None,
            first_booked_by: None,
        };
        let one = [p.slot_id];
        let ids: Vec<i64>;
        let slot_ids: &[i64] = match &run {
            None => &one,
            Some(run) => {
                ids = run.iter().map(|s| s.id).collect();
                &ids
            }
        };
        let taken = retrying(|| seats::take(&self.db, slot_ids, &new)).await;
        let run_ids = || run.as_ref().map_or_else(|| vec![p.slot_id], |r| r.iter().map(|s| s.id).collect());
        let (taken, appointment) = match taken {
            Ok(Some(done)) => done,
            Ok(None) => {
                drop(entered);
                return self.refusal_after_no_seat(p, &run_ids(), now).await;
            }
            // The caller's key raced: the request that holds it committed first.
            Err(InsertError::KeyTaken) => {
                return match self.replay(p).await? {
                    Some(answer) => Ok(answer),
                    None => Err(StoreError::Inconsistent("idempotency key taken but not found".into()).into()),
                }
            }
            // A retry of the request that holds the seat breaks both the key's unique index
            // and the overlap rule, and the database may name either: the key decides, then
            // the patient's appointments say which refusal it is (a seat in this very slot is
            // `ALREADY_BOOKED`, the overlap rule being the only one that refuses it).
            Err(InsertError::Overlapping) => {
                if let Some(answer) = self.replay(p).await? {
                    return Ok(answer);
                }
                let slots = match &run {
                    Some(run) => run.clone(),
                    None => slots::find(self.db.conn(), p.slot_id).await?.into_iter().collect(),
                };
                let conflicts = match span_of(&slots) {
                    Some(span) => appointments::conflicts(self.db.conn(), p.patient_id, span, &run_ids(), None).await?,
                    None => Conflicts::default(),
                };
                return Ok(Err(if conflicts.holds_seat { Refusal::already_booked() } else { Refusal::overlapping() }));
            }
            Err(InsertError::Store(e)) => return Err(e.into()),
        };
        // What follows the commit needs no connection: give the bulkhead place back first.
        drop(entered);
        let mut changes = Changes::default();
        changes.taken(&taken);
        self.committed(&changes).await;
        Ok(Ok(Booked { appointment, replayed: false }))
    }

    /// Why the conditional updates took no seat, read after the fact only to word the answer
    /// (the decision was theirs). The key may have taken these seats before, or, concurrently,
    /// the last of them.
    async fn refusal_after_no_seat(&self, p: &Parsed<'_>, run: &[i64], now: DateTime<Utc>) -> Outcome<Booked> {
        if run.len() == 1 {
            let (by_key, conflicts, slot) = self.key_seat_slot(p).await?;
            if let Some(existing) = by_key {
                return Ok(replay_of(p, existing));
            }
            let Some(slot) = slot else {
                return Ok(Err(not_found()));
            };
            if slot.available() <= 0 && slot.start_at > now {
                self.guard.known_full.mark_full(&slot).await;
            }
            return Ok(Err(refusal_for(&[slot], now, conflicts)));
        }
        if let Some(answer) = self.replay(p).await? {
            return Ok(answer);
        }
        let mut slots = slots::find_many(self.db.conn(), run).await?;
        slots.sort_unstable_by_key(|s| s.start_at);
        let Some(span) = span_of(&slots) else {
            return Ok(Err(not_found()));
        };
        let conflicts = appointments::conflicts(self.db.conn(), p.patient_id, span, run, None).await?;
        Ok(Err(refusal_for(&slots, now, conflicts)))
    }

    /// The answer for a key the caller used before: a replay, or a refusal when the request
    /// differs. `None` when the key is new.
    async fn replay(&self, p: &Parsed<'_>) -> Result<Option<Result<Booked, Refusal>>, ServiceError> {
        let existing = appointments::find_by_key(self.db.conn(), &p.scope, p.key).await?;
        Ok(existing.map(|e| replay_of(p, e)))
    }
}

/// The time span of a run of slots (by start).
pub(super) fn span_of(run: &[time_slot::Model]) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
    Some((run.first()?.start_at, run.last()?.end_at))
}

/// What concurrent retries of a request may share of its outcome.
fn shared_of(outcome: &Outcome<Booked>) -> Option<Shared> {
    match outcome {
        Ok(answer) => Some(Shared::Answer(Box::new(answer.clone()))),
        Err(ServiceError::RateLimited { retry_after_secs }) => Some(Shared::RateLimited(*retry_after_secs)),
        Err(ServiceError::Overloaded) => Some(Shared::Overloaded),
        // Internal failures and role errors: each retry finds its own answer.
        Err(_) => None,
    }
}

/// The answer to a key used before: a replay, or a refusal when the request differs.
fn replay_of(p: &Parsed<'_>, existing: appointment::Model) -> Result<Booked, Refusal> {
    if existing.request_hash != p.fingerprint {
        return Err(Refusal::key_reused(Field::IdempotencyKey.in_request()));
    }
    Ok(Booked { appointment: existing, replayed: true })
}

/// The `booking_attempts_total` label of an outcome.
fn outcome_label(outcome: &Outcome<Booked>) -> &'static str {
    match outcome {
        Ok(Ok(b)) if b.replayed => "REPLAYED",
        Ok(Ok(b)) if b.appointment.status == appointment::HELD => "HELD",
        Ok(Ok(_)) => "BOOKED",
        Ok(Err(refusal)) => refusal.code.as_str(),
        Err(e) => e.code(),
    }
}

/// The refusal for a run of slots (by start) in which no seat was taken, in the contract's
/// order: `SLOT_IN_PAST`, `SLOT_CLOSED`, `ALREADY_BOOKED`, `OVERLAPPING_APPOINTMENT`,
/// `SLOT_FULL` (not found is told before).
pub(super) fn refusal_for(run: &[time_slot::Model], now: DateTime<Utc>, conflicts: Conflicts) -> Refusal {
    if run.iter().any(|s| s.start_at <= now) {
        Refusal::slot_in_past()
    } else if run.iter().any(|s| s.closed_at.is_some()) {
        Refusal::slot_closed()
    } else if conflicts.holds_seat {
        Refusal::already_booked()
    } else if conflicts.overlaps {
        Refusal::overlapping()
    } else {
        Refusal::slot_full()
    }
}

fn not_found() -> Refusal {
    Refusal::slot_not_found(Field::SlotId.in_request())
}

/// Checks the role rules and parses the values, in the order a caller fixes them.
fn parse<'a>(
    op: Operation,
    caller: &Caller,
    req: &'a BookRequest,
) -> Result<Result<Parsed<'a>, Refusal>, ServiceError> {
    let patient_id = match acting_for(caller, req.patient_id.as_deref(), "book appointments")? {
        Ok(id) => id,
        Err(refusal) => return Ok(Err(refusal)),
    };
    let slot_id = match parse_id(Field::SlotId.name(), &req.slot_id) {
        Ok(id) => id,
        Err(msg) => return Ok(Err(Refusal::invalid(Field::SlotId.in_request(), msg))),
    };
    let key = match parse_idempotency_key(&req.idempotency_key) {
        Ok(k) => k,
        Err(msg) => return Ok(Err(Refusal::invalid(Field::IdempotencyKey.in_request(), msg))),
    };
    let minutes = match req.duration_minutes.map(parse_duration).transpose() {
        Ok(m) => m,
        Err(msg) => return Ok(Err(Refusal::invalid(Field::DurationMinutes.in_request(), msg))),
    };
    Ok(Ok(Parsed {
        op,
        slot_id,
        patient_id,
        key,
        scope: caller.scope(),
        fingerprint: booking_fingerprint(op.name(), slot_id, patient_id, minutes),
        minutes,
        by_admin: caller.role == crate::auth::Role::Admin,
    }))
}
