//! The webhook workers: every instance runs one, which claims due deliveries (any instance's),
//! POSTs them, and writes down what came of each attempt.
//!
//! - Woken right after the relay commits new deliveries (and by a redelivery), and polling
//!   `WEBHOOK_POLL_MS` as a fallback, or sooner when the next retry is due sooner.
//! - At most `WEBHOOK_CONCURRENCY` attempts at once per instance; each has its own `tracing`
//!   span (`webhook_attempt`: delivery, endpoint, attempt, event id). A busy worker claims a
//!   quarter of its places or more per statement, and writes the outcomes that finished
//!   meanwhile in one transaction, so the database's cost per delivery stays small at volume.
//! - Only a 2xx answer counts. Redirects are not followed (a 3xx is a failure), proxies from
//!   the environment are not used, and every address connected to passes the SSRF rule
//!   (a resolver that drops refused addresses, and a check of URLs naming an address).
//! - A claim is a lease of [`LEASE`] in the database. Stopping, the worker waits
//!   [`SHUTDOWN_GRACE`] for attempts under way, then gives the rest back (due at once, for the
//!   next instance or start); a crash leaves them to be taken again when the lease ends. So
//!   a partner may get an event twice (same `webhook-id`), never zero times.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use rand::Rng;
use reqwest::{
    dns::{Addrs, Name, Resolve, Resolving},
    header::{CONTENT_TYPE, LOCATION},
    Client, Url,
};
use tokio::{
    sync::{watch, Notify},
    task::{JoinHandle, JoinSet},
};
use tracing::Instrument;

use super::{
    address::{Scheme, UrlPolicy},
    signing, signing_keys, Settings,
};
use crate::{
    db::{
        micros,
        webhooks::{self as store, Attempt, Claimed, Next},
        Db,
    },
    events::Handoff,
    telemetry::{traces::TraceParent, Tracing},
};

/// How long a claim keeps a delivery from other workers: well beyond the longest attempt.
pub const LEASE: Duration = Duration::from_secs(120);
/// How long a stopping worker waits for the attempts under way.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// The `User-Agent` of every attempt.
pub const USER_AGENT: &str = concat!("clinic-booking-webhooks/", env!("CARGO_PKG_VERSION"));
/// Longest error text kept per attempt.
const MAX_ERROR_LEN: usize = 500;
/// Shortest wait between two looks at the queue (overdue rows another worker is claiming).
const MIN_WAIT: Duration = Duration::from_millis(50);
/// How often an idle turn counts the queue for `webhook_queue_depth` (a count reads the whole
/// due index: several a second, 5 ms each, took 5 % of a core under load).
const GAUGES_EVERY: Duration = Duration::from_secs(5);
/// Tries at writing a batch of outcomes down before leaving it to the leases.
const RECORD_TRIES: u32 = 4;
/// Batches of outcomes being written at once.
const RECORDERS: usize = 3;

/// The worker task of an instance. It stops when [`WebhookTasks::shutdown`] runs or this value
/// is dropped.
pub struct WebhookTasks {
    stop: watch::Sender<bool>,
    handle: Option<JoinHandle<()>>,
}

impl WebhookTasks {
    /// Stops the worker: attempts under way get [`SHUTDOWN_GRACE`], the rest are given back.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(mut handle) = self.handle.take() {
            // The grace, then giving claims back: a few statements.
            if tokio::time::timeout(SHUTDOWN_GRACE + Duration::from_secs(5), &mut handle).await.is_err() {
                tracing::warn!("the webhook worker did not stop in time; aborting it");
                handle.abort();
            }
        }
    }
}

impl Drop for WebhookTasks {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}

/// Starts the worker of an instance on `db`, connecting where `policy` permits, rung by `wake`
/// and fed by `handoff`; each attempt is a span of the trace of the change that called for it
/// (`tracing`, the instance's).
pub fn start(
    db: Db,
    settings: Settings,
    policy: Arc<UrlPolicy>,
    wake: Arc<Notify>,
    handoff: Arc<Handoff<(Claimed, i64)>>,
    tracing: Tracing,
) -> Result<WebhookTasks, String> {
    let https = client(&settings, &policy, Scheme::Https)?;
    let http = client(&settings, &policy, Scheme::Http)?;
    let (stop, stopping) = watch::channel(false);
    let worker = Worker {
        shared: Arc::new(Shared { db, https, http, settings, policy, leases: Mutex::default(), tracing }),
        wake,
        handoff,
        stopping,
        gauges_at: None,
    };
    Ok(WebhookTasks { stop, handle: Some(tokio::spawn(worker.run())) })
}

/// An HTTP client for URLs of one scheme, connecting only where the rule permits.
fn client(settings: &Settings, policy: &Arc<UrlPolicy>, scheme: Scheme) -> Result<Client, String> {
    let resolver = GuardedResolver { policy: Arc::clone(policy), scheme };
    Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(settings.timeout)
        .connect_timeout(settings.timeout.min(Duration::from_secs(10)))
        .user_agent(USER_AGENT)
        .dns_resolver(Arc::new(resolver))
        .pool_idle_timeout(Duration::from_secs(30))
        // One kept connection per place: a partner's busy endpoint is not reconnected to (and,
        // over TLS, not handshaken with again) for every attempt beyond the kept ones.
        .pool_max_idle_per_host(settings.concurrency.max(1))
        .build()
        .map_err(|e| format!("webhook HTTP client: {e}"))
}

/// Resolves names and keeps only the addresses the SSRF rule permits for its scheme.
#[derive(Clone)]
struct GuardedResolver {
    policy: Arc<UrlPolicy>,
    scheme: Scheme,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let this = self.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs = this.policy.resolve_permitted(&host, this.scheme).await?;
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// What the worker and its attempts share.
struct Shared {
    db: Db,
    https: Client,
    http: Client,
    settings: Settings,
    /// The SSRF rule.
    policy: Arc<UrlPolicy>,
    /// Claims of attempts under way (delivery → token), given back if the worker stops first.
    leases: Mutex<HashMap<i64, i64>>,
    /// The instance's traces.
    tracing: Tracing,
}

struct Worker {
    shared: Arc<Shared>,
    wake: Arc<Notify>,
    /// What the relay recorded leased to this worker.
    handoff: Arc<Handoff<(Claimed, i64)>>,
    stopping: watch::Receiver<bool>,
    /// When the depth gauge was last counted.
    gauges_at: Option<Instant>,
}

impl Worker {
    async fn run(mut self) {
        let concurrency = self.shared.settings.concurrency.max(1);
        let poll = self.shared.settings.poll_interval;
        let mut in_flight: JoinSet<Option<Attempt>> = JoinSet::new();
        let mut recording: JoinSet<()> = JoinSet::new();
        let mut done: Vec<Attempt> = Vec::new();
        // When to look at the database next: at once when the bell rang (deliveries the relay
        // could not hand over, a redelivery), else when the next retry is due or at the poll.
        // What is handed over needs no look.
        let mut claim_at = Instant::now();
        loop {
            while let Some(finished) = in_flight.try_join_next() {
                done.extend(outcome_of(finished));
            }
            while recording.try_join_next().is_some() {}
            // The outcomes that came in since the last batch left, written in a transaction of
            // their own while claims and attempts go on. A few batches at once: on a machine
            // saturated by bookings each transaction gets one backend's share of the CPU, and
            // one at a time fell behind.
            if !done.is_empty() && recording.len() < RECORDERS {
                let shared = Arc::clone(&self.shared);
                let batch = std::mem::take(&mut done);
                // A retry it sets may be due before the next look at the database.
                if let Some(at) = batch.iter().filter_map(|a| a.next.retry_at()).min() {
                    claim_at = claim_at.min(Instant::now() + (at - Utc::now()).to_std().unwrap_or(Duration::ZERO));
                }
                recording.spawn(async move { shared.record(batch).await });
            }
            let fresh = Utc::now() + chrono::Duration::from_std(LEASE / 2).unwrap_or_default();
            let handed = self.handoff.take(concurrency.saturating_sub(in_flight.len()), |(c, _)| {
                c.delivery.next_attempt_at.is_some_and(|lease| lease > fresh)
            });
            self.spawn_attempts(&mut in_flight, handed);
            let room = concurrency.saturating_sub(in_flight.len());
            // Claims wait for a quarter of the places to be free (or all, when idle), so a
            // busy worker claims several deliveries per statement, not one per finished attempt.
            if Instant::now() >= claim_at && room > 0 && (in_flight.is_empty() || room * 4 >= concurrency) {
                match self.claim(room).await {
                    Ok(batch) => {
                        let short = batch.len() < room;
                        self.spawn_attempts(&mut in_flight, batch);
                        if short {
                            claim_at = Instant::now() + self.until_next_due(poll).await;
                        }
                    }
                    Err(error) => {
                        tracing::warn!(%error, "claiming webhook deliveries failed; retrying");
                        claim_at = Instant::now() + poll;
                    }
                }
            }
            let full = in_flight.len() >= concurrency;
            // Waiting for a place when a claim is due: an attempt finishing is what wakes.
            let timer = !full && claim_at > Instant::now();
            tokio::select! {
                () = stopped(&mut self.stopping) => break,
                () = self.wake.notified() => claim_at = Instant::now(),
                () = self.handoff.ready() => {}
                Some(finished) = in_flight.join_next(), if !in_flight.is_empty() => done.extend(outcome_of(finished)),
                // A batch written: a place for the next one.
                Some(_) = recording.join_next(), if !recording.is_empty() => {}
                () = tokio::time::sleep_until(claim_at.into()), if timer => {}
            }
        }
        while recording.join_next().await.is_some() {}
        // Handed over and not started: given back at once, for the next instance or start.
        let unstarted: Vec<(i64, i64)> =
            self.handoff.close().into_iter().map(|(c, token)| (c.delivery.id, token)).collect();
        self.shared.give_back(unstarted).await;
        self.stop(in_flight, done).await;
    }

    /// Starts an attempt of each delivery, keeping its lease to give back if the worker stops.
    fn spawn_attempts(&self, in_flight: &mut JoinSet<Option<Attempt>>, batch: Vec<(Claimed, i64)>) {
        if batch.is_empty() {
            return;
        }
        let mut leases = self.shared.leases.lock().unwrap_or_else(PoisonError::into_inner);
        for (claimed, token) in batch {
            leases.insert(claimed.delivery.id, token);
            let shared = Arc::clone(&self.shared);
            in_flight.spawn(async move { shared.attempt(claimed, token).await });
        }
    }

    /// Claims up to `room` due deliveries under a fresh token.
    async fn claim(&self, room: usize) -> Result<Vec<(Claimed, i64)>, crate::db::StoreError> {
        let now = micros(Utc::now());
        let token: i64 = rand::thread_rng().gen_range(1..i64::MAX);
        let lease_until = now + chrono::Duration::from_std(LEASE).unwrap_or_else(|_| chrono::Duration::minutes(2));
        let batch = store::claim_due(&self.shared.db, now, lease_until, token, room as u64).await?;
        Ok(batch.into_iter().map(|c| (c, token)).collect())
    }

    /// Sets the queue gauges (the depth every [`GAUGES_EVERY`]); returns how long to wait for
    /// the next due delivery (at most `poll`).
    async fn until_next_due(&mut self, poll: Duration) -> Duration {
        if self.gauges_at.is_none_or(|t| t.elapsed() >= GAUGES_EVERY) {
            match store::pending_count(self.shared.db.conn()).await {
                Ok(pending) => metrics::gauge!("webhook_queue_depth").set(pending as f64),
                Err(error) => tracing::debug!(%error, "cannot count the webhook queue"),
            }
            self.gauges_at = Some(Instant::now());
        }
        match store::next_due(self.shared.db.conn()).await {
            Ok(next_due) => {
                let now = Utc::now();
                let overdue = next_due.map_or(0.0, |due| (now - due).num_milliseconds().max(0) as f64 / 1000.0);
                metrics::gauge!("webhook_queue_oldest_due_seconds").set(overdue);
                next_due.map_or(poll, |due| (due - now).to_std().unwrap_or(Duration::ZERO).clamp(MIN_WAIT, poll))
            }
            Err(error) => {
                tracing::warn!(%error, "reading the webhook queue failed");
                poll
            }
        }
    }

    /// Waits the grace for attempts under way and writes down their outcomes, then stops the
    /// rest and gives their claims back.
    async fn stop(&self, mut in_flight: JoinSet<Option<Attempt>>, mut done: Vec<Attempt>) {
        let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
            while let Some(finished) = in_flight.join_next().await {
                done.extend(outcome_of(finished));
            }
        })
        .await;
        in_flight.abort_all();
        while let Some(finished) = in_flight.join_next().await {
            done.extend(outcome_of(finished));
        }
        self.shared.record(done).await;
        if drained.is_ok() {
            return;
        }
        let leases: Vec<(i64, i64)> =
            self.shared.leases.lock().unwrap_or_else(PoisonError::into_inner).drain().collect();
        for (delivery, _) in &leases {
            // It may have reached the partner: it goes again, with the same webhook-id.
            tracing::info!(delivery, "webhook attempt interrupted by shutdown; it will be sent again");
        }
        self.shared.give_back(leases).await;
    }
}

/// The outcome a finished attempt task left to write down (none when it panicked, was
/// stopped, or had nothing to write).
fn outcome_of(finished: Result<Option<Attempt>, tokio::task::JoinError>) -> Option<Attempt> {
    match finished {
        Ok(outcome) => outcome,
        Err(e) => {
            if e.is_panic() {
                tracing::error!("a webhook attempt panicked");
            }
            None
        }
    }
}

/// Resolves once `stop` says true or its sender is gone.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await.map(drop);
}

/// How an attempt ended.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    /// An HTTP answer with this status (and the `Location` of a redirect).
    Status(u16, Option<String>),
    /// No answer: why.
    Error(String),
}

impl Shared {
    /// Gives claims back (delivery, token): due at once, for the next instance or start.
    async fn give_back(&self, claims: Vec<(i64, i64)>) {
        let now = micros(Utc::now());
        for (delivery, token) in claims {
            if let Err(error) = store::release(&self.db, delivery, token, now).await {
                tracing::warn!(delivery, %error, "cannot give a webhook delivery back; it is due when its lease ends");
            }
        }
    }

    /// Writes the outcomes of finished attempts down, retrying briefly: an attempt that reached
    /// the partner but is not written down is sent again when its lease ends.
    async fn record(&self, done: Vec<Attempt>) {
        if done.is_empty() {
            return;
        }
        let mut delay = Duration::from_millis(100);
        for round in 1..=RECORD_TRIES {
            match store::record_attempts(&self.db, &done).await {
                Ok(owned) => {
                    let taken = owned.iter().filter(|o| !**o).count();
                    if taken > 0 {
                        tracing::debug!(
                            taken,
                            "deliveries redelivered or taken meanwhile; only their attempts are logged"
                        );
                    }
                    break;
                }
                Err(error) if round < RECORD_TRIES => {
                    tracing::warn!(%error, "cannot write webhook attempts down; retrying");
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                }
                Err(error) => tracing::warn!(
                    %error,
                    attempts = done.len(),
                    "cannot write webhook attempts down; they are sent again when their leases end"
                ),
            }
        }
        let mut leases = self.leases.lock().unwrap_or_else(PoisonError::into_inner);
        for a in &done {
            leases.remove(&a.delivery_id);
        }
    }

    /// One attempt of a claimed delivery, in its own span; returns the outcome to write down.
    async fn attempt(self: Arc<Self>, claimed: Claimed, token: i64) -> Option<Attempt> {
        let d = &claimed.delivery;
        let number = d.attempts.saturating_add(1);
        let span = tracing::info_span!(
            "webhook_attempt",
            delivery_id = d.id,
            endpoint_id = claimed.endpoint.id,
            attempt = number,
            event_id = %d.event_id,
            otel.name = "webhook POST",
            otel.kind = "client",
            http.request.method = "POST",
            http.response.status_code = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        // A span of the trace of the change that called for the delivery.
        let parent = d.trace_context.as_deref().and_then(TraceParent::parse);
        self.tracing.adopt(&span, parent.map(TraceParent::span_context));
        async {
            if !claimed.endpoint.enabled {
                // Recorded while a 410 was disabling the endpoint: fail it, send nothing.
                if let Err(error) = store::abandon(&self.db, d.id, token, "the endpoint is disabled").await {
                    tracing::warn!(%error, "cannot fail a delivery of a disabled endpoint");
                }
                metrics::counter!("webhook_deliveries_total", "outcome" => "failed").increment(1);
                self.leases.lock().unwrap_or_else(PoisonError::into_inner).remove(&d.id);
                return None;
            }
            let started_at = micros(Utc::now());
            let clock = Instant::now();
            let answer = self.send(&claimed, started_at).await;
            let elapsed = clock.elapsed();
            let current = tracing::Span::current();
            match &answer {
                Answer::Status(code, _) => {
                    current.record("http.response.status_code", code);
                    if *code >= 500 {
                        current.record("otel.status_code", "ERROR");
                    }
                }
                Answer::Error(_) => {
                    current.record("otel.status_code", "ERROR");
                }
            }
            metrics::histogram!("webhook_attempt_seconds").record(elapsed.as_secs_f64());
            // The schedule's waits run from the attempt's end: a timed-out attempt still waits.
            let next = next_state(&self.settings.retry_schedule, &answer, number, d.max_attempts, micros(Utc::now()));
            let (status_code, error) = match &answer {
                Answer::Status(code, location) => (Some(i32::from(*code)), redirect_note(*code, location.as_deref())),
                Answer::Error(why) => (None, Some(why.clone())),
            };
            let outcome = match next {
                Next::Succeeded => "succeeded",
                Next::Retry(_) => "retried",
                Next::Failed => "failed",
                Next::Disable => "disabled",
            };
            match &answer {
                Answer::Status(code, _) => tracing::info!(status = code, outcome, "webhook attempt"),
                Answer::Error(why) => tracing::info!(error = %why, outcome, "webhook attempt"),
            }
            if next == Next::Disable {
                tracing::warn!(endpoint = claimed.endpoint.id, "endpoint answered 410 Gone: disabled");
            }
            metrics::counter!("webhook_deliveries_total", "outcome" => outcome).increment(1);
            Some(Attempt {
                delivery_id: d.id,
                endpoint_id: claimed.endpoint.id,
                token,
                number,
                started_at,
                duration_ms: i32::try_from(elapsed.as_millis()).unwrap_or(i32::MAX),
                status_code,
                error,
                next,
            })
        }
        .instrument(span)
        .await
    }

    /// POSTs the delivery's body, signed at `at`.
    async fn send(&self, claimed: &Claimed, at: DateTime<Utc>) -> Answer {
        let (d, endpoint) = (&claimed.delivery, &claimed.endpoint);
        let url = match Url::parse(&endpoint.url) {
            Ok(url) => url,
            Err(e) => return Answer::Error(format!("stored URL unusable: {e}")),
        };
        let (scheme, client) = match url.scheme() {
            "https" => (Scheme::Https, &self.https),
            "http" => (Scheme::Http, &self.http),
            other => return Answer::Error(format!("scheme {other} is not sent to")),
        };
        // A URL naming an address connects without the resolver: check it here.
        if let Err(why) = self.policy.literal(&url, scheme) {
            return Answer::Error(format!("refused address: {why}"));
        }
        let keys = match signing_keys(endpoint, at) {
            Ok(keys) => keys,
            Err(why) => return Answer::Error(why),
        };
        let timestamp = at.timestamp();
        let signature = signing::signature_header(&keys, &d.event_id, timestamp, d.payload.as_bytes());
        let request = client
            .post(url)
            .header(CONTENT_TYPE, "application/json")
            .header("webhook-id", d.event_id.as_str())
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(d.payload.clone());
        // The partner can follow the booking's trace into its own service (W3C Trace Context).
        let request = match TraceParent::of_span(&tracing::Span::current()) {
            Some(parent) => request.header("traceparent", parent.to_string()),
            None => request,
        };
        match request.send().await {
            Ok(response) => {
                let location = response.headers().get(LOCATION).and_then(|v| v.to_str().ok()).map(str::to_owned);
                // The body is not read: only the status counts.
                Answer::Status(response.status().as_u16(), location)
            }
            Err(e) => Answer::Error(describe(&e, self.settings.timeout)),
        }
    }
}

/// What follows an attempt: success on 2xx, disabling on 410, else a retry while the schedule
/// has waits left (attempt `number` of `max_attempts`), then `FAILED`.
fn next_state(schedule: &[Duration], answer: &Answer, number: i32, max_attempts: i32, at: DateTime<Utc>) -> Next {
    match answer {
        Answer::Status(200..=299, _) => return Next::Succeeded,
        Answer::Status(410, _) => return Next::Disable,
        _ => {}
    }
    if number >= max_attempts {
        return Next::Failed;
    }
    // The wait before attempt n + 1 is the schedule's n-th; past its end (a redelivery allowed
    // more), the last one.
    let index = usize::try_from(number.saturating_sub(1)).unwrap_or(0);
    match schedule.get(index).or(schedule.last()).and_then(|w| chrono::Duration::from_std(*w).ok()) {
        Some(wait) => Next::Retry(at + wait),
        None => Next::Failed,
    }
}

/// The error noted for a redirect (not followed).
fn redirect_note(code: u16, location: Option<&str>) -> Option<String> {
    (300..400).contains(&code).then(|| match location {
        Some(to) => format!("redirect to {} not followed", truncate(to, 200)),
        None => "redirect not followed".to_owned(),
    })
}

/// A reqwest error with its causes, short.
fn describe(error: &reqwest::Error, timeout: Duration) -> String {
    if error.is_timeout() {
        return format!("no answer within {} ms", timeout.as_millis());
    }
    let mut parts = vec![error.to_string()];
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = cause.source();
    }
    truncate(&parts.join(": "), MAX_ERROR_LEN)
}

fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(secs: &[u64]) -> Vec<Duration> {
        secs.iter().map(|s| Duration::from_secs(*s)).collect()
    }

    #[test]
    fn the_schedule_then_failed() {
        let s = schedule(&[5, 300]);
        let at = Utc::now();
        let fail = Answer::Status(500, None);
        let secs = chrono::Duration::seconds;
        assert_eq!(next_state(&s, &fail, 1, 3, at), Next::Retry(at + secs(5)));
        assert_eq!(next_state(&s, &fail, 2, 3, at), Next::Retry(at + secs(300)));
        assert_eq!(next_state(&s, &fail, 3, 3, at), Next::Failed);
        // A redelivery allows one attempt beyond those made.
        assert_eq!(next_state(&s, &fail, 4, 4, at), Next::Failed);
        assert_eq!(next_state(&s, &fail, 4, 6, at), Next::Retry(at + secs(300)));
        assert_eq!(next_state(&s, &Answer::Error("refused".into()), 1, 3, at), Next::Retry(at + secs(5)));
        assert_eq!(next_state(&[], &fail, 1, 3, at), Next::Failed);
    }

    #[test]
    fn only_2xx_counts_and_410_disables() {
        let s = schedule(&[5]);
        let at = Utc::now();
        for code in [200, 201, 204, 299] {
            assert_eq!(next_state(&s, &Answer::Status(code, None), 2, 2, at), Next::Succeeded);
        }
        for code in [100, 301, 302, 304, 307, 400, 401, 404, 429, 500, 503] {
            assert!(matches!(next_state(&s, &Answer::Status(code, None), 1, 2, at), Next::Retry(_)), "{code}");
        }
        assert_eq!(next_state(&s, &Answer::Status(410, None), 1, 2, at), Next::Disable);
        assert_eq!(
            redirect_note(302, Some("https://elsewhere/")).as_deref(),
            Some("redirect to https://elsewhere/ not followed")
        );
        assert_eq!(redirect_note(500, None), None);
    }

    #[test]
    fn long_errors_are_cut_at_a_character() {
        assert_eq!(truncate("ééé", 2), "éé…");
        assert_eq!(truncate("ab", 2), "ab");
    }
}
