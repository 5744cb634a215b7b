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

use lettre::{
    address::Envelope,
    transport::smtp::{
        authentication::{Credentials, Mechanism},
        client::AsyncSmtpConnection,
        commands::{Data, Mail, Rcpt},
        extension::{ClientId, Extension, MailBodyParameter, MailParameter},
    },
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

    /// Sends one message, on a kept connection when one is open. A kept connection that turns
    /// out gone before the relay answered anything (it closed while idle) is replaced once;
    /// any answer of the relay, a refusal for now (4xx) included, ends the attempt, so one
    /// attempt is at most one transaction (the worker's backoff decides when to try again).
    pub async fn send(&self, message: &lettre::Message) -> Result<(), SendError> {
        let envelope = message.envelope();
        let bytes = message.formatted();
        if let Some(mut connection) = self.take_idle() {
            match transaction(&mut connection, envelope, &bytes).await {
                Ok(()) => {
                    self.keep(connection);
                    return Ok(());
                }
                Err(Failure::Ended(error)) => return Err(error),
                Err(Failure::Unanswered(error)) => {
                    tracing::debug!(%error, "kept SMTP connection gone; sending on a new one");
                }
            }
        }
        let mut connection = self.connect().await.map_err(Failure::into_error)?;
        transaction(&mut connection, envelope, &bytes).await.map_err(Failure::into_error)?;
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
        let failed = |what: &str, e: &dyn std::fmt::Display| {
            Failure::Ended(SendError(format!("SMTP: {what} {}:{}: {e}", self.host, self.port)))
        };
        let stream =
            tokio::time::timeout(SMTP_TIMEOUT, tokio::net::TcpStream::connect((self.host.as_str(), self.port)))
                .await
                .map_err(|e| failed("connecting to", &e))?
                .map_err(|e| failed("connecting to", &e))?;
        stream.set_nodelay(true).map_err(|e| failed("setting TCP_NODELAY for", &e))?;
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
    /// The connection failed before the relay answered anything (closed, reset, silent): no
    /// transaction began, so a fresh connection may carry the message in the same attempt.
    Unanswered(SendError),
    /// The relay answered (a 4xx or 5xx refusal), the exchange broke once a transaction had
    /// begun, or a fresh connection failed: the attempt is over.
    Ended(SendError),
}

impl Failure {
    fn into_error(self) -> SendError {
        match self {
            Self::Unanswered(e) | Self::Ended(e) => e,
        }
    }
}

/// One transaction (`MAIL`, `RCPT` each, `DATA`, the message) within [`SMTP_TIMEOUT`], as
/// lettre's `AsyncSmtpConnection::send` does it, but telling a connection that never answered
/// `MAIL` apart from one that answered, or broke later (when the relay may have the message).
/// A connection that failed is closed: it is never kept.
async fn transaction(connection: &mut AsyncSmtpConnection, envelope: &Envelope, bytes: &[u8]) -> Result<(), Failure> {
    let deadline = tokio::time::Instant::now() + SMTP_TIMEOUT;
    let result = async {
        let mail = Mail::new(envelope.from().cloned(), mail_parameters(connection, envelope, bytes)?);
        match tokio::time::timeout_at(deadline, connection.command(mail)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) if e.is_transient() || e.is_permanent() => return Err(Failure::Ended(smtp_error(&e))),
            Ok(Err(e)) => return Err(Failure::Unanswered(smtp_error(&e))),
            Err(_) => return Err(Failure::Unanswered(no_answer())),
        }
        for to in envelope.to() {
            within(deadline, connection.command(Rcpt::new(to.clone(), Vec::new()))).await?;
        }
        within(deadline, connection.command(Data)).await?;
        within(deadline, connection.message(bytes)).await?;
        Ok(())
    }
    .await;
    if result.is_err() {
        // QUIT when the relay still listens (after a refusal), bounded: a dead one never answers.
        let _ = tokio::time::timeout_at(deadline, connection.abort()).await;
    }
    result
}

/// The `MAIL` parameters the message needs, as lettre's `send` chooses them: `SMTPUTF8` for
/// non-ASCII addresses, `BODY=8BITMIME` for non-ASCII content, refused when the relay lacks them.
fn mail_parameters(
    connection: &AsyncSmtpConnection,
    envelope: &Envelope,
    bytes: &[u8],
) -> Result<Vec<MailParameter>, Failure> {
    let refused =
        |what: &str| Failure::Ended(SendError(format!("SMTP: {what}, which the mail server does not support")));
    let mut parameters = Vec::new();
    let addresses = envelope.from().into_iter().chain(envelope.to());
    if addresses.map(AsRef::<str>::as_ref).any(|a| !a.is_ascii()) {
        if !connection.server_info().supports_feature(Extension::SmtpUtfEight) {
            return Err(refused("non-ASCII addresses need SMTPUTF8"));
        }
        parameters.push(MailParameter::SmtpUtfEight);
    }
    if !bytes.is_ascii() {
        if !connection.server_info().supports_feature(Extension::EightBitMime) {
            return Err(refused("non-ASCII content needs 8BITMIME"));
        }
        parameters.push(MailParameter::Body(MailBodyParameter::EightBitMime));
    }
    Ok(parameters)
}

/// One exchange of a begun transaction, by `deadline`: any failure ends the attempt.
async fn within<T>(
    deadline: tokio::time::Instant,
    exchange: impl std::future::Future<Output = Result<T, lettre::transport::smtp::Error>>,
) -> Result<T, Failure> {
    match tokio::time::timeout_at(deadline, exchange).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(Failure::Ended(smtp_error(&e))),
        Err(_) => Err(Failure::Ended(no_answer())),
    }
}

/// The error of an exchange the relay did not finish within [`SMTP_TIMEOUT`].
fn no_answer() -> SendError {
    SendError(format!("SMTP: no answer within {} s", SMTP_TIMEOUT.as_secs()))
}

/// Runs one exchange of setting up a connection within [`SMTP_TIMEOUT`]: any failure ends the
/// attempt (a fresh connection that fails is not tried again in it).
async fn within_timeout<T>(
    exchange: impl std::future::Future<Output = Result<T, lettre::transport::smtp::Error>>,
) -> Result<T, Failure> {
    within(tokio::time::Instant::now() + SMTP_TIMEOUT, exchange).await
}
