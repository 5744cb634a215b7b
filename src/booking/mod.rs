//! The booking domain: schedules, booking, cancelling and who may read what.
//!
//! Correctness lives in the database. A booking is one conditional
//! `UPDATE … WHERE booked_count < capacity AND start_at > now` plus the insert, in one
//! transaction; a cancel is one conditional `BOOKED → CANCELLED` transition plus the release.
//! Nothing here reads a value and then writes a decision based on it.
//!
//! In front of the database sit the guards of [`crate::guard`]: slot lists come from a cache
//! that commits invalidate; booking attempts pass the per-patient rate limit, then the
//! known-full check (a slot seen full answers `SLOT_FULL` after one indexed lookup of the
//! caller's key and the patient's seat, without the transaction), then the bulkhead.

mod book;
mod cancel;
pub mod error;
pub mod input;
mod lookup;
mod publish;
pub mod read;
pub mod schedule;

pub use book::{BookRequest, Booked};
pub use cancel::Cancelled;
pub use error::{Refusal, RefusalCode, ServiceError};
pub use publish::{NewDoctor, PublishRequest, Published};
pub use read::{DoctorPage, SlotList};

use std::sync::Arc;

use crate::{
    db::{self, Db},
    guard::Guard,
    model::CommitSink,
};

/// The booking operations, shared by every request of an instance.
#[derive(Clone)]
pub struct BookingService {
    db: Db,
    sink: Arc<dyn CommitSink>,
    guard: Arc<Guard>,
    /// Coalesces the reads of attempts on known-full slots (PostgreSQL; started on first use).
    lookups: Arc<std::sync::OnceLock<lookup::LookupBatcher>>,
    /// Coalesces the slot lists the cache did not have (PostgreSQL; started on first use).
    lists: Arc<std::sync::OnceLock<lookup::ListBatcher>>,
}

impl BookingService {
    /// A service on `db`, telling `sink` about every committed slot change (no burst
    /// protection until [`BookingService::with_guard`]).
    pub fn new(db: Db, sink: Arc<dyn CommitSink>) -> Self {
        Self { db, sink, guard: Arc::new(Guard::disabled()), lookups: Arc::default(), lists: Arc::default() }
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

    /// Drops the cached list of the slot's day, after a commit that changed the slot. Awaited
    /// before the answer, so a client that reads after its booking sees it.
    async fn slot_changed(&self, slot: &db::entity::time_slot::Model) {
        let day = match self.timezone(slot.doctor_id).await {
            Ok(Some(tz)) => Some(slot.start_at.with_timezone(&tz).date_naive()),
            Ok(None) => {
                tracing::error!(slot = slot.id, "the doctor of a changed slot is missing");
                None
            }
            Err(e) => {
                tracing::warn!(slot = slot.id, error = %e, "cannot invalidate the slot list");
                None
            }
        };
        match day {
            Some(date) => self.day_changed(slot.doctor_id, date).await,
            // The commit stands; the shared list may stay stale for at most the cache TTL.
            None => self.guard.answers.changed(slot.doctor_id),
        }
    }

    /// Drops what the caches hold of a doctor's day after a commit changed it: the shared rows
    /// first, then this instance's rendered answers. In that order, a list rendered meanwhile
    /// either read the rows after the delete or carries a stamp the second step makes stale.
    async fn day_changed(&self, doctor_id: i64, date: chrono::NaiveDate) {
        self.guard.slots.invalidate(doctor_id, date).await;
        self.guard.answers.changed(doctor_id);
    }
}

/// Answer of an operation that reports refusals as data.
pub type Outcome<T> = Result<Result<T, Refusal>, ServiceError>;
