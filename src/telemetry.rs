//! Logging: `tracing` to stdout, as text or JSON lines, filtered by `RUST_LOG`.
//!
//! Lines are written by a background thread: a request only formats its line. Writing each
//! line to stdout from the request's own thread was one `write` system call per line, which
//! showed at thousands of bookings per second, when every booking wrote one.
//! No line is dropped: when the thread falls far behind, writers wait.

use std::io::IsTerminal;

use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::{fmt, layer::SubscriberExt, util::SubscriberInitExt, EnvFilter};

use crate::settings::{ConfigError, Reader};

/// The filter when `RUST_LOG` is unset (or not a filter).
const DEFAULT_FILTER: &str = "info,sqlx=warn,sea_orm=warn";

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Logging's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Log line format (`LOG_FORMAT`: `text`, the default, or `json`).
    pub format: LogFormat,
    /// Which lines are written (`RUST_LOG`, `tracing`'s `EnvFilter` syntax; default
    /// `info,sqlx=warn,sea_orm=warn`).
    pub filter: Option<String>,
}

impl Settings {
    /// Reads them.
    pub fn from_env(r: &mut Reader) -> Result<Self, ConfigError> {
        let format = r.with("LOG_FORMAT", |raw| match raw {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err("expected text or json".into()),
        })?;
        Ok(Self { format: format.unwrap_or(LogFormat::Text), filter: r.string("RUST_LOG") })
    }
}

/// Installs the global subscriber (once; later calls are ignored). Keep the returned guard
/// until the process ends: dropping it flushes the lines not yet written.
pub fn init(settings: &Settings) -> WorkerGuard {
    let (writer, guard) = NonBlockingBuilder::default().lossy(false).finish(std::io::stdout());
    // A filter that does not parse falls back to the default rather than stopping the start.
    let filter = settings
        .filter
        .as_deref()
        .and_then(|f| EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| EnvFilter::new(DEFAULT_FILTER));
    let registry = tracing_subscriber::registry().with(filter);
    let _ = match settings.format {
        LogFormat::Json => registry.with(fmt::layer().json().with_current_span(true).with_writer(writer)).try_init(),
        // Colours only for a terminal: in a file or a log collector they are noise, and
        // writing them was a tenth of a booking's CPU.
        LogFormat::Text => {
            registry.with(fmt::layer().with_ansi(std::io::stdout().is_terminal()).with_writer(writer)).try_init()
        }
    };
    guard
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::config;

    #[test]
    fn log_settings() -> Result<(), ConfigError> {
        assert_eq!(config(&[])?.telemetry, Settings { format: LogFormat::Text, filter: None });
        let c = config(&[("LOG_FORMAT", "json"), ("RUST_LOG", "debug,hyper=info")])?.telemetry;
        assert_eq!((c.format, c.filter.as_deref()), (LogFormat::Json, Some("debug,hyper=info")));
        assert_eq!(
            config(&[("LOG_FORMAT", "xml")]).unwrap_err().to_string(),
            "LOG_FORMAT=\"xml\": expected text or json"
        );
        Ok(())
    }
}
