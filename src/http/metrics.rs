//! `/metrics` in Prometheus text format.
//!
//! What is there, by name: `graphql_requests_total{operation,outcome}` and
//! `graphql_request_seconds{operation}` (per request); `booking_attempts_total{operation=book|hold,
//! outcome}` (BOOKED, HELD, REPLAYED, each userError code, RATE_LIMITED, OVERLOADED, …);
//! `holds_expired_total`; `lane_wait_seconds{lane=main|booking}` (how late a task that asked to
//! run at an instant ran: the queueing of each runtime, see `guard::lane`); `db_transaction_retries_total` (deadlocks broken by the database and
//! retried inside); `db_statement_seconds`,
//! `db_statements_total`, `db_pool_connections`, `db_pool_in_use`; `booking_bulkhead_in_use`,
//! `booking_bulkhead_waiting` (attempts queued for the database: the pool's waiters come from
//! there), `booking_bulkhead_rejected_total`; `slot_cache_requests_total{result=hit|miss}`,
//! `known_full_rejects_total`, `answer_cache_hits_total`, `graphql_direct_total`,
//! `redis_errors_total{op}`; `waitlist_offers_total`; live availability: `subscriptions_open`,
//! `ws_connections_open`, `redis_subscriber_up`, `outbox_published_total`,
//! `outbox_relay_failures_total`; the FHIR feed: `fhir_feed_build_seconds`,
//! `fhir_feed_refresh_seconds`.
//!
//! Partner webhooks:
//! `webhook_deliveries_total{outcome=succeeded|retried|failed|disabled}` (one per attempt: it
//! was accepted, will be retried, was the last, or answered 410 and disabled its endpoint),
//! `webhook_deliveries_recorded_total`, `webhook_attempt_seconds` (up to the 15 s timeout),
//! and the gauges `webhook_queue_depth` (deliveries `PENDING`, of every instance) and
//! `webhook_queue_oldest_due_seconds` (how overdue the earliest of them is; 0 when none is).
//!
//! Messages to patients: `notify_messages_total{channel=email|sms,outcome=sent|retried|failed|skipped}`
//! (one per attempt's outcome: `retried` is a failed attempt that will be tried again),
//! `notify_attempt_seconds{channel}` (one attempt, rendering and sending),
//! `notify_message_lag_seconds{channel}` (from the commit of the change, or from a reminder's
//! due time, until the server or gateway took the message), and the gauges
//! `notify_queue_depth` (messages due and not taken) and `notify_queue_oldest_due_seconds`
//! (how long the oldest of them has waited), refreshed by each instance's worker every 5 s.
//!
//! Retention: `retention_removed_total{table=patient_message|webhook_delivery}` (rows removed
//! after `RETENTION_DAYS`; a delivery's attempts go with it, uncounted).
//!
//! Traces (with `OTEL_EXPORTER_OTLP_ENDPOINT`): `otel_spans_exported_total` (spans the
//! collector took), `otel_export_failures_total` (batches it did not take: down, slow past
//! `OTEL_EXPORTER_OTLP_TIMEOUT`, or refusing), `otel_spans_dropped_total` (spans that found the
//! export queue full, never sent).

use std::sync::OnceLock;

use axum::{extract::State, http::header, response::IntoResponse};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use super::Shared;

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process-wide metrics recorder once and returns its handle.
pub fn install_recorder() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let buckets = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];
            // A partner's server answers in seconds, not milliseconds (a full match wins).
            let webhook_buckets = [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0];
            // Messages take from milliseconds (a local server) to minutes (retries): the lag's
            // p99 goal of 2 s needs buckets around it, and a retried message's lag needs room.
            let message_buckets =
                [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0];
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &buckets)
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full("webhook_attempt_seconds".into()), &webhook_buckets)
                })
                .and_then(|b| b.set_buckets_for_metric(Matcher::Prefix("notify_".into()), &message_buckets))
                .unwrap_or_else(|_| PrometheusBuilder::new());
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            // Fails only when another recorder is installed (tests); metrics then stay empty.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}

/// Renders every metric, refreshing the pool gauges first.
pub(super) async fn render(State(state): Shared) -> impl IntoResponse {
    let (size, idle) = state.service.db().pool_state();
    metrics::gauge!("db_pool_connections").set(f64::from(size));
    metrics::gauge!("db_pool_in_use").set(f64::from(size) - idle as f64);
    metrics::counter!("db_statements_total").absolute(state.service.db().statements_executed());
    let bulkhead = &state.service.guard().bulkhead;
    metrics::gauge!("booking_bulkhead_in_use").set(bulkhead.in_use() as f64);
    metrics::gauge!("booking_bulkhead_waiting").set(bulkhead.waiting() as f64);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], install_recorder().render())
}
