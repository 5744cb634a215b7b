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
    fhir::{
        feed::{Feed, FeedSettings},
        map::MapSettings,
        FhirState,
    },
    graphql::{build_prevalidated_schema, build_schema, QueryLimits, SubscriptionExecutor},
    guard::{Guard, GuardSettings},
    http::{install_recorder, router, AppState, HttpLimits},
    model::Observers,
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
}

/// A built instance, bound to its port, not yet serving.
pub struct Application {
    listener: TcpListener,
    addr: SocketAddr,
    state: AppState,
    /// The outbox relay and Redis subscriber: they stop with the server, or when this is dropped.
    live_tasks: LiveTasks,
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
        let guard = Arc::new(Guard::new(&GuardSettings::from_config(&config), redis.clone()));
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
                follow_ups: Vec::new(),
                // Other instances' commits reach the rendered answers and the feed through the bus.
                observer: Some(Arc::new(Observers(vec![
                    Arc::clone(&guard.answers) as Arc<dyn crate::events::ChangeObserver>,
                    feed.observer(),
                ]))),
            },
        );
        let relay_wakeup = Arc::new(relay_sink);
        let service = BookingService::new(db, relay_wakeup).with_guard(guard);
        let limits = QueryLimits { depth: config.max_query_depth, complexity: config.max_query_complexity };
        let schema = build_schema(limits, Some(service.clone()));
        let subscriptions = SubscriptionExecutor::new(schema.clone(), live, limits);
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
            prevalidated: build_prevalidated_schema(limits, Some(service.clone())),
            schema,
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
            fhir: Some(fhir),
        };
        let listener = TcpListener::bind(config.bind_addr).await?;
        let addr = listener.local_addr()?;
        Ok(Self { listener, addr, state, live_tasks })
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
        let Self { listener, addr, state, live_tasks } = self;
        tracing::info!(addr = %addr, "listening");
        let served = axum::serve(listener, router(state)).with_graceful_shutdown(shutdown).await;
        // Upgraded WebSockets outlive `serve`: stopping the tasks closes them (1001).
        live_tasks.shutdown().await;
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
