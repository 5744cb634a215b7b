//! How an instance tells people: the mail server and SMS gateway (their URLs are parsed beside
//! their transports, in `transport.rs`), the senders, reminders and the worker's limits.

use std::time::Duration;

use super::transport::{parse_sms_url, parse_smtp_url, SecretUrl, SmsGateway};
use crate::settings::{ConfigError, Reader};

/// The mail server's variable, also named when emails are written as files instead.
pub const SMTP_URL: &str = "SMTP_URL";
/// The SMS gateway's variable, also named when SMS are written as files instead.
pub const SMS_URL: &str = "SMS_URL";
/// The SMS sender's variable, required with `SMS_URL`.
const SMS_FROM: &str = "SMS_FROM";
/// `MAIL_FROM` when unset.
pub const DEFAULT_MAIL_FROM: &str = "clinic-booking <no-reply@localhost>";

/// How an instance tells people.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The mail server (`SMTP_URL`: `smtp://host[:port]`, `smtp://host?tls=required`,
    /// `smtps://user:pass@host[:port]`); `None`: emails are written as files into
    /// `DATA_DIR/outbox-mail/`.
    pub smtp_url: Option<SecretUrl>,
    /// Sender of the emails (`MAIL_FROM`, default `clinic-booking <no-reply@localhost>`); its
    /// domain also names the messages and calendar events (`Message-ID`, `UID`).
    pub mail_from: lettre::message::Mailbox,
    /// The SMS gateway (`SMS_URL` with `SMS_FROM`); `None`: SMS are written as files into
    /// `DATA_DIR/outbox-sms/`.
    pub sms: Option<SmsGateway>,
    /// Sender named in SMS written as files when there is no gateway (`SMS_FROM`, optional then).
    pub sms_from: Option<String>,
    /// How long before a booked appointment its reminder goes out (`REMINDER_BEFORE_SECS`,
    /// default 86400; 0: no reminders).
    pub reminder_before: Duration,
    /// Longest wait between two attempts of a message (`NOTIFY_RETRY_MAX_SECS`, default 300).
    pub retry_max: Duration,
    /// Attempts of a message, the first included, before it is kept as failed
    /// (`NOTIFY_MAX_ATTEMPTS`, default 10).
    pub max_attempts: u32,
    /// How often the message workers look for due messages when no commit woke them
    /// (`NOTIFY_POLL_MS`, default 1000): retries and reminders are due this much late at most.
    pub poll_interval: Duration,
    /// Messages one instance sends at once (`NOTIFY_CONCURRENCY`, default 32: fewer fell
    /// behind a full booking rate on two cores, see docs/benchmarks-history.md, "Sixth pass").
    pub concurrency: usize,
}

impl Settings {
    /// Reads them.
    pub fn from_env(r: &mut Reader) -> Result<Self, ConfigError> {
        let smtp_url = r.string(SMTP_URL).map(|raw| parse_smtp_url(&raw)).transpose()?;
        let mail_from = r.with_or("MAIL_FROM", DEFAULT_MAIL_FROM, parse_mail_from)?;
        let sms_from = r.with(SMS_FROM, parse_sms_from)?;
        let sms = match r.string(SMS_URL) {
            Some(raw) => {
                let url = parse_sms_url(&raw)?;
                let from = sms_from.clone().ok_or_else(|| {
                    ConfigError::new(
                        SMS_FROM,
                        "",
                        "must be set when SMS_URL is: the sender number (E.164) or an alphanumeric sender id",
                    )
                })?;
                Some(SmsGateway { url, from })
            }
            None => None,
        };
        Ok(Self {
            smtp_url,
            mail_from,
            sms,
            sms_from,
            reminder_before: r.secs(
                "REMINDER_BEFORE_SECS",
                86_400,
                ..,
                "a number of seconds (0 switches reminders off)",
            )?,
            retry_max: r.secs("NOTIFY_RETRY_MAX_SECS", 300, 1.., "a number of seconds")?,
            max_attempts: r.number("NOTIFY_MAX_ATTEMPTS", 10, 1.., "a number of attempts")?,
            poll_interval: r.millis("NOTIFY_POLL_MS", 1000, 10.., "a number of milliseconds")?,
            concurrency: r.number("NOTIFY_CONCURRENCY", 32, 1.., "a number of messages")?,
        })
    }
}

/// `MAIL_FROM`: a mailbox (`Name <user@domain>` or `user@domain`) as lettre parses it.
fn parse_mail_from(raw: &str) -> Result<lettre::message::Mailbox, String> {
    raw.trim()
        .parse::<lettre::message::Mailbox>()
        .map_err(|e| format!("expected a mailbox such as {DEFAULT_MAIL_FROM:?} ({e})"))
}

/// `SMS_FROM`: an E.164 number or an alphanumeric sender id (1–11 letters, digits or spaces,
/// with at least one letter), the two forms SMS gateways take.
fn parse_sms_from(raw: &str) -> Result<String, String> {
    let value = raw.trim();
    let e164 = value
        .strip_prefix('+')
        .is_some_and(|d| (8..=15).contains(&d.len()) && d.bytes().all(|b| b.is_ascii_digit()) && !d.starts_with('0'));
    let alphanumeric = (1..=11).contains(&value.len())
        && value.bytes().all(|b| b.is_ascii_alphanumeric() || b == b' ')
        && value.bytes().any(|b| b.is_ascii_alphabetic());
    if e164 || alphanumeric {
        return Ok(value.to_owned());
    }
    Err("expected an E.164 number (+ and 8 to 15 digits) or an alphanumeric sender id of up to 11 characters".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::config;

    #[test]
    fn message_settings() -> Result<(), ConfigError> {
        let c = config(&[])?.notify;
        assert!(c.smtp_url.is_none() && c.sms.is_none());
        assert_eq!(c.mail_from.email.domain(), "localhost");
        assert_eq!(c.reminder_before, Duration::from_secs(86_400));
        assert_eq!(c.retry_max, Duration::from_secs(300));
        assert_eq!(c.max_attempts, 10);
        let c = config(&[
            ("SMTP_URL", "smtps://user:p%40ss@mail.example.org"),
            ("MAIL_FROM", "Clinic <hello@clinic.example>"),
            ("SMS_URL", "https://AC1:token@sms.example.org/2010-04-01/Accounts/AC1/Messages.json"),
            ("SMS_FROM", "+15005550006"),
            ("REMINDER_BEFORE_SECS", "0"),
        ])?
        .notify;
        let smtp = c.smtp_url.as_ref().map(SecretUrl::redacted).unwrap_or_default();
        assert_eq!(smtp, "smtps://mail.example.org");
        assert!(!format!("{c:?}").contains("p%40ss") && !format!("{c:?}").contains("token"));
        assert_eq!(c.sms.map(|s| s.from).as_deref(), Some("+15005550006"));
        assert!(c.reminder_before.is_zero());
        assert!(config(&[("SMTP_URL", "smtp://127.0.0.1:2525")]).is_ok());
        assert!(config(&[("SMTP_URL", "smtp://relay.example.org?tls=required")]).is_ok());
        assert!(config(&[("SMTP_URL", "smtp://u:p@relay.example.org?tls=required")]).is_ok());
        assert!(config(&[("SMTP_URL", "smtp://u:p@127.0.0.1:2525")]).is_ok(), "a local relay");
        assert!(config(&[("SMS_URL", "http://127.0.0.1:9/sms"), ("SMS_FROM", "Clinic")]).is_ok());
        for (vars, var) in [
            (vec![("SMTP_URL", "mailto:x@y")], "SMTP_URL"),
            (vec![("SMTP_URL", "smtp://u:p@relay.example.org")], "SMTP_URL"),
            (vec![("SMTP_URL", "smtp://relay.example.org?tls=sometimes")], "SMTP_URL"),
            (vec![("MAIL_FROM", "not an address")], "MAIL_FROM"),
            (vec![("SMS_URL", "https://sms.example.org")], "SMS_FROM"),
            (vec![("SMS_URL", "http://sms.example.org"), ("SMS_FROM", "+15005550006")], "SMS_URL"),
            (vec![("SMS_FROM", "+0123")], "SMS_FROM"),
            (vec![("NOTIFY_MAX_ATTEMPTS", "0")], "NOTIFY_MAX_ATTEMPTS"),
            (vec![("NOTIFY_RETRY_MAX_SECS", "0")], "NOTIFY_RETRY_MAX_SECS"),
            (vec![("REMINDER_BEFORE_SECS", "-5")], "REMINDER_BEFORE_SECS"),
        ] {
            let err = config(&vars).unwrap_err();
            assert_eq!(err.var, var, "{vars:?}");
            assert!(!err.to_string().contains(":p@"), "the password is hidden: {err}");
        }
        Ok(())
    }
}
