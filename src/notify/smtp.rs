//! Plain SMTP (`smtp://` without `tls=`, the local relay's case): lettre's SMTP client over
//! sockets of our own, with `TCP_NODELAY`, kept open between messages.
//!
//! Why not lettre's pooled transport here: it leaves Nagle's algorithm on, and its client writes
//! a message's body and the closing `.` in two writes. The second waits for the relay to
//! acknowledge the first, which a Linux relay delays by ~40 ms, so every message took ~40 ms
//! whatever the relay did (eight connections sent ~150 messages/s: docs/benchmarks-history.md, fifth pass).
//! TLS relays keep lettre's transport, which opens its own sockets.

use std::{
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

use lettre::transport::smtp::{
    authentication::{Credentials, Mechanism},
    client::AsyncSmtpConnection,
    extension::ClientId,
};
use percent_encoding::percent_decode_str;

use super::transport::{smtp_error, SendError, SMTP_TIMEOUT};

/// SMTP's own port, the default of `smtp://` as lettre has it.
const SMTP_PORT: u16 = 25;
/// An idle connection older than this is closed instead of reused: relays drop idle sessions
/// (Postfix after 300 s, many sooner), and a fresh connection costs one round trip more.
const IDLE_FOR: Duration = Duration::from_secs(30);

/// A relay reached over plain SMTP, with up to `max_idle` connections kept between messages.
pub struct PlainRelay {
    host: String,
    port: u16,
    hello: ClientId,
    credentials: Option<Credentials>,
    idle: Mutex<Vec<(AsyncSmtpConnection, Instant)>>,
    max_idle: usize,
}

impl PlainRelay {
    /// The relay of a validated `smtp://` URL (no `tls=`); `max_idle` is the worker's concurrency.
    pub fn new(url: &url::Url, max_idle: usize) -> Result<Self, String> {
        let host = url.host_str().filter(|h| !h.is_empty()).ok_or("SMTP_URL names no host")?;
        // As lettre reads the URL: the path names the EHLO domain, a password brings credentials.
        let hello = match url.path().trim_matches('/') {
            "" => ClientId::default(),
            name => ClientId::Domain(name.to_owned()),
        };
        let decode =
            |s: &str| percent_decode_str(s).decode_utf8().map(|s| s.into_owned()).map_err(|e| format!("SMTP_URL: {e}"));
        let credentials = match url.password() {
            Some(password) => Some(Credentials::new(decode(url.username())?, decode(password)?)),
            None => None,
        };
        Ok(Self {
            host: host.trim_start_matches('[').trim_end_matches(']').to_owned(),
            port: url.port().unwrap_or(SMTP_PORT),
            hello,
            credentials,
            idle: Mutex::new(Vec::new()),
            max_idle: max_idle.max(1),
        })
    }

    /// Sends one message, on a kept connection when one is open; a kept connection that fails
    /// for a reason other than the relay's refusal (it closed while idle) is replaced once.
    pub async fn send(&self, message: &lettre::Message) -> Result<(), SendError> {
        let envelope = message.envelope();
        let bytes = message.formatted();
        if let Some(mut connection) = self.take_idle() {
            match within_timeout(connection.send(envelope, &bytes)).await {
                Ok(_) => {
                    self.keep(connection);
                    return Ok(());
                }
                Err(Failure::Refused(error)) => return Err(error),
                Err(Failure::Broken(error)) => {
                    tracing::debug!(%error, "kept SMTP connection failed; sending on a new one");
                }
            }
        }
        let mut connection = self.connect().await.map_err(Failure::into_error)?;
        within_timeout(connection.send(envelope, &bytes)).await.map_err(Failure::into_error)?;
        self.keep(connection);
        Ok(())
    }

    /// A kept connection young enough to reuse (older ones are dropped, which closes them).
    fn take_idle(&self) -> Option<AsyncSmtpConnection> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        while let Some((connection, since)) = idle.pop() {
            if since.elapsed() < IDLE_FOR && !connection.has_broken() {
                return Some(connection);
            }
        }
        None
    }

    /// Keeps `connection` for the next message, or closes it when enough are kept.
    fn keep(&self, connection: AsyncSmtpConnection) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < self.max_idle && !connection.has_broken() {
            idle.push((connection, Instant::now()));
        }
    }

    /// Connects with `TCP_NODELAY`, reads the greeting, says EHLO and authenticates.
    async fn connect(&self) -> Result<AsyncSmtpConnection, Failure> {
        let broken = |what: &str, e: &dyn std::fmt::Display| {
            Failure::Broken(SendError(format!("SMTP: {what} {}:{}: {e}", self.host, self.port)))
        };
        let stream =
            tokio::time::timeout(SMTP_TIMEOUT, tokio::net::TcpStream::connect((self.host.as_str(), self.port)))
                .await
                .map_err(|e| broken("connecting to", &e))?
                .map_err(|e| broken("connecting to", &e))?;
        stream.set_nodelay(true).map_err(|e| broken("setting TCP_NODELAY for", &e))?;
        let mut connection =
            within_timeout(AsyncSmtpConnection::connect_with_transport(Box::new(stream), &self.hello)).await?;
        if let Some(credentials) = &self.credentials {
            within_timeout(connection.auth(&[Mechanism::Plain, Mechanism::Login], credentials)).await?;
        }
        Ok(connection)
    }
}

/// How an exchange with the relay failed.
enum Failure {
    /// The relay answered 5xx: the message itself is refused, and a new connection would not help.
    Refused(SendError),
    /// The connection failed or timed out, or the relay answered 4xx.
    Broken(SendError),
}

impl Failure {
    fn into_error(self) -> SendError {
        match self {
            Self::Refused(e) | Self::Broken(e) => e,
        }
    }
}

/// Runs one exchange within [`SMTP_TIMEOUT`], sorting its failure.
async fn within_timeout<T>(
    exchange: impl std::future::Future<Output = Result<T, lettre::transport::smtp::Error>>,
) -> Result<T, Failure> {
    match tokio::time::timeout(SMTP_TIMEOUT, exchange).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) if e.is_permanent() => Err(Failure::Refused(smtp_error(&e))),
        Ok(Err(e)) => Err(Failure::Broken(smtp_error(&e))),
        Err(_) => Err(Failure::Broken(SendError(format!("SMTP: no answer within {} s", SMTP_TIMEOUT.as_secs())))),
    }
}
