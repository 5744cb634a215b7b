//! Recording deliveries: the relay's [`FollowUp`] for partner webhooks.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
};

use chrono::Utc;
use hmac::{Hmac, KeyInit, Mac};
use sea_orm::DatabaseTransaction;
use sha2::Sha256;
use tokio::sync::Notify;

use rand::Rng;

use super::{
    event::{self, EventType},
    sender::LEASE,
};
use crate::{
    db::{
        appointments::{self, AppointmentRecord, Filter},
        entity::webhook_endpoint,
        micros,
        webhooks::{self as store, Claimed},
        StoreError,
    },
    events::{FollowUp, Handoff, Notification},
};

/// Event ids (`webhook-id`): `msg_` and 32 hex digits, derived from the outbox row by a keyed
/// hash. A row recorded again (its pass lost in a database crash after the commit was
/// acknowledged, say) gets the same id, so a receiver drops the repeat; and the ids say
/// nothing about how many events there were.
#[derive(Clone)]
pub struct EventIds(Hmac<Sha256>);

impl EventIds {
    /// Ids keyed by `key` (the service uses its token signing secret).
    pub fn new(key: &[u8]) -> Result<Self, String> {
        Hmac::<Sha256>::new_from_slice(key).map(Self).map_err(|e| format!("event id key: {e}"))
    }

    /// The id of the event of outbox row `outbox_id`.
    pub fn of(&self, outbox_id: i64) -> String {
        let mut mac = self.0.clone();
        mac.update(b"clinic-booking webhook event v1:");
        mac.update(outbox_id.to_string().as_bytes());
        let digest = mac.finalize().into_bytes();
        format!("msg_{}", hex::encode(&digest[..16]))
    }
}

/// Records one delivery per subscribed, enabled endpoint for each committed appointment event:
/// leased to this instance's worker and handed over while it has room (see [`Handoff`]), due
/// for any worker's claim otherwise.
pub struct WebhookRecorder {
    ids: EventIds,
    max_attempts: i32,
    /// Rung after a pass that recorded deliveries it could not hand over has committed.
    wake: Arc<Notify>,
    recorded: AtomicBool,
    /// Deliveries recorded leased to the worker (with the lease's token), on their way to it.
    handoff: Arc<Handoff<(Claimed, i64)>>,
}

impl WebhookRecorder {
    /// A recorder giving new deliveries `max_attempts`, handing what it leases to the worker
    /// through `handoff`, and ringing `wake` after each commit that recorded others.
    pub fn new(ids: EventIds, max_attempts: i32, wake: Arc<Notify>, handoff: Arc<Handoff<(Claimed, i64)>>) -> Self {
        Self { ids, max_attempts, wake, recorded: AtomicBool::new(false), handoff }
    }
}

/// Whether `endpoint` gets events about `record`: an admin's every one, a partner's those of
/// the appointments it created (or that were moved from one it created).
fn subscribed(endpoint: &webhook_endpoint::Model, record: &AppointmentRecord, kind: EventType) -> bool {
    let a = &record.appointment;
    let concerns = endpoint.owner_role == "admin"
        || a.booked_by == endpoint.owner
        || a.first_booked_by.as_deref() == Some(endpoint.owner.as_str());
    concerns && event::filter_accepts(endpoint.events.as_deref(), kind)
}

#[async_trait::async_trait]
impl FollowUp for WebhookRecorder {
    async fn record(&self, tx: &DatabaseTransaction, events: &[Notification]) -> Result<(), StoreError> {
        // Whatever a pass that rolled back staged is never handed over.
        self.handoff.stage(Vec::new());
        self.recorded.store(false, Ordering::Release);
        // The endpoints first: with none, a pass costs one small query.
        let endpoints = store::enabled_endpoints(tx).await?;
        if endpoints.is_empty() {
            return Ok(());
        }
        let mut ids: Vec<i64> = events.iter().map(|n| n.appointment_id).collect();
        ids.sort_unstable();
        ids.dedup();
        let limit = ids.len() as u64;
        let records: HashMap<i64, AppointmentRecord> =
            appointments::list(tx, Filter::Ids(ids), limit).await?.into_iter().map(|r| (r.appointment.id, r)).collect();
        let now = micros(Utc::now());
        let mut rows = Vec::new();
        for n in events {
            let Some(now_record) = records.get(&n.appointment_id) else {
                tracing::error!(appointment = n.appointment_id, outbox = n.outbox_id, "event of a missing appointment");
                continue;
            };
            // What the event did, not what happened since.
            let as_left = n.state.map(|state| AppointmentRecord {
                appointment: now_record.appointment.as_left(&state),
                doctor_id: now_record.doctor_id,
            });
            let record = as_left.as_ref().unwrap_or(now_record);
            let kind = EventType::of(n.event);
            // One body and one id per event, whichever endpoints it goes to.
            let mut made: Option<(String, String)> = None;
            for endpoint in endpoints.iter().filter(|e| subscribed(e, record, kind)) {
                let (event_id, payload) = made
                    .get_or_insert_with(|| (self.ids.of(n.outbox_id), event::body(kind, record, n.committed_at)))
                    .clone();
                rows.push(store::NewDelivery {
                    endpoint_id: endpoint.id,
                    outbox_id: n.outbox_id,
                    appointment_id: n.appointment_id,
                    event_id,
                    event_type: kind.wire(),
                    payload,
                    max_attempts: self.max_attempts,
                    created_at: now,
                    trace_context: n.trace.map(|t| t.to_string()),
                });
            }
        }
        if rows.is_empty() {
            return Ok(());
        }
        let queued = rows.split_off(self.handoff.room().min(rows.len()));
        let mut inserted = 0;
        if !queued.is_empty() {
            inserted += store::insert_deliveries(tx, queued).await?;
            self.recorded.store(true, Ordering::Release);
        }
        if !rows.is_empty() {
            let token: i64 = rand::thread_rng().gen_range(1..i64::MAX);
            let lease_until = now + chrono::Duration::from_std(LEASE).unwrap_or_else(|_| chrono::Duration::minutes(2));
            let leased = store::insert_leased(tx, &rows, lease_until, token).await?;
            inserted += leased.len() as u64;
            let handed = leased
                .into_iter()
                .filter_map(|delivery| {
                    let endpoint = endpoints.iter().find(|e| e.id == delivery.endpoint_id)?.clone();
                    Some((Claimed { delivery, endpoint }, token))
                })
                .collect();
            self.handoff.stage(handed);
        }
        metrics::counter!("webhook_deliveries_recorded_total").increment(inserted);
        Ok(())
    }

    fn committed(&self) {
        // The handed-over deliveries ring the worker through the hand-off; the bell sends it
        // to the database, where the others wait.
        self.handoff.commit();
        if self.recorded.swap(false, Ordering::AcqRel) {
            self.wake.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::db::entity::appointment;

    fn endpoint(owner: &str, role: &str, events: Option<&str>) -> webhook_endpoint::Model {
        let t = Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap();
        webhook_endpoint::Model {
            id: 1,
            owner: owner.into(),
            owner_role: role.into(),
            url: "https://example.com/".into(),
            events: events.map(str::to_owned),
            secret: "whsec_AAAA".into(),
            previous_secret: None,
            previous_secret_until: None,
            enabled: true,
            disabled_at: None,
            created_at: t,
        }
    }

    fn record(booked_by: &str, first_booked_by: Option<&str>) -> AppointmentRecord {
        let t = Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap();
        AppointmentRecord {
            appointment: appointment::Model {
                id: 1,
                slot_id: 1,
                patient_id: 7,
                status: "BOOKED".into(),
                booked_by: booked_by.into(),
                idempotency_key: "k".into(),
                request_hash: "h".into(),
                created_at: t,
                cancelled_at: None,
                start_at: t,
                end_at: t + chrono::Duration::minutes(15),
                slot_count: 1,
                expires_at: None,
                cancelled_by: None,
                rescheduled_from: None,
                rescheduled_to: None,
                first_booked_by: first_booked_by.map(str::to_owned),
                arrived_at: None,
                completed_at: None,
            },
            doctor_id: 1,
        }
    }

    #[test]
    fn who_gets_what() {
        let a = endpoint("partner:a", "partner", None);
        let admin = endpoint("admin:root", "admin", None);
        let only_cancels = endpoint("partner:a", "partner", Some("appointment.cancelled"));
        let by_a = record("partner:a", None);
        let by_b = record("partner:b", None);
        let moved_by_b = record("partner:b", Some("partner:a"));
        let by_patient = record("patient:7", None);
        assert!(subscribed(&a, &by_a, EventType::Booked));
        assert!(!subscribed(&a, &by_b, EventType::Booked));
        assert!(subscribed(&a, &moved_by_b, EventType::Rescheduled));
        assert!(!subscribed(&a, &by_patient, EventType::Booked));
        for r in [&by_a, &by_b, &by_patient] {
            assert!(subscribed(&admin, r, EventType::Booked));
        }
        assert!(!subscribed(&only_cancels, &by_a, EventType::Booked));
        assert!(subscribed(&only_cancels, &by_a, EventType::Cancelled));
    }

    #[test]
    fn event_ids_are_stable_distinct_and_keyed() {
        let ids = EventIds::new(b"secret one").unwrap();
        assert_eq!(ids.of(1), ids.of(1));
        assert_ne!(ids.of(1), ids.of(2));
        assert_ne!(ids.of(1), EventIds::new(b"secret two").unwrap().of(1));
        let id = ids.of(42);
        assert!(id.starts_with("msg_") && id.len() == 36 && id[4..].bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
    }
}
