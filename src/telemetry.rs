//! Logging: `tracing` to stdout, as text or JSON lines, filtered by `RUST_LOG`.
//!
//! Lines are written by a background thread: a request only formats its line. Writing each
//! line to stdout from the request's own thread was one `write` system call per line, which
//! showed at thousands of bookings per second, when every booking wrote one.
//! No line is dropped: when the thread falls far behind, writers wait.

use std::io::IsTerminal;

use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::{fmt, layer::SubscriberExt, util::SubscriberInitExt, EnvFilter};

use crate::config::LogFormat;

/// Installs the global subscriber (once; later calls are ignored). Keep the returned guard
/// until the process ends: dropping it flushes the lines not yet written.
pub fn init(format: LogFormat) -> WorkerGuard {
    let (writer, guard) = NonBlockingBuilder::default().lossy(false).finish(std::io::stdout());
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,sea_orm=warn"));
    let registry = tracing_subscriber::registry().with(filter);
    let _ = match format {
        LogFormat::Json => registry.with(fmt::layer().json().with_current_span(true).with_writer(writer)).try_init(),
        // Colours only for a terminal: in a file or a log collector they are noise, and
        // writing them was a tenth of a booking's CPU.
        LogFormat::Text => {
            registry.with(fmt::layer().with_ansi(std::io::stdout().is_terminal()).with_writer(writer)).try_init()
        }
    };
    guard
}
