//! The signing secret's setting (`JWT_SECRET`).

use crate::settings::{ConfigError, Reader};

/// The settings of bearer tokens.
#[derive(Clone, Debug)]
pub struct Settings {
    /// HS256 secret for bearer tokens (`JWT_SECRET`, at least 16 bytes); `None` only in
    /// single-process dev mode, which makes its own (a rule [`crate::config::Config`] checks).
    pub jwt_secret: Option<Secret>,
}

/// The variable of the signing secret, also named where its absence is refused.
pub const JWT_SECRET: &str = "JWT_SECRET";

impl Settings {
    /// Reads them.
    pub fn from_env(r: &mut Reader) -> Result<Self, ConfigError> {
        let jwt_secret = r.string(JWT_SECRET).map(Secret::new);
        if jwt_secret.as_ref().is_some_and(|s| s.expose().len() < 16) {
            return Err(ConfigError::new(JWT_SECRET, "(hidden)", "must be at least 16 bytes long"));
        }
        Ok(Self { jwt_secret })
    }
}

/// The text of the JWT signing secret; never printed.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret's bytes, for signing and verifying.
    pub fn expose(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}
