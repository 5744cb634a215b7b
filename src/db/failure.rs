//! The one failure policy of the database: what a failed query means, said once here and
//! nowhere else ([`FailureClass`]), and which connections it condemns.
//!
//! Each edge (GraphQL, FHIR, the direct answers, the metric labels) maps the class once:
//! [`FailureClass::Unavailable`] is `UNAVAILABLE` (503 on FHIR) with a retry hint,
//! [`FailureClass::Overloaded`] is `OVERLOADED`, the rest is `INTERNAL`.
//!
//! **Connections that lead nowhere.** When a failover moves the primary, the connections open
//! before it lead to a dead or a demoted (read-only, `25006`) server, and a connection whose
//! operation was cut by `DB_UNAVAILABLE_TIMEOUT_MS` may still be waiting for its answer. None
//! of them may serve another statement. Every failure classed unavailable (and every cut) is
//! noted here with its time ([`note_unavailable`]); the PostgreSQL pools close, when they hand
//! out or take back a connection, any connection opened before the latest such failure
//! ([`opened_before_failure`]), and so do the hot connections. Healthy connections opened
//! before it are reopened once: a few connects after a failure, against a pool that would
//! otherwise fail writes with `25006` for as long as it lives.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        OnceLock,
    },
    time::{Duration, Instant},
};

use sea_orm::{ConnAcquireErr, DbErr, RuntimeErr};

/// Seconds a client should wait before retrying an operation answered unavailable: about
/// the time a failover takes to lead the address to the new primary.
pub const RETRY_AFTER_SECS: u64 = 2;

/// What a database failure means to the caller of the operation that met it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureClass {
    /// No primary answers: the connection was lost or refused, the server is shutting down,
    /// in recovery or read-only, the pool has no connection to give, or the operation ran past
    /// `DB_UNAVAILABLE_TIMEOUT_MS`. Its outcome may be unknown; a same-key retry is safe.
    Unavailable,
    /// The database is too busy to take the statement (SQLite's lock, a statement or lock
    /// timeout, too many connections): nothing was written, retrying shortly is safe.
    Overloaded,
    /// A constraint refused the row (the last defence behind the domain's checks).
    Constraint,
    /// Anything else: a bug, a schema mismatch, data the code does not expect.
    Internal,
}

/// The class of a sea-orm error.
pub fn of_db_err(err: &DbErr) -> FailureClass {
    match err {
        DbErr::ConnectionAcquire(ConnAcquireErr::Timeout | ConnAcquireErr::ConnectionClosed) => {
            FailureClass::Unavailable
        }
        DbErr::Conn(RuntimeErr::SqlxError(e))
        | DbErr::Exec(RuntimeErr::SqlxError(e))
        | DbErr::Query(RuntimeErr::SqlxError(e)) => of_sqlx(e),
        _ => FailureClass::Internal,
    }
}

/// The class of a sqlx error.
pub fn of_sqlx(err: &sqlx::Error) -> FailureClass {
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => FailureClass::Unavailable,
        sqlx::Error::Database(db) => {
            if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
                // SQLITE_BUSY and its extended codes (BUSY_RECOVERY, BUSY_SNAPSHOT, BUSY_TIMEOUT).
                let busy = db.code().and_then(|c| c.parse::<i32>().ok()).is_some_and(|c| c & 0xff == 5);
                return if busy { FailureClass::Overloaded } else { of_sqlite_kind(db.kind()) };
            }
            match db.code() {
                Some(code) => of_sqlstate(&code),
                None => FailureClass::Internal,
            }
        }
        _ => FailureClass::Internal,
    }
}

/// SQLite's constraint failures; other refusals are internal.
fn of_sqlite_kind(kind: sqlx::error::ErrorKind) -> FailureClass {
    match kind {
        sqlx::error::ErrorKind::Other => FailureClass::Internal,
        _ => FailureClass::Constraint,
    }
}

/// The class of a PostgreSQL SQLSTATE.
pub fn of_sqlstate(code: &str) -> FailureClass {
    match code {
        // Connection exceptions; the server shutting down (admin, crash, cannot connect now:
        // starting up or in recovery); a write on a read-only server (a demoted primary, a
        // standby); a write refused while the server is in hot standby.
        c if c.starts_with("08") => FailureClass::Unavailable,
        "57P01" | "57P02" | "57P03" | "25006" => FailureClass::Unavailable,
        // Statement timeout or cancel, lock timeout, too many connections / out of resources.
        "57014" | "55P03" => FailureClass::Overloaded,
        c if c.starts_with("53") => FailureClass::Overloaded,
        c if c.starts_with("23") => FailureClass::Constraint,
        _ => FailureClass::Internal,
    }
}

/// The instant every age here is measured from.
fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// Milliseconds from [`origin`] to the latest failure classed unavailable, plus one (0: none).
static LAST_UNAVAILABLE: AtomicU64 = AtomicU64::new(0);

/// Notes that a connection met a failure classed unavailable (or an operation was cut): every
/// connection opened before now is to be closed rather than reused.
pub fn note_unavailable() {
    let now = u64::try_from(origin().elapsed().as_millis()).unwrap_or(u64::MAX).saturating_add(1);
    LAST_UNAVAILABLE.fetch_max(now, Ordering::Relaxed);
    metrics::counter!("db_unavailable_total").increment(1);
}

/// Whether a connection of age `age` was opened before (or at) the latest failure classed
/// unavailable, so that it may lead to a dead or demoted server and must not be reused.
pub fn opened_before_failure(age: Duration) -> bool {
    condemned(LAST_UNAVAILABLE.load(Ordering::Relaxed), origin().elapsed(), age)
}

/// Whether a connection of age `age` at `now` (both from [`origin`]) was opened before the
/// failure noted as `last` (see [`LAST_UNAVAILABLE`]). A connection opened in the same
/// millisecond is condemned too.
fn condemned(last: u64, now: Duration, age: Duration) -> bool {
    last != 0 && now.saturating_sub(age) <= Duration::from_millis(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates_have_one_class_each() {
        for code in ["08006", "08001", "08P01", "57P01", "57P02", "57P03", "25006"] {
            assert_eq!(of_sqlstate(code), FailureClass::Unavailable, "{code}");
        }
        for code in ["57014", "55P03", "53300"] {
            assert_eq!(of_sqlstate(code), FailureClass::Overloaded, "{code}");
        }
        assert_eq!(of_sqlstate("23505"), FailureClass::Constraint);
        assert_eq!(of_sqlstate("42P01"), FailureClass::Internal);
        assert_eq!(of_sqlx(&sqlx::Error::PoolTimedOut), FailureClass::Unavailable);
        let io = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert_eq!(of_sqlx(&io), FailureClass::Unavailable);
        assert_eq!(of_db_err(&DbErr::ConnectionAcquire(ConnAcquireErr::Timeout)), FailureClass::Unavailable);
        assert_eq!(of_db_err(&DbErr::Custom("x".into())), FailureClass::Internal);
    }

    #[test]
    fn connections_opened_before_a_failure_are_condemned() {
        let ms = Duration::from_millis;
        assert!(!condemned(0, ms(1000), ms(900)), "no failure yet");
        // The failure noted at 500 ms (stored as 501).
        assert!(condemned(501, ms(1000), ms(600)), "opened at 400 ms, before the failure");
        assert!(!condemned(501, ms(1000), ms(400)), "opened at 600 ms, after it");
    }
}
