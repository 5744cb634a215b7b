//! Logging: `tracing` to stdout, as text or JSON lines, filtered by `RUST_LOG`.

use tracing_subscriber::{fmt, layer::SubscriberExt, util::SubscriberInitExt, EnvFilter};

use crate::config::LogFormat;

/// Installs the global subscriber (once; later calls are ignored, which suits tests).
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,sea_orm=warn"));
    let registry = tracing_subscriber::registry().with(filter);
    let _ = match format {
        LogFormat::Json => registry.with(fmt::layer().json().with_current_span(true)).try_init(),
        LogFormat::Text => registry.with(fmt::layer()).try_init(),
    };
}
