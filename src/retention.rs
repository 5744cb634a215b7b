//! Retention: sent, given-up and skipped patient messages and finished webhook deliveries (with
//! their attempts) are removed `RETENTION_DAYS` after they finished, so the queues' tables do
//! not grow for ever. What is pending (a reminder not yet due, a delivery waiting for its retry)
//! is never removed.
//!
//! A job in every instance deletes in batches of [`BATCH`] rows, each its own short statement:
//! no lock is held long, and on SQLite each batch takes its turn at the write gate, so bookings
//! queued meanwhile go first. Instances running it at once take disjoint rows (`SKIP LOCKED`
//! on PostgreSQL) and never wait for one another.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tokio::{sync::watch, task::JoinHandle};

use crate::{
    db::{messages, micros, webhooks, Db, StoreError},
    settings::{ConfigError, Reader},
};

/// Rows one statement deletes: a few milliseconds of work, attempts of deliveries included.
pub const BATCH: u64 = 500;
/// How often the job runs after its first pass at start-up: retention counts in days, so an
/// hour late is nothing, and a pass that finds nothing costs two index probes.
const EVERY: Duration = Duration::from_secs(3600);

/// Largest `RETENTION_DAYS`: a hundred years, far beyond any use, and far from overflowing.
const MAX_DAYS: u64 = 36_500;

/// The retention job's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// How long sent, given-up and skipped messages and finished webhook deliveries are kept
    /// before the job removes them (`RETENTION_DAYS`, default 30); `None` (`0`): kept for ever.
    pub keep: Option<Duration>,
}

impl Settings {
    /// Reads them.
    pub fn from_env(r: &mut Reader) -> Result<Self, ConfigError> {
        let days = r.number("RETENTION_DAYS", 30u64, ..=MAX_DAYS, "a number of days (0 keeps them for ever)")?;
        Ok(Self { keep: (days > 0).then(|| Duration::from_secs(days * 86_400)) })
    }
}

/// What one pass removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Removed {
    /// Patient messages.
    pub messages: u64,
    /// Webhook deliveries (their attempts went with them).
    pub deliveries: u64,
}

/// The retention job of an instance.
pub struct RetentionJob;

impl RetentionJob {
    /// Removes what finished longer than `keep` ago, at start and then every hour, until `stop`
    /// says true.
    pub fn start(db: Db, keep: Duration, mut stop: watch::Receiver<bool>) -> JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                match purge(&db, Utc::now(), keep, &stop).await {
                    Ok(removed) if removed != Removed::default() => {
                        tracing::info!(messages = removed.messages, deliveries = removed.deliveries, "retention");
                    }
                    Ok(_) => {}
                    // What was not removed stays for the next pass.
                    Err(error) => tracing::warn!(%error, "removing old messages and deliveries failed"),
                }
                tokio::select! {
                    () = tokio::time::sleep(EVERY) => {}
                    () = async { let _ = stop.wait_for(|s| *s).await.map(drop); } => return,
                }
            }
        })
    }
}

/// One pass at `now`: removes, batch by batch, the messages and deliveries that finished more
/// than `keep` ago, until none is left or `stop` says true.
pub async fn purge(
    db: &Db,
    now: DateTime<Utc>,
    keep: Duration,
    stop: &watch::Receiver<bool>,
) -> Result<Removed, StoreError> {
    let Some(before) = TimeDelta::from_std(keep).ok().and_then(|keep| now.checked_sub_signed(keep)) else {
        return Ok(Removed::default());
    };
    let before = micros(before);
    let mut removed = Removed::default();
    loop {
        let n = {
            let _writing = db.writing().await;
            messages::delete_finished(db.conn(), before, BATCH).await?
        };
        removed.messages += n;
        metrics::counter!("retention_removed_total", "table" => "patient_message").increment(n);
        if n < BATCH || *stop.borrow() {
            break;
        }
    }
    loop {
        let n = {
            let _writing = db.writing().await;
            webhooks::delete_finished(db.conn(), before, BATCH).await?
        };
        removed.deliveries += n;
        metrics::counter!("retention_removed_total", "table" => "webhook_delivery").increment(n);
        if n < BATCH || *stop.borrow() {
            break;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::{config::tests::config, settings::ConfigError};

    #[test]
    fn retention_settings() -> Result<(), ConfigError> {
        assert_eq!(config(&[])?.retention.keep, Some(Duration::from_secs(30 * 86_400)));
        assert_eq!(config(&[("RETENTION_DAYS", "7")])?.retention.keep, Some(Duration::from_secs(7 * 86_400)));
        assert_eq!(config(&[("RETENTION_DAYS", "0")])?.retention.keep, None, "0 keeps them for ever");
        for bad in ["-1", "30d", "1.5", "ten", "36501"] {
            let err = config(&[("RETENTION_DAYS", bad)]).unwrap_err();
            assert_eq!(err.var, "RETENTION_DAYS", "{bad}");
            assert!(err.to_string().starts_with("RETENTION_DAYS="), "{err}");
        }
        Ok(())
    }
}
