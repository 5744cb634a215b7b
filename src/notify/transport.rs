//! Where messages go: a mail server over SMTP (lettre, tokio, rustls) and an SMS gateway over
//! HTTP (the Twilio Messages form), or, when those are not configured, files in the data
//! directory (`outbox-mail/<id>.eml`, `outbox-sms/<id>.txt`) for a developer to read.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use lettre::{
    transport::smtp::{AsyncSmtpTransport, PoolConfig},
    AsyncTransport, Tokio1Executor,
};
use percent_encoding::percent_decode_str;

use super::settings::{SMS_URL, SMTP_URL};
use super::smtp::PlainRelay;
use crate::settings::ConfigError;

/// A URL that may carry credentials (`SMTP_URL`, `SMS_URL`): its `Debug` hides the password.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretUrl(url::Url);

impl SecretUrl {
    /// The URL, credentials included.
    pub fn expose(&self) -> &url::Url {
        &self.0
    }

    /// The URL without its credentials, for logs.
    pub fn redacted(&self) -> String {
        let mut shown = self.0.clone();
        if !shown.username().is_empty() || shown.password().is_some() {
            let _ = shown.set_username("");
            let _ = shown.set_password(None);
        }
        shown.to_string()
    }
}

impl std::fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretUrl({})", self.redacted())
    }
}

/// An SMS gateway: where the Twilio-style form goes, and the sender it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SmsGateway {
    /// `SMS_URL`; basic-auth credentials, if any, in its userinfo.
    pub url: SecretUrl,
    /// `SMS_FROM`.
    pub from: String,
}

/// `SMTP_URL`: what lettre's `AsyncSmtpTransport::from_url` takes, minus what would send a
/// password in the clear.
pub(super) fn parse_smtp_url(raw: &str) -> Result<SecretUrl, ConfigError> {
    let bad = |reason: &str| ConfigError::new(SMTP_URL, hide_password(raw), reason);
    let url = url::Url::parse(raw).map_err(|e| bad(&format!("not a URL ({e}); expected smtp://host:port")))?;
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("names no host; expected smtp://host:port or smtps://user:pass@host"));
    }
    let mut tls = None;
    for (key, value) in url.query_pairs() {
        match (key.as_ref(), value.as_ref()) {
            ("tls", "required" | "opportunistic") if tls.is_none() => tls = Some(value.into_owned()),
            _ => return Err(bad("the only query parameter understood is tls=required or tls=opportunistic")),
        }
    }
    let credentials = !url.username().is_empty() || url.password().is_some();
    match url.scheme() {
        "smtps" if tls.is_some() => Err(bad("smtps:// is TLS from the start; tls= applies to smtp:// only")),
        "smtps" => Ok(SecretUrl(url)),
        "smtp" if credentials && tls.as_deref() != Some("required") && !is_loopback(&url) => Err(bad(
            "credentials would travel unencrypted: use smtps://user:pass@host or smtp://user:pass@host?tls=required \
             (plain smtp:// with credentials only to a loopback address)",
        )),
        "smtp" => Ok(SecretUrl(url)),
        _ => Err(bad("expected smtp://host:port or smtps://user:pass@host[:port]")),
    }
}

/// `SMS_URL`: an `https://` endpoint, or `http://` to a loopback address (basic-auth
/// credentials must not cross a network in the clear).
pub(super) fn parse_sms_url(raw: &str) -> Result<SecretUrl, ConfigError> {
    let bad = |reason: &str| ConfigError::new(SMS_URL, hide_password(raw), reason);
    let url = url::Url::parse(raw).map_err(|e| bad(&format!("not a URL ({e})")))?;
    if url.host().is_none() {
        return Err(bad("names no host"));
    }
    match url.scheme() {
        "https" => Ok(SecretUrl(url)),
        "http" if is_loopback(&url) => Ok(SecretUrl(url)),
        "http" => Err(bad("use https:// (http:// only to a loopback address, for local gateways)")),
        _ => Err(bad("expected an https:// URL (basic auth from its userinfo)")),
    }
}

/// Whether `url` names this machine (`localhost`, 127.0.0.0/8, `::1`): credentials may go
/// there unencrypted.
fn is_loopback(url: &url::Url) -> bool {
    match url.host() {
        // Hosts of non-special schemes (smtp://) are opaque to `url`: an address reads as a name.
        Some(url::Host::Domain(d)) => {
            d.eq_ignore_ascii_case("localhost")
                || d.trim_matches(['[', ']']).parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
        }
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// A URL value as shown in an error: without its password.
fn hide_password(raw: &str) -> String {
    match url::Url::parse(raw) {
        Ok(mut url) if url.password().is_some() => {
            let _ = url.set_password(Some("***"));
            url.to_string()
        }
        _ => raw.to_owned(),
    }
}

/// Longest SMTP exchange of one message (connect, greeting, every command, the data).
pub const SMTP_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest SMS gateway request.
pub const SMS_TIMEOUT: Duration = Duration::from_secs(15);

/// Why an attempt did not get the message through. Every failure is retried up to
/// `NOTIFY_MAX_ATTEMPTS`, an SMTP 5xx too: a mail server refusing everything for a while (a
/// full disk, a relay misconfigured) answers 5xx as well, and the cap bounds what a message
/// that will never be taken costs.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SendError(pub String);

/// Where emails go.
#[derive(Clone)]
pub enum EmailTransport {
    /// A mail server.
    Smtp {
        /// How it is reached.
        relay: Relay,
        /// The URL without credentials, for logs.
        shown: String,
    },
    /// Files in this directory.
    Files(PathBuf),
}

/// The SMTP client of a mail server.
#[derive(Clone)]
pub enum Relay {
    /// `smtp://` without `tls=`: our own connections with `TCP_NODELAY` (see [`PlainRelay`]).
    Plain(Arc<PlainRelay>),
    /// TLS (`smtps://`, `tls=required|opportunistic`): lettre's pooled transport.
    Tls(AsyncSmtpTransport<Tokio1Executor>),
}

impl EmailTransport {
    /// The transport of `SMTP_URL`, or files under `data_dir` without one; `concurrency`
    /// connections at most.
    pub fn new(url: Option<&SecretUrl>, data_dir: &Path, concurrency: usize) -> Result<Self, String> {
        let Some(url) = url else {
            return Ok(Self::Files(data_dir.join("outbox-mail")));
        };
        let plain = url.expose().scheme() == "smtp" && !url.expose().query_pairs().any(|(k, _)| k == "tls");
        let relay = if plain {
            Relay::Plain(Arc::new(PlainRelay::new(url.expose(), concurrency)?))
        } else {
            let transport = AsyncSmtpTransport::<Tokio1Executor>::from_url(url.expose().as_str())
                .map_err(|e| format!("SMTP_URL={}: {e}", url.redacted()))?
                .timeout(Some(SMTP_TIMEOUT))
                .pool_config(PoolConfig::new().max_size(u32::try_from(concurrency).unwrap_or(u32::MAX)))
                .build();
            Relay::Tls(transport)
        };
        Ok(Self::Smtp { relay, shown: url.redacted() })
    }

    /// Where emails go, for the start-up log.
    pub fn describe(&self) -> String {
        match self {
            Self::Smtp { shown, .. } => format!("the mail server at {shown}"),
            Self::Files(dir) => format!("files in {}", dir.display()),
        }
    }

    /// Sends message `id`.
    pub async fn send(&self, id: i64, message: &lettre::Message) -> Result<(), SendError> {
        match self {
            Self::Smtp { relay: Relay::Plain(relay), .. } => relay.send(message).await,
            Self::Smtp { relay: Relay::Tls(transport), .. } => {
                transport.send(message.clone()).await.map(|_| ()).map_err(|e| smtp_error(&e))
            }
            Self::Files(dir) => write_file(dir, &format!("{id}.eml"), &message.formatted()).await,
        }
    }
}

/// What a failed SMTP exchange says in the message's `last_error`.
pub(super) fn smtp_error(e: &lettre::transport::smtp::Error) -> SendError {
    if e.is_permanent() {
        SendError(format!("the mail server refused it: {e}"))
    } else {
        SendError(format!("SMTP: {e}"))
    }
}

/// Where SMS go.
#[derive(Clone)]
pub enum SmsTransport {
    /// An HTTP gateway.
    Http {
        /// The client (no redirects followed).
        client: reqwest::Client,
        /// The endpoint, without credentials.
        url: url::Url,
        /// Basic-auth user and password, from the URL's userinfo.
        auth: Option<(String, Option<String>)>,
        /// `SMS_FROM`.
        from: String,
    },
    /// Files in `dir`.
    Files {
        /// The directory.
        dir: PathBuf,
        /// The sender named in each file.
        from: String,
    },
}

impl SmsTransport {
    /// The gateway of `SMS_URL`, or files under `data_dir` without one.
    pub fn new(gateway: Option<&SmsGateway>, sms_from: Option<&str>, data_dir: &Path) -> Result<Self, String> {
        let Some(gateway) = gateway else {
            let from = sms_from.unwrap_or("clinic-booking").to_owned();
            return Ok(Self::Files { dir: data_dir.join("outbox-sms"), from });
        };
        let mut url = gateway.url.expose().clone();
        let decode = |s: &str| percent_decode_str(s).decode_utf8_lossy().into_owned();
        let auth = (!url.username().is_empty() || url.password().is_some())
            .then(|| (decode(url.username()), url.password().map(decode)));
        let _ = url.set_username("");
        let _ = url.set_password(None);
        let client = reqwest::Client::builder()
            .timeout(SMS_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("SMS_URL: cannot make an HTTP client: {e}"))?;
        Ok(Self::Http { client, url, auth, from: gateway.from.clone() })
    }

    /// Where SMS go, for the start-up log.
    pub fn describe(&self) -> String {
        match self {
            Self::Http { url, .. } => format!("the SMS gateway at {url}"),
            Self::Files { dir, .. } => format!("files in {}", dir.display()),
        }
    }

    /// Sends message `id`: `body` to `to`. Only a 2xx answer counts as sent.
    pub async fn send(&self, id: i64, to: &str, body: &str) -> Result<(), SendError> {
        match self {
            Self::Http { client, url, auth, from } => {
                let mut request = client.post(url.clone()).form(&[("To", to), ("From", from.as_str()), ("Body", body)]);
                if let Some((user, password)) = auth {
                    request = request.basic_auth(user, password.as_deref());
                }
                let response = request.send().await.map_err(|e| {
                    let what = if e.is_timeout() { "timed out" } else { "failed" };
                    SendError(format!("SMS gateway request {what}: {e}"))
                })?;
                let status = response.status();
                if status.is_success() {
                    return Ok(());
                }
                let text = response.text().await.unwrap_or_default();
                let snippet: String = text.chars().take(200).collect();
                Err(SendError(format!("SMS gateway answered {status}: {snippet}")))
            }
            Self::Files { dir, from } => {
                let content = format!("To: {to}\nFrom: {from}\nMessage: {id}\n\n{body}\n");
                write_file(dir, &format!("{id}.txt"), content.as_bytes()).await
            }
        }
    }
}

/// Writes `name` in `dir` whole or not at all (a temporary file renamed), so a reader never
/// sees half a message and a repeated attempt replaces the file instead of adding one.
async fn write_file(dir: &Path, name: &str, content: &[u8]) -> Result<(), SendError> {
    let io = |e: std::io::Error| SendError(format!("writing {}: {e}", dir.join(name).display()));
    tokio::fs::create_dir_all(dir).await.map_err(io)?;
    let tmp = dir.join(format!(".{name}.tmp"));
    tokio::fs::write(&tmp, content).await.map_err(io)?;
    tokio::fs::rename(&tmp, dir.join(name)).await.map_err(io)
}
