//! The HTTP layer's settings: where it listens, its request limits and which browser origins
//! may call it.

use std::net::SocketAddr;

use super::{cors::AllowedOrigins, HttpLimits};
use crate::settings::{ConfigError, Reader};

/// The HTTP layer's settings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Address the server listens on (`BIND_ADDR`, default `127.0.0.1:8080`; port 0 picks a
    /// free port).
    pub bind_addr: SocketAddr,
    /// Request limits (`MAX_BODY_BYTES`, `MAX_BATCH_OPERATIONS`, `WS_INIT_TIMEOUT_MS`,
    /// `WS_MAX_SUBSCRIPTIONS`).
    pub limits: HttpLimits,
    /// Origins whose pages may call the API and open WebSockets (`CORS_ALLOWED_ORIGINS`; default
    /// none, or any loopback `http` origin in single-process dev mode).
    pub origins: AllowedOrigins,
}

impl Settings {
    /// Reads them; `single_process` (dev mode) chooses the default origins.
    pub fn from_env(r: &mut Reader, single_process: bool) -> Result<Self, ConfigError> {
        // The error shows the one bad entry of the list.
        let origins = r.with_named("CORS_ALLOWED_ORIGINS", |var, value| {
            AllowedOrigins::parse(value).map_err(|(entry, reason)| ConfigError::new(var, entry, reason))
        })?;
        let origins =
            origins.unwrap_or(if single_process { AllowedOrigins::Loopback } else { AllowedOrigins::List(Vec::new()) });
        let default_addr = SocketAddr::from(([127, 0, 0, 1], 8080));
        Ok(Self {
            bind_addr: r.parse("BIND_ADDR", default_addr, "an address like 127.0.0.1:8080")?,
            limits: HttpLimits {
                max_body_bytes: r.number("MAX_BODY_BYTES", 256 * 1024, 1024.., "a number of bytes")?,
                max_batch: r.number("MAX_BATCH_OPERATIONS", 10, 1.., "a count")?,
                ws_init_timeout: r.millis("WS_INIT_TIMEOUT_MS", 10_000, 1.., "a number of milliseconds")?,
                ws_max_subscriptions: r.number("WS_MAX_SUBSCRIPTIONS", 100, 1.., "a count")?,
            },
            origins,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::config;

    #[test]
    fn cors_origins_default_by_mode_and_are_validated() -> Result<(), ConfigError> {
        assert_eq!(config(&[])?.http.origins, AllowedOrigins::Loopback);
        let production = [("DATABASE_URL", "postgres://x@localhost/db"), ("JWT_SECRET", "0123456789abcdef")];
        assert!(config(&production)?.http.origins.is_none());
        let c = config(&[("CORS_ALLOWED_ORIGINS", " https://App.Example.com:443, http://localhost:3000,,")])?;
        assert_eq!(
            c.http.origins,
            AllowedOrigins::List(vec!["https://app.example.com".into(), "http://localhost:3000".into()])
        );
        assert_eq!(config(&[("CORS_ALLOWED_ORIGINS", "*")])?.http.origins, AllowedOrigins::Any);
        assert_eq!(
            config(&[("CORS_ALLOWED_ORIGINS", "http://[::1]:8080")])?.http.origins,
            AllowedOrigins::List(vec!["http://[::1]:8080".into()])
        );
        for bad in [
            "app.example.com",
            "https://app.example.com/",
            "https://app.example.com/path",
            "https://user@app.example.com",
            "https://app.example.com:0",
            "https://app.example.com:99999",
            "https://app.example.com:",
            "https://:8080",
            "https://exa mple.com",
            "https://[::1",
            "https://[nope]",
            "1http://x",
            "https://ok.example.com, *",
        ] {
            let err = config(&[("CORS_ALLOWED_ORIGINS", bad)]).unwrap_err();
            assert_eq!(err.var, "CORS_ALLOWED_ORIGINS", "{bad}");
            assert!(err.to_string().starts_with("CORS_ALLOWED_ORIGINS="), "{err}");
        }
        Ok(())
    }
}
