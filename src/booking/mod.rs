//! The booking domain: schedules, booking, cancelling and who may read what.
//!
//! Correctness lives in the database. A booking is one conditional
//! `UPDATE … WHERE booked_count < capacity AND start_at > now` plus the insert, in one
//! transaction; a cancel is one conditional `BOOKED → CANCELLED` transition plus the release.
//! Nothing here reads a value and then writes a decision based on it.

mod book;
mod cancel;
pub mod error;
pub mod input;
mod publish;
pub mod read;
pub mod schedule;

pub use book::{BookRequest, Booked};
pub use cancel::Cancelled;
pub use error::{Refusal, RefusalCode, ServiceError};
pub use publish::{NewDoctor, PublishRequest, Published};
pub use read::DoctorPage;

use std::sync::Arc;

use crate::{db::Db, events::CommitSink};

/// The booking operations, shared by every request of an instance.
#[derive(Clone)]
pub struct BookingService {
    db: Db,
    sink: Arc<dyn CommitSink>,
}

impl BookingService {
    /// A service on `db`, telling `sink` about every committed slot change.
    pub fn new(db: Db, sink: Arc<dyn CommitSink>) -> Self {
        Self { db, sink }
    }

    /// The database, for readiness checks and loaders.
    pub fn db(&self) -> &Db {
        &self.db
    }
}

/// Answer of an operation that reports refusals as data.
pub type Outcome<T> = Result<Result<T, Refusal>, ServiceError>;
