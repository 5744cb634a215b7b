//! Building and running an instance: [`Application::build`] connects, migrates, wires the
//! layers and binds the port (0 in tests picks a free one); `run_until_stopped` serves.

use std::{future::Future, net::SocketAddr, sync::Arc, time::Duration};

use tokio::net::TcpListener;

use crate::{
    auth::{load_or_create_dev_secret, TokenIssuer},
    booking::BookingService,
    config::Config,
    db::{Db, PoolSettings, StoreError},
    events::{Live, LiveSettings, LiveTasks},
    graphql::{build_prevalidated_schema, build_schema, QueryLimits, SubscriptionExecutor},
    guard::{Guard, GuardSettings},
    http::{install_recorder, router, AppState, HttpLimits},
    notify::{NotifySettings, NotifyTasks},
};

/// Why an instance could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// The database could not be opened or migrated.
    #[error("database: {0}")]
    Database(#[from] StoreError),
    /// The port could not be bound, or the data directory written.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Redis URL unusable.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// The signing secret is unusable.
    #[error("JWT_SECRET: {0}")]
    Tokens(#[from] crate::auth::TokenError),
    /// The mail server or SMS gateway settings are unusable.
    #[error("{0}")]
    Notify(String),
}

/// A built instance, bound to its port, not yet serving.
pub struct Application {
    listener: TcpListener,
    addr: SocketAddr,
    state: AppState,
    /// The outbox relay and Redis subscriber: they stop with the server, or when this is dropped.
    live_tasks: LiveTasks,
    /// The message worker: it stops after them.
    notify_tasks: NotifyTasks,
}

impl Application {
    /// Connects to the database, migrates it, builds the schema and binds the listener.
    pub async fn build(config: Config) -> Result<Self, StartupError> {
        install_recorder();
        let secret = match &config.jwt_secret {
            Some(s) => s.clone(),
            None => {
                let (secret, path, created) = load_or_create_dev_secret(&config.data_dir)?;
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
        let db = Db::connect(&config.database, &settings).await?;
        db.migrate().await?;
        let redis = config.redis_url.as_deref().map(redis::Client::open).transpose()?;
        let guard = Guard::new(&GuardSettings::from_config(&config), redis.clone());
        // Telling people: the relay records messages, this instance's worker sends them.
        let notify = NotifySettings::from_config(&config).map_err(StartupError::Notify)?;
        notify.announce(config.single_process());
        let (messages, notify_tasks) = crate::notify::start(db.clone(), notify);
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
                follow_ups: vec![messages as Arc<dyn crate::events::FollowUp>],
                // Other instances' commits reach the rendered answers through the bus.
                observer: Some(Arc::clone(&guard.answers) as Arc<dyn crate::events::ChangeObserver>),
            },
        );
        let relay_wakeup = Arc::new(relay_sink);
        let service = BookingService::new(db, relay_wakeup).with_guard(Arc::new(guard));
        let limits = QueryLimits { depth: config.max_query_depth, complexity: config.max_query_complexity };
        let schema = build_schema(limits, Some(service.clone()));
        let subscriptions = SubscriptionExecutor::new(schema.clone(), live, limits);
        let state = AppState {
            prevalidated: build_prevalidated_schema(limits, Some(service.clone())),
            schema,
            service,
            tokens: Arc::new(TokenIssuer::new(&secret)?),
            limits: HttpLimits {
                max_body_bytes: config.max_body_bytes,
                max_batch: config.max_batch_operations,
                ws_init_timeout: config.ws_init_timeout,
                ws_max_subscriptions: config.ws_max_subscriptions,
            },
            redis,
            subscriptions,
        };
        let listener = TcpListener::bind(config.bind_addr).await?;
        let addr = listener.local_addr()?;
        Ok(Self { listener, addr, state, live_tasks, notify_tasks })
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
        let Self { listener, addr, state, live_tasks, notify_tasks } = self;
        tracing::info!(addr = %addr, "listening");
        let served = axum::serve(listener, router(state)).with_graceful_shutdown(shutdown).await;
        // Upgraded WebSockets outlive `serve`: stopping the tasks closes them (1001).
        live_tasks.shutdown().await;
        // After the relay: what it recorded last is sent or stays queued, nothing is sent twice.
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
