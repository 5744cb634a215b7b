//! Building and running an instance: [`Application::build`] connects, migrates, wires the
//! layers and binds the port (0 in tests picks a free one); `run_until_stopped` serves.

use std::{future::Future, net::SocketAddr, sync::Arc, time::Duration};

use tokio::{net::TcpListener, sync::Notify};

use crate::{
    auth::{load_or_create_dev_secret, Authenticator, TokenIssuer},
    booking::{BookingService, ExpiryJob, HorizonJob},
    config::Config,
    db::{redact_url, DatabaseTarget, Db, StoreError},
    events::{FollowUp, Live, LiveSettings, LiveTasks},
    fhir::{feed::Feed, FhirState},
    graphql::{MoreServices, Pipeline, SubscriptionExecutor},
    guard::Guard,
    http::{install_recorder, AppState},
    model::Observers,
    notify::{NotifyTasks, Outlets},
    retention::RetentionJob,
    telemetry::Tracing,
    webhooks::{self, EventIds, UrlPolicy, WebhookRecorder, WebhookService, WebhookTasks},
};

/// Connections of the delivery workers' pool: the message worker's one, the webhook worker's
/// claims and its batches of outcomes (three at once), and its attempts' rare single writes.
const DELIVERY_CONNECTIONS: u32 = 6;
/// The `service_key` of webhook event ids.
const WEBHOOK_EVENT_KEY: &str = "webhook_event_ids";

/// Why an instance could not start: one line that names the setting, its value (without a
/// password) and the cause, said once (no chain of sources repeating it).
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// The database could not be reached or opened.
    #[error("cannot connect to DATABASE_URL ({target}): {reason}")]
    Database {
        /// The target, redacted.
        target: String,
        /// The cause.
        reason: String,
    },
    /// The database was reached but its migrations failed.
    #[error("cannot migrate DATABASE_URL ({target}): {reason}")]
    Migrate {
        /// The target, redacted.
        target: String,
        /// The cause.
        reason: String,
    },
    /// The listen address could not be bound.
    #[error("cannot listen on BIND_ADDR={addr}: {reason}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        reason: String,
    },
    /// The dev-mode signing secret could not be read or written.
    #[error("cannot keep the dev signing secret in DATA_DIR={dir} (or set JWT_SECRET): {reason}")]
    DevSecret {
        /// The data directory.
        dir: String,
        /// The cause.
        reason: String,
    },
    /// `JWT_SECRET` is not usable for signing.
    #[error("cannot sign with JWT_SECRET: {0}")]
    Tokens(#[from] crate::auth::TokenError),
    /// The booking lane's threads could not be started.
    #[error("cannot start the booking lane (BOOKING_LANE_THREADS={threads}): {reason}")]
    Lane {
        /// Its threads.
        threads: usize,
        /// The cause.
        reason: String,
    },
    /// The webhook sender could not be set up.
    #[error("webhooks: {0}")]
    Webhooks(String),
    /// The mail server or SMS gateway settings are unusable.
    #[error("{0}")]
    Notify(String),
    /// The trace exporter could not be set up.
    #[error("{0}")]
    Traces(String),
    /// The HTTP client of the providers' keys could not be made.
    #[error("cannot set up AUTH_ISSUERS' key fetches: {0}")]
    Issuers(String),
    /// `REDIS_URL` is not usable.
    #[error("cannot use REDIS_URL ({url}): {reason}")]
    Redis {
        /// The URL, redacted.
        url: String,
        /// The cause.
        reason: String,
    },
}

impl StartupError {
    /// The database at `target` could not be reached or opened.
    pub fn database(target: &DatabaseTarget, err: &StoreError) -> Self {
        Self::Database { target: target.redacted(), reason: store_reason(err) }
    }

    /// The database at `target` could not be migrated.
    pub fn migrate(target: &DatabaseTarget, err: &StoreError) -> Self {
        Self::Migrate { target: target.redacted(), reason: store_reason(err) }
    }

    /// The dev secret could not be kept in `dir`.
    pub fn dev_secret(dir: &std::path::Path, err: &std::io::Error) -> Self {
        Self::DevSecret { dir: dir.display().to_string(), reason: io_reason(err) }
    }
}

/// The cause of a store error, once: the database's own message when it sent one.
fn store_reason(err: &StoreError) -> String {
    use sea_orm::{DbErr, RuntimeErr};
    match err {
        StoreError::Connect(e) => sqlx_reason(e),
        StoreError::Db(DbErr::Conn(RuntimeErr::SqlxError(e)) | DbErr::Exec(RuntimeErr::SqlxError(e)))
        | StoreError::Db(DbErr::Query(RuntimeErr::SqlxError(e))) => sqlx_reason(e),
        StoreError::Db(DbErr::ConnectionAcquire(_)) => sqlx_reason(&sqlx::Error::PoolTimedOut),
        StoreError::Db(e) => e.to_string(),
        StoreError::Inconsistent(msg) => msg.clone(),
        StoreError::Busy(_) | StoreError::Unavailable(_) => err.to_string(),
        StoreError::Shared(inner) => store_reason(inner),
    }
}

fn sqlx_reason(err: &sqlx::Error) -> String {
    match err {
        sqlx::Error::Database(db) => db.message().to_owned(),
        sqlx::Error::Io(io) => io_reason(io),
        sqlx::Error::PoolTimedOut => "no connection within the time-out (is the server up and reachable?)".into(),
        other => other.to_string(),
    }
}

/// An I/O error as a lower-case phrase without the OS error number.
fn io_reason(err: &std::io::Error) -> String {
    let text = err.to_string();
    let text = text.split(" (os error").next().unwrap_or_default();
    let mut chars = text.chars();
    chars.next().map(|c| c.to_lowercase().chain(chars).collect()).unwrap_or_default()
}

/// A built instance, bound to its port, not yet serving.
pub struct Application {
    listener: TcpListener,
    addr: SocketAddr,
    state: AppState,
    /// The outbox relay and Redis subscriber: they stop with the server, or when this is dropped.
    live_tasks: LiveTasks,
    /// The webhook worker: it stops after them.
    webhook_tasks: WebhookTasks,
    /// The message worker: it stops after them.
    notify_tasks: NotifyTasks,
    /// The domain's own background jobs (hold expiry, retention).
    jobs: Jobs,
    /// Its traces: the exporter is flushed and stopped last.
    tracing: Tracing,
}

/// Background jobs that stop with the server: told by the watch, then awaited briefly.
struct Jobs {
    stop: tokio::sync::watch::Sender<bool>,
    handles: Vec<tokio::task::JoinHandle<()>>,
}

impl Jobs {
    async fn shutdown(mut self) {
        self.stop.send_replace(true);
        for handle in std::mem::take(&mut self.handles) {
            if tokio::time::timeout(Duration::from_secs(5), handle).await.is_err() {
                tracing::warn!("a background job did not stop in time");
            }
        }
    }
}

impl Drop for Jobs {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}

impl Application {
    /// Connects to the database, migrates it, builds the schema and binds the listener.
    pub async fn build(config: Config) -> Result<Self, StartupError> {
        install_recorder();
        // This instance's tracer provider (its root spans name it; see `telemetry::traces`).
        let traces = Tracing::start(&config.telemetry.traces).map_err(StartupError::Traces)?;
        let secret = match &config.auth.jwt_secret {
            Some(s) => Some(s.clone()),
            // With providers trusted, only their tokens are accepted.
            None if !config.auth.issuers.is_empty() => None,
            None => {
                let (secret, path, created) = load_or_create_dev_secret(&config.data_dir)
                    .map_err(|e| StartupError::dev_secret(&config.data_dir, &e))?;
                tracing::warn!(
                    path = %path.display(),
                    created,
                    "JWT_SECRET is not set: dev mode signs tokens with the secret kept in this file; \
                     mint one with `clinic-booking token --role admin --sub 1`"
                );
                Some(secret)
            }
        };
        // A booking statement per bulkhead place, and one for each batcher.
        let pool = config.db.pool(config.guard.booking_concurrency.saturating_add(2));
        let target = &config.db.target;
        let db = Db::connect(target, &pool)
            .await
            .map_err(|e| StartupError::database(target, &e))?
            .with_request_wait(config.guard.queue_timeout);
        db.migrate().await.map_err(|e| StartupError::migrate(target, &e))?;
        let redis = match config.redis.url.as_deref() {
            Some(url) => Some(
                redis::Client::open(url)
                    .map_err(|e| StartupError::Redis { url: redact_url(url), reason: e.to_string() })?,
            ),
            None => None,
        };
        let guard = Guard::new(&config.guard, redis.clone(), &config.redis.prefix)
            .map_err(|e| StartupError::Lane { threads: config.guard.booking_lane_threads, reason: e.to_string() })?;
        let guard = Arc::new(guard);
        // The queueing of the main runtime, beside the booking lane's (`lane_wait_seconds`).
        crate::guard::lane::probe("main", tokio::runtime::Handle::current());
        // The SMART Scheduling Links feed, kept fresh by the same committed changes.
        let feed = Feed::new(db.clone(), config.fhir.feed.clone());
        // Partner webhooks: the relay records deliveries and rings the worker after its commit.
        let webhook_bell = Arc::new(Notify::new());
        let policy = Arc::new(UrlPolicy::new(config.webhooks.allow_cidrs.clone()));
        let max_attempts = config.webhooks.max_attempts();
        // Keyed by a key kept in the database, shared by every instance and independent of
        // JWT_SECRET (which may be unset, or rotated, without changing the ids of events).
        let event_key = crate::db::identities::service_key(&db, WEBHOOK_EVENT_KEY)
            .await
            .map_err(|e| StartupError::migrate(target, &e))?;
        let event_ids = EventIds::new(event_key.as_bytes()).map_err(StartupError::Webhooks)?;
        let room = config.webhooks.concurrency.max(1).saturating_mul(crate::events::handoff::ROOM_PER_PLACE);
        let webhook_handoff = Arc::new(crate::events::Handoff::new(room));
        let recorder =
            WebhookRecorder::new(event_ids, max_attempts, Arc::clone(&webhook_bell), Arc::clone(&webhook_handoff));
        // The delivery workers' own connections, whose claims and outcomes need no WAL flush.
        let deliveries_db = db.relaxed_commit(DELIVERY_CONNECTIONS);
        let webhook_tasks = webhooks::sender::start(
            deliveries_db.clone(),
            config.webhooks.clone(),
            Arc::clone(&policy),
            Arc::clone(&webhook_bell),
            webhook_handoff,
            traces.clone(),
        )
        .map_err(StartupError::Webhooks)?;
        let webhook_service = WebhookService::new(db.clone(), policy, max_attempts, webhook_bell);
        // Telling people: the relay records messages, this instance's worker sends them.
        let outlets = Outlets::new(&config.notify, &config.data_dir).map_err(StartupError::Notify)?;
        outlets.announce(config.single_process());
        let (messages, notify_tasks) = crate::notify::start(deliveries_db, outlets, &config.notify, traces.clone());
        // Live availability: the relay drains the outbox, woken by this sink after each commit.
        let (live, relay_sink, live_tasks) = Live::start(
            db.clone(),
            LiveSettings {
                redis: redis.clone(),
                redis_prefix: config.redis.prefix.clone(),
                redis_timeout: Duration::from_secs(2),
                relay: config.events,
                snapshot_concurrency: (config.db.pool_max / 4).max(1) as usize,
                follow_ups: vec![messages as Arc<dyn FollowUp>, Arc::new(recorder) as Arc<dyn FollowUp>],
                // Every commit, this instance's and the others', reaches the generations of the
                // reads (what was made of them goes stale) and the feed.
                observer: Some(Arc::new(Observers(vec![
                    Arc::clone(&guard.generations) as Arc<dyn crate::events::ChangeObserver>,
                    feed.observer(),
                ]))),
                tracing: traces.clone(),
            },
        );
        let relay_wakeup = Arc::new(relay_sink);
        let service = BookingService::new(db, relay_wakeup).with_guard(guard).with_settings(&config.booking);
        let (stop, stopping) = tokio::sync::watch::channel(false);
        let mut handles = vec![
            ExpiryJob::start(service.clone(), config.booking.hold_expiry_interval, stopping.clone()),
            HorizonJob::start(service.clone(), config.booking.horizon_poll, stopping.clone()),
        ];
        if let Some(keep) = config.retention.keep {
            handles.push(RetentionJob::start(service.db().clone(), keep, stopping));
        }
        let mut jobs = Jobs { handles, stop };
        let limits = config.graphql.limits;
        let more = MoreServices { webhooks: Some(webhook_service) };
        let pipeline = Arc::new(Pipeline::new(limits, service.clone(), more, config.graphql.answer_cache_ttl));
        let subscriptions = SubscriptionExecutor::new(Arc::clone(&pipeline), live, limits);
        let local = secret.as_ref().map(TokenIssuer::new).transpose()?;
        let tokens = Authenticator::new(local, &config.auth.issuers)
            .map_err(|e| StartupError::Issuers(e.to_string()))?
            .with_links(Arc::new(service.db().clone()));
        jobs.handles.extend(tokens.start(&jobs.stop.subscribe()));
        let tokens = Arc::new(tokens);
        let fhir = FhirState {
            service: service.clone(),
            tokens: Arc::clone(&tokens),
            feed,
            settings: config.fhir.clone(),
            fallback_origin: format!("http://{}", config.http.bind_addr),
            max_body_bytes: config.http.limits.max_body_bytes,
        };
        let state = AppState {
            pipeline,
            service,
            tokens,
            limits: config.http.limits,
            redis,
            subscriptions,
            origins: config.http.origins.clone(),
            fhir: Some(fhir),
            tracing: traces.clone(),
        };
        let bind_addr = config.http.bind_addr;
        let listen_error = |e: std::io::Error| StartupError::Listen { addr: bind_addr, reason: io_reason(&e) };
        let listener = TcpListener::bind(bind_addr).await.map_err(listen_error)?;
        let addr = listener.local_addr().map_err(listen_error)?;
        Ok(Self { listener, addr, state, live_tasks, jobs, webhook_tasks, notify_tasks, tracing: traces })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The bound port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The database pool (tests count its statements).
    pub fn db(&self) -> &Db {
        self.state.service.db()
    }

    /// Serves until `shutdown` resolves, then finishes in-flight requests.
    pub async fn run_until_stopped(self, shutdown: impl Future<Output = ()> + Send + 'static) -> std::io::Result<()> {
        let Self { listener, addr, state, live_tasks, jobs, webhook_tasks, notify_tasks, tracing: traces } = self;
        tracing::info!(addr = %addr, "listening");
        let served = crate::http::serve(listener, state, shutdown).await;
        // Upgraded WebSockets outlive `serve`: stopping the tasks closes them (1001).
        jobs.shutdown().await;
        live_tasks.shutdown().await;
        // After the relay: what it recorded last is sent or stays queued, nothing is sent twice.
        webhook_tasks.shutdown().await;
        notify_tasks.shutdown().await;
        // Last: the spans of everything above are in its queue.
        traces.shutdown().await;
        served
    }
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { () = ctrl_c => {}, () = term => {} }
    tracing::info!("shutting down");
}
