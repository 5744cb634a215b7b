//! The booking domain: schedules, booking, cancelling and who may read what.
//!
//! Correctness lives in the database. A booking is one conditional
//! `UPDATE … WHERE booked_count < capacity AND start_at > now` plus the insert, in one
//! transaction; a cancel is one conditional `HELD`/`BOOKED` → `CANCELLED` transition plus the
//! release. Nothing here reads a value and then writes a decision based on it.
//!
//! In front of the database sit the guards of [`crate::guard`]: slot lists come from a cache
//! that commits invalidate; booking attempts pass the per-patient rate limit, then the
//! known-full check (a slot seen full answers `SLOT_FULL` after one indexed lookup of the
//! caller's key and the patient's seat, without the transaction), then the bulkhead.

mod book;
mod cancel;
mod changes;
mod close;
mod confirm;
mod desk;
mod expire;
pub mod find;
pub mod hours;
mod identity;
pub mod input;
mod publish;
pub mod read;
mod reschedule;
pub mod schedule;
pub mod settings;
mod waitlist;

pub use book::{BookRequest, Booked};
pub use cancel::Cancelled;
pub use close::{CloseRequest, Closed};
pub use confirm::Confirmed;
pub use desk::{DeskMove, Moved};
pub use expire::ExpiryJob;
pub use find::{FindRequest, FoundSlots, SlotPosition};
pub use hours::{
    HorizonJob, HoursRequest, HoursSet, Pattern, RollReport, TimeOffAdded, TimeOffRemoved, TimeOffRequest,
    WeeklyRequest,
};
pub use publish::{NewDoctor, PublishRequest, Published};
pub use read::{DoctorPage, SlotList};
pub use reschedule::{RescheduleRequest, Rescheduled};
pub use settings::Settings;
pub use waitlist::{JoinRequest, Joined, Left, MY_WAITLIST_LIMIT};

use std::{future::Future, sync::Arc, time::Duration};

use crate::{
    auth::{Caller, Role},
    db::{self, Db, StoreError},
    error::{Field, Outcome, Refusal, ServiceError},
    guard::Guard,
    model::{CancelledBy, CommitSink},
};

/// How long a hold keeps its seat when nothing else is configured (`HOLD_TTL_SECS`).
pub const DEFAULT_HOLD_TTL: Duration = Duration::from_secs(600);
/// How long a waitlist offer keeps its seat when nothing else is configured
/// (`WAITLIST_OFFER_SECS`).
pub const DEFAULT_OFFER_TTL: Duration = Duration::from_secs(900);

/// How often a write transaction is tried when the database aborts it to break a deadlock
/// or a serialization conflict (possible only between the rare multi-row operations).
const TRANSIENT_ATTEMPTS: u32 = 5;

/// The booking operations, shared by every request of an instance.
#[derive(Clone)]
pub struct BookingService {
    db: Db,
    sink: Arc<dyn CommitSink>,
    guard: Arc<Guard>,
    /// The reads of attempts on known-full slots and of the slot lists the cache did not
    /// have (coalesced where the database allows).
    reads: db::CoalescedReads,
    /// How long a hold keeps its seat.
    hold_ttl: chrono::Duration,
    /// How long a waitlist offer keeps its seat.
    offer_ttl: chrono::Duration,
    /// Days after today whose slots working hours make (`SCHEDULE_HORIZON_DAYS`).
    horizon_days: u32,
    /// The share of a connection's time the daily roll may take (`SCHEDULE_ROLL_SHARE_PERCENT`).
    roll_share_percent: u32,
    /// Concurrent retries of one booking or hold, answered by one attempt.
    flights: Arc<crate::guard::flights::Flights<book::FlightKey, book::Shared>>,
    /// Searched specialties as the database folds them (see [`find`]'s stamps).
    folded_specialties: find::Folds,
    /// No-shows in the last 365 days that stop a patient's new bookings (`NO_SHOW_LIMIT`; 0: none).
    no_show_limit: u32,
}

/// The doctor a change of schedule names, when `caller` may change it: a malformed id is a
/// refusal, and anyone but admins and that doctor is `FORBIDDEN` ("only admins and the doctor
/// may {what}"). Patients and partners are refused whatever id they send.
fn managed_doctor(caller: &Caller, raw_id: &str, what: &str) -> Result<Result<i64, Refusal>, ServiceError> {
    let forbidden = || ServiceError::Forbidden(format!("only admins and the doctor may {what}"));
    if !matches!(caller.role, Role::Admin | Role::Doctor) {
        return Err(forbidden());
    }
    let doctor_id = match input::parse_id(Field::DoctorId.name(), raw_id) {
        Ok(id) => id,
        Err(msg) => return Ok(Err(Refusal::invalid(Field::DoctorId.in_request(), msg))),
    };
    if !caller.manages_doctor(doctor_id) {
        return Err(forbidden());
    }
    Ok(Ok(doctor_id))
}

impl BookingService {
    /// A service on `db`, telling `sink` about every committed slot change (no burst
    /// protection until [`BookingService::with_guard`]).
    pub fn new(db: Db, sink: Arc<dyn CommitSink>) -> Self {
        Self {
            reads: db::CoalescedReads::new(db.clone()),
            db,
            sink,
            guard: Arc::new(Guard::disabled()),
            hold_ttl: chrono::Duration::from_std(DEFAULT_HOLD_TTL).unwrap_or(chrono::Duration::MAX),
            offer_ttl: chrono::Duration::from_std(DEFAULT_OFFER_TTL).unwrap_or(chrono::Duration::MAX),
            horizon_days: settings::DEFAULT_HORIZON_DAYS,
            roll_share_percent: settings::DEFAULT_ROLL_SHARE_PERCENT,
            flights: Arc::default(),
            folded_specialties: find::Folds::default(),
            no_show_limit: 0,
        }
    }

    /// The same service refusing new bookings and holds to patients with `limit` or more
    /// no-shows in the last 365 days (0: no limit).
    pub fn with_no_show_limit(self, limit: u32) -> Self {
        Self { no_show_limit: limit, ..self }
    }

    /// The same service with working hours making slots `days` ahead.
    pub fn with_horizon_days(self, days: u32) -> Self {
        Self { horizon_days: days, ..self }
    }

    /// The same service with waitlist offers kept for `ttl`.
    pub fn with_offer_ttl(self, ttl: Duration) -> Self {
        Self { offer_ttl: chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::MAX), ..self }
    }

    /// The same service with the holds and offers of `settings`.
    pub fn with_settings(self, settings: &Settings) -> Self {
        self.with_hold_ttl(settings.hold_ttl)
            .with_offer_ttl(settings.waitlist_offer_ttl)
            .with_horizon_days(settings.horizon_days)
            .with_roll_share(settings.roll_share_percent)
            .with_no_show_limit(settings.no_show_limit)
    }

    /// The same service with the daily roll taking `percent` of one connection's time.
    pub fn with_roll_share(self, percent: u32) -> Self {
        Self { roll_share_percent: percent.clamp(1, 100), ..self }
    }

    /// The same service with holds kept for `ttl`.
    pub fn with_hold_ttl(self, ttl: Duration) -> Self {
        Self { hold_ttl: chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::MAX), ..self }
    }

    /// The same service behind `guard` (cache, rate limit, known-full, bulkhead).
    pub fn with_guard(self, guard: Arc<Guard>) -> Self {
        Self { guard, ..self }
    }

    /// The database, for readiness checks and loaders.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The burst protection, for `/metrics`.
    pub fn guard(&self) -> &Guard {
        &self.guard
    }

    /// Runs a seat operation on the booking lane (see `guard::lane`): the future `work` makes of
    /// a clone of the service. The future is boxed: it holds every path the operation may take,
    /// and inline it would make each caller's future as large, copied at every await above.
    async fn on_lane<T, F, Fut>(&self, work: F) -> Outcome<T>
    where
        F: FnOnce(BookingService) -> Fut,
        Fut: Future<Output = Outcome<T>> + Send + 'static,
        T: Send + 'static,
    {
        // Bounded on the lane itself, so that an operation cut by `DB_UNAVAILABLE_TIMEOUT_MS`
        // is dropped there (its connections with it), not merely left to run.
        let (db, work) = (self.db.clone(), work(self.clone()));
        match self.guard.lane.run(Box::pin(async move { db.bounded(work).await })).await {
            Ok(outcome) => outcome,
            Err(gone) => Err(StoreError::Inconsistent(gone.to_string()).into()),
        }
    }

    /// `outcome`, once durable when it is a replay (`replayed`): a replay answers "done" from a
    /// row found, which may have been committed on the primary by an attempt whose commit was
    /// cut while waiting for the synchronous standby, so that the standby may not hold it.
    /// [`Db::make_durable`] returns only once it does; until then the answer is the error.
    pub(crate) async fn durable_replay<T>(&self, outcome: Outcome<T>, replayed: impl FnOnce(&T) -> bool) -> Outcome<T> {
        if matches!(&outcome, Ok(Ok(answer)) if replayed(answer)) {
            self.db.make_durable().await?;
        }
        outcome
    }

    /// Waits for the booking bulkhead (`OVERLOADED` when it stays full for the queue timeout).
    async fn enter_bulkhead(&self) -> Result<crate::guard::Entered, ServiceError> {
        self.guard.bulkhead.enter().await.map_err(|_| ServiceError::Overloaded)
    }

    /// The doctor's time zone: from the in-process map, else from the database (then kept).
    /// `None` for an unknown doctor.
    async fn timezone(&self, doctor_id: i64) -> Result<Option<chrono_tz::Tz>, ServiceError> {
        if let Some(tz) = self.guard.timezones.get(doctor_id) {
            return Ok(Some(tz));
        }
        let Some(doctor) = db::doctors::find(self.db.conn(), doctor_id).await? else {
            return Ok(None);
        };
        let tz = input::parse_timezone(&doctor.timezone)
            .map_err(|m| db::StoreError::Inconsistent(format!("doctor {doctor_id}: {m}")))?;
        self.guard.timezones.put(doctor_id, tz);
        Ok(Some(tz))
    }

    /// The doctor's day a slot starts on, in the doctor's zone (`None`, logged, when the
    /// zone cannot be found: the caches then fall back to their TTL).
    async fn day_of(&self, slot: &db::entity::time_slot::Model) -> Option<chrono::NaiveDate> {
        match self.timezone(slot.doctor_id).await {
            Ok(Some(tz)) => Some(slot.start_at.with_timezone(&tz).date_naive()),
            Ok(None) => {
                tracing::error!(slot = slot.id, "the doctor of a changed slot is missing");
                None
            }
            Err(e) => {
                tracing::warn!(slot = slot.id, error = %e, "cannot invalidate the slot list");
                None
            }
        }
    }
}

/// The patient a request by `caller` acts for, by the booking roles: a patient for itself
/// (naming its own id is allowed, another's is `FORBIDDEN`); partners and admins must name one
/// (the request's [`Field::PatientId`]; `INVALID_INPUT` otherwise); doctors may not
/// (`FORBIDDEN`, see [`not_a_doctor`]). `what` completes "doctors cannot …". The one rule of who
/// a request acts for: bookings, holds, waitlist entries and contact details all follow it.
pub(crate) fn acting_for(caller: &Caller, raw: Option<&str>, what: &str) -> Result<Result<i64, Refusal>, ServiceError> {
    let field = Field::PatientId.in_request();
    match caller.role {
        Role::Doctor => Err(doctors_cannot(what)),
        Role::Patient => {
            let own = caller.patient_id.ok_or(ServiceError::Unauthenticated)?;
            match raw.map(|raw| input::parse_id(Field::PatientId.name(), raw)) {
                None => Ok(Ok(own)),
                Some(Ok(id)) if id == own => Ok(Ok(own)),
                Some(Ok(_)) => Err(ServiceError::Forbidden(format!("patients {what} for themselves only"))),
                Some(Err(msg)) => Ok(Err(Refusal::invalid(field, msg))),
            }
        }
        Role::Partner | Role::Admin => match raw {
            None => Ok(Err(Refusal::invalid(field, "patientId is required when acting on a patient's behalf"))),
            Some(raw) => Ok(input::parse_id(Field::PatientId.name(), raw).map_err(|msg| Refusal::invalid(field, msg))),
        },
    }
}

/// Refuses a doctor what only the patient's side does (booking, holding, confirming,
/// cancelling, rescheduling, joining a waitlist, a patient's contact details): the clinic acts
/// on a doctor's appointments through its admins. `what` completes "doctors cannot …".
pub(crate) fn not_a_doctor(caller: &Caller, what: &str) -> Result<(), ServiceError> {
    match caller.role {
        Role::Doctor => Err(doctors_cannot(what)),
        Role::Patient | Role::Partner | Role::Admin => Ok(()),
    }
}

fn doctors_cannot(what: &str) -> ServiceError {
    ServiceError::Forbidden(format!("doctors cannot {what}"))
}

/// Who a cancel (or a reschedule) by `caller` is attributed to.
pub(crate) fn cancelled_by(caller: &Caller) -> CancelledBy {
    match caller.role {
        Role::Patient => CancelledBy::Patient,
        Role::Partner => CancelledBy::Partner,
        Role::Admin | Role::Doctor => CancelledBy::Clinic,
    }
}

/// An error that may mean "the database aborted the transaction; running it again works".
pub(crate) trait Transient {
    /// Whether it does.
    fn is_transient(&self) -> bool;
}

impl Transient for StoreError {
    fn is_transient(&self) -> bool {
        StoreError::is_transient(self)
    }
}

impl Transient for ServiceError {
    fn is_transient(&self) -> bool {
        matches!(self, ServiceError::Store(e) if e.is_transient())
    }
}

impl Transient for db::appointments::InsertError {
    fn is_transient(&self) -> bool {
        matches!(self, db::appointments::InsertError::Store(e) if e.is_transient())
    }
}

/// Runs a write transaction again when the database aborted it to break a deadlock or a
/// serialization conflict, so such an abort never reaches a client. `attempt` must start its
/// transaction afresh each time (nothing it did survives the abort).
pub(crate) async fn retrying<T, E, F, Fut>(mut attempt: F) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: Transient,
{
    let mut tries = 1;
    loop {
        match attempt().await {
            Err(e) if tries < TRANSIENT_ATTEMPTS && e.is_transient() => {
                tracing::debug!(tries, "transaction aborted by the database; trying again");
                metrics::counter!("db_transaction_retries_total").increment(1);
                // A few milliseconds, growing and jittered, let the other transaction finish.
                let wait = rand::random::<u64>() % (5 * u64::from(tries)) + 1;
                tokio::time::sleep(Duration::from_millis(wait)).await;
                tries += 1;
            }
            other => return other,
        }
    }
}
