//! Building and running an instance: [`Application::build`] connects, migrates, wires the
//! layers and binds the port (0 in tests picks a free one); `run_until_stopped` serves.

use std::{future::Future, net::SocketAddr, sync::Arc, time::Duration};

use tokio::{net::TcpListener, sync::Notify};

use crate::{
    auth::{load_or_create_dev_secret, TokenIssuer},
    booking::{BookingService, ExpiryJob, HorizonJob},
    config::{Config, DatabaseTarget},
    db::{Db, PoolSettings, StoreError},
    events::{FollowUp, Live, LiveSettings, LiveTasks},
    fhir::{
        feed::{Feed, FeedSettings},
        map::MapSettings,
        FhirState,
    },
    graphql::{MoreServices, Pipeline, QueryLimits, SubscriptionExecutor},
    guard::{Guard, GuardSettings},
    http::{install_recorder, AppState, HttpLimits},
    model::Observers,
    notify::{NotifySettings, NotifyTasks},
    retention::RetentionJob,
    webhooks::{self, EventIds, SenderSettings, UrlPolicy, WebhookRecorder, WebhookService, WebhookTasks},
};

/// Connections of the delivery workers' pool: the message worker's one, the webhook worker's
/// claims and its batches of outcomes (three at once), and its attempts' rare single writes.
const DELIVERY_CONNECTIONS: u32 = 6;

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
        StoreError::Busy(_) => err.to_string(),
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
        let secret = match &config.jwt_secret {
            Some(s) => s.clone(),
            None => {
                let (secret, path, created) = load_or_create_dev_secret(&config.data_dir)
                    .map_err(|e| StartupError::dev_secret(&config.data_dir, &e))?;
                tracing::warn!(
                    path = %path.display(),
                    created,
                    "JWT_SECRET is not set: dev mode signs tokens with the secret kept in this file; \
                     mint one with `clinic-booking token --role admin --sub 1`"
                );
                secret
            }
        };
        let settings = PoolSettings {
            max_connections: config.db_pool_max,
            acquire_timeout: Duration::from_secs(5),
            statement_timeout: config.db_statement_timeout,
            // A booking statement per bulkhead place, and one for each batcher.
            hot_connections: config.booking_concurrency.saturating_add(2),
        };
        let db = Db::connect(&config.database, &settings)
            .await
            .map_err(|e| StartupError::database(&config.database, &e))?
            .with_request_wait(config.booking_queue_timeout);
        db.migrate().await.map_err(|e| StartupError::migrate(&config.database, &e))?;
        let redis = match config.redis_url.as_deref() {
            Some(url) => Some(
                redis::Client::open(url)
                    .map_err(|e| StartupError::Redis { url: crate::config::redact_url(url), reason: e.to_string() })?,
            ),
            None => None,
        };
        let guard = Guard::new(&GuardSettings::from_config(&config), redis.clone())
            .map_err(|e| StartupError::Lane { threads: config.booking_lane_threads, reason: e.to_string() })?;
        let guard = Arc::new(guard);
        // The queueing of the main runtime, beside the booking lane's (`lane_wait_seconds`).
        crate::guard::lane::probe("main", tokio::runtime::Handle::current());
        // The SMART Scheduling Links feed, kept fresh by the same committed changes.
        let feed = Feed::new(
            db.clone(),
            FeedSettings {
                refresh: config.fhir.feed_refresh,
                resync: config.fhir.feed_resync,
                map: MapSettings {
                    booking_url: config.fhir.public_booking_url.clone(),
                    location: config.fhir.location.clone(),
                },
            },
        );
        // Partner webhooks: the relay records deliveries and rings the worker after its commit.
        let webhook_bell = Arc::new(Notify::new());
        let policy = Arc::new(UrlPolicy::new(config.webhook_allow_cidrs.clone()));
        let max_attempts = i32::try_from(config.webhook_retry_schedule.len() + 1).unwrap_or(i32::MAX);
        let event_ids = EventIds::new(secret.expose()).map_err(StartupError::Webhooks)?;
        let room = config.webhook_concurrency.max(1).saturating_mul(crate::events::handoff::ROOM_PER_PLACE);
        let webhook_handoff = Arc::new(crate::events::Handoff::new(room));
        let recorder =
            WebhookRecorder::new(event_ids, max_attempts, Arc::clone(&webhook_bell), Arc::clone(&webhook_handoff));
        // The delivery workers' own connections, whose claims and outcomes need no WAL flush.
        let deliveries_db = db.relaxed_commit(DELIVERY_CONNECTIONS);
        let webhook_tasks = webhooks::sender::start(
            deliveries_db.clone(),
            SenderSettings {
                schedule: config.webhook_retry_schedule.clone(),
                timeout: config.webhook_timeout,
                poll_interval: config.webhook_poll_interval,
                concurrency: config.webhook_concurrency,
                policy: Arc::clone(&policy),
            },
            Arc::clone(&webhook_bell),
            webhook_handoff,
        )
        .map_err(StartupError::Webhooks)?;
        let webhook_service = WebhookService::new(db.clone(), policy, max_attempts, webhook_bell);
        // Telling people: the relay records messages, this instance's worker sends them.
        let notify = NotifySettings::from_config(&config).map_err(StartupError::Notify)?;
        notify.announce(config.single_process());
        let (messages, notify_tasks) = crate::notify::start(deliveries_db, notify);
        // Live availability: the relay drains the outbox, woken by this sink after each commit.
        let (live, relay_sink, live_tasks) = Live::start(
            db.clone(),
            LiveSettings {
                redis: redis.clone(),
                redis_prefix: config.redis_prefix.clone(),
                redis_timeout: Duration::from_secs(2),
                poll_interval: config.outbox_poll_interval,
                gather: config.outbox_gather,
                snapshot_concurrency: (config.db_pool_max / 4).max(1) as usize,
                follow_ups: vec![messages as Arc<dyn FollowUp>, Arc::new(recorder) as Arc<dyn FollowUp>],
                // Every commit, this instance's and the others', reaches the generations of the
                // reads (what was made of them goes stale) and the feed.
                observer: Some(Arc::new(Observers(vec![
                    Arc::clone(&guard.generations) as Arc<dyn crate::events::ChangeObserver>,
                    feed.observer(),
                ]))),
            },
        );
        let relay_wakeup = Arc::new(relay_sink);
        let service = BookingService::new(db, relay_wakeup)
            .with_guard(guard)
            .with_hold_ttl(config.hold_ttl)
            .with_offer_ttl(config.waitlist_offer_ttl)
            .with_horizon_days(config.horizon.days);
        let (stop, stopping) = tokio::sync::watch::channel(false);
        let mut handles = vec![
            ExpiryJob::start(service.clone(), config.hold_expiry_interval, stopping.clone()),
            HorizonJob::start(service.clone(), config.horizon.poll, stopping.clone()),
        ];
        if let Some(keep) = config.retention {
            handles.push(RetentionJob::start(service.db().clone(), keep, stopping));
        }
        let jobs = Jobs { handles, stop };
        let limits = QueryLimits { depth: config.max_query_depth, complexity: config.max_query_complexity };
        let more = MoreServices { webhooks: Some(webhook_service) };
        // No slot-list cache means no kept answers either: `SLOT_CACHE_TTL_MS=0` switches off both.
        let answer_ttl = if config.slot_cache_ttl.is_zero() { Duration::ZERO } else { config.answer_cache_ttl };
        let pipeline = Arc::new(Pipeline::new(limits, service.clone(), more, answer_ttl));
        let subscriptions = SubscriptionExecutor::new(Arc::clone(&pipeline), live, limits);
        let tokens = Arc::new(TokenIssuer::new(&secret)?);
        let fhir = FhirState {
            service: service.clone(),
            tokens: Arc::clone(&tokens),
            feed,
            public_base_url: config.fhir.public_base_url.clone(),
            fallback_origin: format!("http://{}", config.bind_addr),
            feed_max_age: config.fhir.feed_max_age,
            max_body_bytes: config.max_body_bytes,
        };
        let state = AppState {
            pipeline,
            service,
            tokens,
            limits: HttpLimits {
                max_body_bytes: config.max_body_bytes,
                max_batch: config.max_batch_operations,
                ws_init_timeout: config.ws_init_timeout,
                ws_max_subscriptions: config.ws_max_subscriptions,
            },
            redis,
            subscriptions,
            origins: config.cors_allowed_origins.clone(),
            fhir: Some(fhir),
        };
        let listen_error = |e: std::io::Error| StartupError::Listen { addr: config.bind_addr, reason: io_reason(&e) };
        let listener = TcpListener::bind(config.bind_addr).await.map_err(listen_error)?;
        let addr = listener.local_addr().map_err(listen_error)?;
        Ok(Self { listener, addr, state, live_tasks, jobs, webhook_tasks, notify_tasks })
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
        let Self { listener, addr, state, live_tasks, jobs, webhook_tasks, notify_tasks } = self;
        tracing::info!(addr = %addr, "listening");
        let served = crate::http::serve(listener, state, shutdown).await;
        // Upgraded WebSockets outlive `serve`: stopping the tasks closes them (1001).
        jobs.shutdown().await;
        live_tasks.shutdown().await;
        // After the relay: what it recorded last is sent or stays queued, nothing is sent twice.
        webhook_tasks.shutdown().await;
        notify_tasks.shutdown().await;
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
