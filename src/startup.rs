//! Building and running an instance: [`Application::build`] connects, migrates, wires the
//! layers and binds the port (0 in tests picks a free one); `run_until_stopped` serves.

use std::{future::Future, net::SocketAddr, sync::Arc, time::Duration};

use tokio::net::TcpListener;

use crate::{
    auth::{load_or_create_dev_secret, TokenIssuer},
    booking::BookingService,
    config::Config,
    db::{Db, PoolSettings, StoreError},
    graphql::{build_schema, QueryLimits},
    http::{install_recorder, router, AppState, HttpLimits},
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
}

/// A built instance, bound to its port, not yet serving.
pub struct Application {
    listener: TcpListener,
    addr: SocketAddr,
    state: AppState,
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
            statement_timeout: Duration::from_secs(5),
        };
        let db = Db::connect(&config.database, &settings).await?;
        db.migrate().await?;
        let redis = config.redis_url.as_deref().map(redis::Client::open).transpose()?;
        let relay_wakeup = Arc::new(tokio::sync::Notify::new());
        let service = BookingService::new(db, relay_wakeup);
        let schema = build_schema(
            QueryLimits { depth: config.max_query_depth, complexity: config.max_query_complexity },
            Some(service.clone()),
        );
        let state = AppState {
            schema,
            service,
            tokens: Arc::new(TokenIssuer::new(&secret)),
            limits: HttpLimits { max_body_bytes: config.max_body_bytes, max_batch: config.max_batch_operations },
            redis,
        };
        let listener = TcpListener::bind(config.bind_addr).await?;
        let addr = listener.local_addr()?;
        Ok(Self { listener, addr, state })
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
        tracing::info!(addr = %self.addr, "listening");
        axum::serve(self.listener, router(self.state)).with_graceful_shutdown(shutdown).await
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
