//! Holds that ran out give their seats back: a job in every instance turns due `HELD`
//! appointments `EXPIRED` by a conditional transition, batch by batch, and releases the seats
//! of exactly the rows its transition changed, in the same transaction.
//!
//! On PostgreSQL each batch locks its holds `FOR UPDATE SKIP LOCKED`, so instances expiring at
//! once take disjoint batches and none waits on a confirm or a cancel in flight; the
//! transition itself requires `HELD`, so a hold that a confirm won is left alone, and one that
//! the expiry won can no longer be confirmed (`HOLD_EXPIRED`).

use std::time::Duration;

use chrono::Utc;
use tokio::{sync::watch, task::JoinHandle};

use super::{changes::Changes, retrying, BookingService};
use crate::{
    db::{appointments, micros, StoreError},
    error::ServiceError,
    model::AppointmentEvent,
};

/// Holds expired by one transaction.
const EXPIRY_BATCH: u64 = 1000;
/// Batches one instance expires at once where claims skip locked rows (which keeps them
/// disjoint): one at a time released 100,000 holds due in the same second in 12 s on two cores,
/// the database and the service each waiting for the other half the time. Elsewhere (one
/// writer) one batch at a time.
const EXPIRY_LANES: usize = 2;

impl BookingService {
    /// Expires every hold due now, batch by batch; returns how many this call expired.
    pub async fn expire_due_holds(&self) -> Result<usize, ServiceError> {
        let mut total = 0;
        loop {
            let batch = retrying(|| async {
                let now = micros(Utc::now());
                let tx = self.db.begin_write().await?;
                let expired = appointments::mark_expired(&tx, now, EXPIRY_BATCH).await?;
                if expired.is_empty() {
                    tx.rollback().await?;
                    return Ok::<_, StoreError>(None);
                }
                let mut changes = Changes::default();
                changes.release(&tx, &expired, Some(AppointmentEvent::Expired)).await?;
                let gone: Vec<i64> = expired.iter().map(|a| a.id).collect();
                self.offer_freed(&tx, &mut changes, &gone, now).await?;
                changes.record(&tx, now).await?;
                tx.commit().await?;
                Ok(Some((expired.len(), changes)))
            })
            .await?;
            let Some((n, changes)) = batch else { break };
            total += n;
            metrics::counter!("holds_expired_total").increment(n as u64);
            self.committed(&changes).await;
            if (n as u64) < EXPIRY_BATCH {
                break;
            }
        }
        Ok(total)
    }
}

/// The expiry job of an instance.
pub struct ExpiryJob;

impl ExpiryJob {
    /// Runs [`BookingService::expire_due_holds`] every `interval` until `stop` says true, in
    /// [`EXPIRY_LANES`] at once where claims skip locked rows ([`crate::db::Db::skips_locked_rows`]).
    pub fn start(service: BookingService, interval: Duration, mut stop: watch::Receiver<bool>) -> JoinHandle<()> {
        let lanes = if service.db.skips_locked_rows() { EXPIRY_LANES } else { 1 };
        tokio::spawn(async move {
            loop {
                // Bounded like any operation: a round stuck on a lost server ends, and the
                // holds stay due for the next one.
                let rounds = (0..lanes).map(|_| service.db.bounded(service.expire_due_holds()));
                for result in futures_util::future::join_all(rounds).await {
                    if let Err(error) = result {
                        // The holds stay due; the next round tries again.
                        tracing::warn!(%error, "expiring holds failed");
                    }
                }
                tokio::select! {
                    () = tokio::time::sleep(interval) => {}
                    () = async { let _ = stop.wait_for(|s| *s).await.map(drop); } => return,
                }
            }
        })
    }
}
