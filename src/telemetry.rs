//! Logging and traces: `tracing` to stdout, as text or JSON lines, filtered by `RUST_LOG`, each
//! line written while serving a request carrying its `trace_id`; and the same spans exported as
//! OpenTelemetry traces when `OTEL_EXPORTER_OTLP_ENDPOINT` is set ([`traces`]).
//!
//! Lines are written by a background thread: a request only formats its line. Writing each
//! line to stdout from the request's own thread was one `write` system call per line, which
//! showed at thousands of bookings per second, when every booking wrote one.
//! No line is dropped: when the thread falls far behind, writers wait.

pub mod traces;

use std::io::IsTerminal;

use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::{
    filter::{filter_fn, FilterExt},
    fmt::{
        self,
        format::{FormatEvent, FormatFields, Writer},
        FmtContext,
    },
    layer::SubscriberExt,
    registry::LookupSpan,
    util::SubscriberInitExt,
    EnvFilter, Layer,
};

pub use self::traces::{TraceSettings, Tracing};
use crate::settings::{ConfigError, Reader};

/// The name of a request's server span, which exists for the traces: its fields (method, route,
/// status) are not repeated in every log line.
pub const SERVER_SPAN: &str = "HTTP request";

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
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// Log line format (`LOG_FORMAT`: `text`, the default, or `json`).
    pub format: LogFormat,
    /// Which lines are written (`RUST_LOG`, `tracing`'s `EnvFilter` syntax; default
    /// `info,sqlx=warn,sea_orm=warn`).
    pub filter: Option<String>,
    /// Trace export.
    pub traces: TraceSettings,
}

impl Settings {
    /// Reads them.
    pub fn from_env(r: &mut Reader) -> Result<Self, ConfigError> {
        let format = r.with("LOG_FORMAT", |raw| match raw {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err("expected text or json".into()),
        })?;
        let filter = r.string("RUST_LOG");
        Ok(Self { format: format.unwrap_or(LogFormat::Text), filter, traces: TraceSettings::from_env(r)? })
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
    // The server span is for the traces; the lines carry its trace id instead.
    let filter = filter.and(filter_fn(|meta| !(meta.is_span() && meta.name() == SERVER_SPAN)));
    let registry = tracing_subscriber::registry().with(traces::layer());
    let _ = match settings.format {
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .json()
                    .with_current_span(true)
                    .map_event_format(|f| WithTraceId { inner: f, json: true })
                    .with_writer(writer)
                    .with_filter(filter),
            )
            .try_init(),
        // Colours only for a terminal: in a file or a log collector they are noise, and
        // writing them was a tenth of a booking's CPU.
        LogFormat::Text => registry
            .with(
                fmt::layer()
                    .with_ansi(std::io::stdout().is_terminal())
                    .map_event_format(|f| WithTraceId { inner: f, json: false })
                    .with_writer(writer)
                    .with_filter(filter),
            )
            .try_init(),
    };
    guard
}

/// A line format with the trace id of the span the event happened in: a `trace_id` member first
/// in a JSON line, ` trace_id=…` at the end of a text line. Lines outside any span are unchanged.
struct WithTraceId<F> {
    inner: F,
    json: bool,
}

impl<S, N, F> FormatEvent<S, N> for WithTraceId<F>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let Some(trace_id) = traces::current_trace_id() else {
            return self.inner.format_event(ctx, writer, event);
        };
        if writer.has_ansi_escapes() {
            // A terminal: first, so the colours of the line are kept.
            write!(writer, "trace_id={trace_id} ")?;
            return self.inner.format_event(ctx, writer, event);
        }
        let mut line = String::with_capacity(256);
        self.inner.format_event(ctx, Writer::new(&mut line), event)?;
        let body = line.trim_end_matches('\n');
        match (self.json, body.strip_prefix('{')) {
            (true, Some(rest)) => writeln!(writer, "{{\"trace_id\":\"{trace_id}\",{rest}"),
            _ => writeln!(writer, "{body} trace_id={trace_id}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::config::tests::config;

    /// Log lines written into memory.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().map_err(|_| std::io::Error::other("poisoned"))?.extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Lines {
        fn text(&self) -> String {
            self.0.lock().map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default()
        }
    }

    /// Logs one line inside a request that continues trace `TRACE`, and one outside any.
    fn log_a_request() {
        let span = tracing::info_span!("graphql", request_id = "r1");
        let parent = traces::TraceParent::parse(&format!("00-{TRACE}-b7ad6b7169203331-01"));
        Tracing::off().adopt(&span, parent.map(traces::TraceParent::span_context));
        span.in_scope(|| tracing::info!("inside"));
        tracing::info!("outside");
    }

    const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";

    #[test]
    fn log_lines_of_a_request_carry_its_trace_id() {
        let text = Lines::default();
        let writer = text.clone();
        let subscriber = tracing_subscriber::registry().with(traces::layer()).with(
            fmt::layer()
                .with_ansi(false)
                .map_event_format(|f| WithTraceId { inner: f, json: false })
                .with_writer(move || writer.clone()),
        );
        tracing::subscriber::with_default(subscriber, log_a_request);
        let lines: Vec<String> = text.text().lines().map(str::to_owned).collect();
        assert!(lines[0].contains("inside") && lines[0].ends_with(&format!(" trace_id={TRACE}")), "{lines:?}");
        assert!(lines[1].contains("outside") && !lines[1].contains("trace_id"), "{lines:?}");

        let json = Lines::default();
        let writer = json.clone();
        let subscriber = tracing_subscriber::registry().with(traces::layer()).with(
            fmt::layer()
                .json()
                .map_event_format(|f| WithTraceId { inner: f, json: true })
                .with_writer(move || writer.clone()),
        );
        tracing::subscriber::with_default(subscriber, log_a_request);
        let lines: Vec<serde_json::Value> =
            json.text().lines().map(|l| serde_json::from_str(l).unwrap_or_default()).collect();
        assert_eq!(lines[0]["trace_id"], TRACE, "{lines:?}");
        assert_eq!(lines[0]["fields"]["message"], "inside");
        assert!(lines[1].get("trace_id").is_none(), "{lines:?}");
    }

    #[test]
    fn log_settings() -> Result<(), ConfigError> {
        let c = config(&[])?.telemetry;
        assert_eq!((c.format, c.filter.as_deref(), c.traces.endpoint.as_deref()), (LogFormat::Text, None, None));
        assert_eq!(c.traces.service_name, "clinic-booking");
        assert_eq!(
            config(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")]).unwrap_err().to_string(),
            "OTEL_EXPORTER_OTLP_ENDPOINT=\"collector:4318\": expected the collector's http:// or https:// URL (without /v1/traces)"
        );
        let c = config(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/"),
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.01"),
        ])?
        .telemetry
        .traces;
        assert_eq!(c.endpoint.as_deref(), Some("http://127.0.0.1:4318"));
        assert_eq!(c.sampler, traces::SamplerChoice { parent_based: false, root: traces::RootSampling::Ratio(0.01) });
        assert_eq!(
            config(&[("OTEL_TRACES_SAMPLER_ARG", "2")]).unwrap_err().to_string(),
            "OTEL_TRACES_SAMPLER_ARG=\"2\": expected a ratio from 0 to 1"
        );
        let c = config(&[("LOG_FORMAT", "json"), ("RUST_LOG", "debug,hyper=info")])?.telemetry;
        assert_eq!((c.format, c.filter.as_deref()), (LogFormat::Json, Some("debug,hyper=info")));
        assert_eq!(
            config(&[("LOG_FORMAT", "xml")]).unwrap_err().to_string(),
            "LOG_FORMAT=\"xml\": expected text or json"
        );
        Ok(())
    }
}
