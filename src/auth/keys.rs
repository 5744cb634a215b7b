//! A provider's signing keys: fetched from its key set (`jwks_uri`, from discovery unless
//! configured), kept, and fetched again when a token names a key the set lacks — at most once
//! every [`REFETCH_EVERY`] whatever arrives, one fetch in flight. A failed fetch keeps the last
//! good set. Only `https://` (or loopback `http://`) is fetched, with a timeout and a size cap.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError, RwLock},
    time::{Duration, Instant},
};

use jsonwebtoken::{
    jwk::{AlgorithmParameters, EllipticCurve, Jwk, PublicKeyUse},
    Algorithm, DecodingKey,
};
use serde::Deserialize;

use super::settings::{is_loopback, IssuerSettings};

/// Least time between two fetches of one provider's keys asked for by tokens.
pub const REFETCH_EVERY: Duration = Duration::from_secs(30);
/// Longest wait for a provider's answer.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest discovery document or key set read.
const MAX_BYTES: usize = 256 * 1024;
/// How often a provider's keys are fetched again while it is healthy (new keys arrive before
/// the tokens signed by them).
const REFRESH_HEALTHY: Duration = Duration::from_secs(15 * 60);

/// The type of a verification key, which decides the algorithms it may verify.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KeyKind {
    Rsa,
    P256,
    P384,
    Ed25519,
}

impl KeyKind {
    fn verifies(self, alg: Algorithm) -> bool {
        use Algorithm::*;
        match self {
            KeyKind::Rsa => matches!(alg, RS256 | RS384 | RS512 | PS256 | PS384 | PS512),
            KeyKind::P256 => alg == ES256,
            KeyKind::P384 => alg == ES384,
            KeyKind::Ed25519 => alg == EdDSA,
        }
    }
}

/// One usable key of a set.
pub struct Key {
    kind: KeyKind,
    /// The key's own `alg`, when it names one: then only that algorithm.
    alg: Option<Algorithm>,
    /// The key itself.
    pub decoding: DecodingKey,
}

impl Key {
    /// Whether a token signed with `alg` may be verified with this key.
    pub fn verifies(&self, alg: Algorithm) -> bool {
        self.kind.verifies(alg) && self.alg.is_none_or(|own| own == alg)
    }

    /// The key of `raw` (a JWK), unless it is one this service never verifies with.
    fn from_json(raw: serde_json::Value) -> Option<(String, Self)> {
        // The JWK's `alg` (a signing one, or the key is not for tokens: `RSA-OAEP`, …).
        let alg = match raw.get("alg") {
            None => None,
            Some(a) => Some(a.as_str()?.parse::<Algorithm>().ok()?),
        };
        let jwk: Jwk = serde_json::from_value(raw).ok()?;
        Self::from_jwk(&jwk, alg)
    }

    fn from_jwk(jwk: &Jwk, alg: Option<Algorithm>) -> Option<(String, Self)> {
        let kid = jwk.common.key_id.clone()?;
        if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
            return None;
        }
        let kind = match &jwk.algorithm {
            AlgorithmParameters::RSA(_) => KeyKind::Rsa,
            AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P256 => KeyKind::P256,
            AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P384 => KeyKind::P384,
            AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => KeyKind::Ed25519,
            // Symmetric keys (`oct`) and anything else never verify a provider's token.
            _ => return None,
        };
        let decoding = DecodingKey::from_jwk(jwk).ok()?;
        Some((kid, Self { kind, alg, decoding }))
    }
}

/// What a provider's discovery document says that the service uses.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Discovery {
    /// Its issuer (must be the configured one).
    pub issuer: String,
    /// Where its keys are.
    pub jwks_uri: Option<String>,
    /// Where users sign in.
    pub authorization_endpoint: Option<String>,
    /// Where clients get tokens.
    pub token_endpoint: Option<String>,
}

/// Why a fetch failed (logged and counted, never shown to a client).
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The address is not one keys are fetched from.
    #[error("refusing to fetch {0}: https only, except loopback addresses")]
    Scheme(String),
    /// Transport failure, timeout or a non-2xx answer.
    #[error("fetching {url}: {reason}")]
    Http {
        /// What was fetched.
        url: String,
        /// Why it failed.
        reason: String,
    },
    /// An answer over the size cap.
    #[error("{0} answered more than {MAX_BYTES} bytes")]
    TooLarge(String),
    /// Not the JSON expected.
    #[error("{url} is malformed: {reason}")]
    Malformed {
        /// What was fetched.
        url: String,
        /// What was wrong with it.
        reason: String,
    },
}

impl FetchError {
    /// The `outcome` label of the fetch metric.
    fn outcome(&self) -> &'static str {
        match self {
            FetchError::Scheme(_) => "refused",
            FetchError::Http { .. } => "unreachable",
            FetchError::TooLarge(_) => "too_large",
            FetchError::Malformed { .. } => "malformed",
        }
    }
}

#[derive(Default)]
struct Known {
    /// The last good key set, by `kid`.
    keys: Option<Arc<HashMap<String, Key>>>,
    /// The discovery document, once read.
    discovery: Option<Discovery>,
    /// Whether the last fetch succeeded.
    healthy: bool,
}

/// One provider's key set and how it is kept.
pub struct KeySet {
    issuer: String,
    configured_jwks: Option<url::Url>,
    discovery_url: String,
    client: reqwest::Client,
    known: RwLock<Known>,
    /// Held while a fetch runs: tokens that need one wait for the one in flight.
    in_flight: tokio::sync::Mutex<()>,
    last_fetch: Mutex<Option<Instant>>,
}

impl KeySet {
    /// The key set of `provider` (nothing fetched yet).
    pub fn new(provider: &IssuerSettings, client: reqwest::Client) -> Self {
        Self {
            issuer: provider.issuer.clone(),
            configured_jwks: provider.jwks_uri.clone(),
            discovery_url: provider.discovery_url(),
            client,
            known: RwLock::default(),
            in_flight: tokio::sync::Mutex::new(()),
            last_fetch: Mutex::new(None),
        }
    }

    /// The HTTP client key fetches use: a timeout, no redirects (a redirect could leave https).
    pub fn client() -> Result<reqwest::Client, reqwest::Error> {
        reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .connect_timeout(FETCH_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
    }

    /// Whether the last fetch of this provider's keys succeeded.
    pub fn healthy(&self) -> bool {
        self.known.read().unwrap_or_else(PoisonError::into_inner).healthy
    }

    /// The provider's discovery document, once fetched.
    pub fn discovery(&self) -> Option<Discovery> {
        self.known.read().unwrap_or_else(PoisonError::into_inner).discovery.clone()
    }

    fn current(&self) -> Option<Arc<HashMap<String, Key>>> {
        self.known.read().unwrap_or_else(PoisonError::into_inner).keys.clone()
    }

    /// The key named `kid`: from the kept set, else after a fetch (when none ran in the last
    /// [`REFETCH_EVERY`]; a token arriving while one runs waits for it).
    pub async fn key(&self, kid: &str) -> Option<Arc<HashMap<String, Key>>> {
        if let Some(set) = self.current().filter(|s| s.contains_key(kid)) {
            return Some(set);
        }
        let _turn = self.in_flight.lock().await;
        // The fetch this token waited for may have brought the key.
        if let Some(set) = self.current().filter(|s| s.contains_key(kid)) {
            return Some(set);
        }
        if self.fetched_within(REFETCH_EVERY) {
            return None;
        }
        self.fetch_now().await;
        self.current().filter(|s| s.contains_key(kid))
    }

    fn fetched_within(&self, period: Duration) -> bool {
        self.last_fetch.lock().unwrap_or_else(PoisonError::into_inner).is_some_and(|t| t.elapsed() < period)
    }

    /// Fetches the set once, keeping the last good one on failure; the caller holds `in_flight`.
    async fn fetch_now(&self) {
        *self.last_fetch.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        let outcome = self.fetch().await;
        let mut known = self.known.write().unwrap_or_else(PoisonError::into_inner);
        match outcome {
            Ok((keys, discovery)) => {
                metrics::counter!("auth_key_fetches_total", "issuer" => self.issuer.clone(), "outcome" => "ok")
                    .increment(1);
                tracing::info!(issuer = %self.issuer, keys = keys.len(), "fetched the provider's keys");
                known.keys = Some(Arc::new(keys));
                if discovery.is_some() {
                    known.discovery = discovery;
                }
                known.healthy = true;
            }
            Err(e) => {
                metrics::counter!("auth_key_fetches_total", "issuer" => self.issuer.clone(), "outcome" => e.outcome())
                    .increment(1);
                tracing::warn!(issuer = %self.issuer, error = %e, "cannot fetch the provider's keys; keeping the last good set");
                known.healthy = false;
            }
        }
    }

    async fn fetch(&self) -> Result<(HashMap<String, Key>, Option<Discovery>), FetchError> {
        let known_discovery = self.discovery();
        let (jwks_uri, discovery) = match (&self.configured_jwks, known_discovery) {
            (Some(uri), known) => {
                // Discovery is only needed for the apps' SMART document then: best effort.
                let discovery = match known {
                    Some(d) => Some(d),
                    None => self.discover().await.ok(),
                };
                (uri.to_string(), discovery)
            }
            (None, Some(d)) => (d.jwks_uri.clone().unwrap_or_default(), Some(d)),
            (None, None) => {
                let d = self.discover().await?;
                (d.jwks_uri.clone().unwrap_or_default(), Some(d))
            }
        };
        let body = self.get(&jwks_uri).await?;
        let keys = parse_key_set(&body).map_err(|reason| FetchError::Malformed { url: jwks_uri, reason })?;
        Ok((keys, discovery))
    }

    async fn discover(&self) -> Result<Discovery, FetchError> {
        let url = self.discovery_url.clone();
        let body = self.get(&url).await?;
        let d: Discovery = serde_json::from_slice(&body)
            .map_err(|e| FetchError::Malformed { url: url.clone(), reason: e.to_string() })?;
        if d.issuer != self.issuer {
            return Err(FetchError::Malformed { url, reason: format!("names issuer {:?}", d.issuer) });
        }
        if d.jwks_uri.is_none() && self.configured_jwks.is_none() {
            return Err(FetchError::Malformed { url, reason: "has no jwks_uri".into() });
        }
        Ok(d)
    }

    /// GETs `raw` (https, or http on loopback), reading at most [`MAX_BYTES`].
    async fn get(&self, raw: &str) -> Result<Vec<u8>, FetchError> {
        let url = url::Url::parse(raw).map_err(|_| FetchError::Scheme(raw.to_owned()))?;
        if !(url.scheme() == "https" || (url.scheme() == "http" && is_loopback(&url))) {
            return Err(FetchError::Scheme(raw.to_owned()));
        }
        let http = |reason: String| FetchError::Http { url: raw.to_owned(), reason };
        let mut resp = self
            .client
            .get(url)
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| http(e.to_string()))?;
        if !resp.status().is_success() {
            return Err(http(format!("status {}", resp.status())));
        }
        if resp.content_length().is_some_and(|n| n > MAX_BYTES as u64) {
            return Err(FetchError::TooLarge(raw.to_owned()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| http(e.to_string()))? {
            if body.len() + chunk.len() > MAX_BYTES {
                return Err(FetchError::TooLarge(raw.to_owned()));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// Keeps the set fresh in the background: fetched at once, again soon after a failure
    /// (backing off up to [`REFETCH_EVERY`]), and now and then while healthy. Ends with `stop`.
    pub async fn keep(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let mut retry = Duration::from_secs(1);
        loop {
            {
                let _turn = self.in_flight.lock().await;
                // A token's fetch may have just run.
                if !(self.healthy() && self.fetched_within(REFETCH_EVERY)) {
                    self.fetch_now().await;
                }
            }
            let wait = if self.healthy() {
                retry = Duration::from_secs(1);
                REFRESH_HEALTHY
            } else {
                let wait = retry;
                retry = (retry * 2).min(REFETCH_EVERY);
                wait
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                _ = stop.changed() => return,
            }
            if *stop.borrow() {
                return;
            }
        }
    }
}

/// The usable keys of a JWK set; keys this service cannot use are skipped, not fatal.
fn parse_key_set(body: &[u8]) -> Result<HashMap<String, Key>, String> {
    #[derive(Deserialize)]
    struct RawSet {
        keys: Vec<serde_json::Value>,
    }
    let raw: RawSet = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    Ok(raw.keys.into_iter().filter_map(Key::from_json).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symmetric_encryption_and_broken_keys_are_skipped() {
        let set = br#"{"keys":[
            {"kty":"oct","kid":"h","k":"c2VjcmV0"},
            {"kty":"EC","kid":"e","crv":"P-256","use":"enc","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
            {"kty":"EC","kid":"s","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
            {"kty":"RSA","kid":"broken"},
            {"kty":"XYZ","kid":"odd"}
        ]}"#;
        let keys = parse_key_set(set).unwrap_or_default();
        assert_eq!(keys.keys().collect::<Vec<_>>(), vec!["s"]);
        let key = &keys["s"];
        assert!(key.verifies(Algorithm::ES256));
        assert!(!key.verifies(Algorithm::RS256) && !key.verifies(Algorithm::HS256) && !key.verifies(Algorithm::ES384));
        assert!(parse_key_set(b"[]").is_err() && parse_key_set(b"{").is_err());
    }
}
