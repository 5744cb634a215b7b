//! The asynchronous authenticator: a bearer token is routed by its `iss` to `JWT_SECRET` (no
//! `iss`, or `clinic-booking`) or to the trusted provider with that exact issuer; anything else
//! is refused. Verified provider tokens are remembered, never past their expiry.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
};

use base64::Engine;
use serde::Deserialize;

use super::{
    keys::{Discovery, KeySet},
    provider::{Provider, Refusal},
    settings::{IssuerSettings, OWN_ISSUER},
    Caller, TokenError, TokenIssuer,
};
use crate::db::identities::PatientLinks;

/// Provider tokens verified recently, kept before the map is emptied (as for `JWT_SECRET`'s).
const VERIFIED_MAX: usize = 10_000;

/// Verifies every bearer token the service accepts.
pub struct Authenticator {
    local: Option<TokenIssuer>,
    providers: Vec<Arc<Provider>>,
    links: Option<Arc<dyn PatientLinks>>,
    /// Provider tokens whose signature and claims were verified, with their caller (whose
    /// `expires_at` bounds how long it is kept).
    verified: Mutex<HashMap<String, Caller>>,
}

/// A provider's state, for `/readyz`.
#[derive(Clone, Debug)]
pub struct IssuerState {
    /// Its issuer.
    pub issuer: String,
    /// Whether its keys were fetched at the last try.
    pub reachable: bool,
}

/// What the SMART configuration document says of the first provider.
#[derive(Clone, Debug)]
pub struct SmartProvider {
    /// Its issuer.
    pub issuer: String,
    /// Where its keys are.
    pub jwks_uri: Option<String>,
    /// Its discovery document's endpoints, once fetched.
    pub discovery: Option<Discovery>,
}

impl Authenticator {
    /// An authenticator of `JWT_SECRET` tokens (when `local` is given) and of `issuers`'
    /// tokens, whose keys [`Authenticator::start`] begins fetching.
    pub fn new(local: Option<TokenIssuer>, issuers: &[IssuerSettings]) -> Result<Self, reqwest::Error> {
        let client = KeySet::client()?;
        let providers = issuers
            .iter()
            .map(|p| Arc::new(Provider { settings: p.clone(), keys: Arc::new(KeySet::new(p, client.clone())) }))
            .collect();
        Ok(Self { local, providers, links: None, verified: Mutex::default() })
    }

    /// Links `(iss, sub)` to patients through `links` (for providers with `patients: "link"`).
    pub fn with_links(mut self, links: Arc<dyn PatientLinks>) -> Self {
        self.links = Some(links);
        self
    }

    /// Starts keeping each provider's keys (fetched at once, without holding up the start).
    pub fn start(&self, stop: &tokio::sync::watch::Receiver<bool>) -> Vec<tokio::task::JoinHandle<()>> {
        self.providers.iter().map(|p| tokio::spawn(Arc::clone(&p.keys).keep(stop.clone()))).collect()
    }

    /// The service's own token issuer, when `JWT_SECRET` (or the dev secret) is set.
    pub fn local(&self) -> Option<&TokenIssuer> {
        self.local.as_ref()
    }

    /// Each provider and whether its keys could be fetched, in `AUTH_ISSUERS` order.
    pub fn issuers(&self) -> Vec<IssuerState> {
        self.providers
            .iter()
            .map(|p| IssuerState { issuer: p.settings.issuer.clone(), reachable: p.keys.healthy() })
            .collect()
    }

    /// The first provider of `AUTH_ISSUERS`, for the SMART configuration document.
    pub fn smart_provider(&self) -> Option<SmartProvider> {
        let p = self.providers.first()?;
        let discovery = p.keys.discovery();
        let jwks_uri = p
            .settings
            .jwks_uri
            .as_ref()
            .map(ToString::to_string)
            .or_else(|| discovery.as_ref().and_then(|d| d.jwks_uri.clone()));
        Some(SmartProvider { issuer: p.settings.issuer.clone(), jwks_uri, discovery })
    }

    /// Verifies a token and says who it names; every refusal is counted by reason.
    pub async fn verify(&self, token: &str) -> Result<Caller, Refusal> {
        let result = self.verify_uncounted(token).await;
        if let Err(reason) = result {
            metrics::counter!("auth_tokens_refused_total", "reason" => reason.label()).increment(1);
        }
        result
    }

    async fn verify_uncounted(&self, token: &str) -> Result<Caller, Refusal> {
        let issuer = unverified_issuer(token)?;
        let provider = match issuer.as_deref() {
            None | Some(OWN_ISSUER) => return self.verify_local(token),
            Some(iss) => self.providers.iter().find(|p| p.settings.issuer == iss).ok_or(Refusal::UnknownIssuer)?,
        };
        let now = chrono::Utc::now().timestamp();
        if let Some(caller) = self.remembered(token, now) {
            return Ok(caller);
        }
        let identity = provider.verify(token, now).await?;
        let mut caller = identity.caller;
        if identity.needs_link {
            let links = self.links.as_ref().ok_or(Refusal::Store)?;
            let issuer = caller.issuer.as_deref().unwrap_or_default();
            let patient = links.patient_for(issuer, &caller.sub).await.map_err(|e| {
                tracing::error!(error = %e, "cannot read or make a patient's identity link");
                Refusal::Store
            })?;
            caller.patient_id = Some(patient);
        }
        self.remember(token, &caller);
        Ok(caller)
    }

    fn verify_local(&self, token: &str) -> Result<Caller, Refusal> {
        let local = self.local.as_ref().ok_or(Refusal::UnknownIssuer)?;
        local.verify(token).map_err(|e| match e {
            TokenError::Invalid(e) => Refusal::from(e),
            TokenError::Claims(_) => Refusal::Claims,
        })
    }

    fn remembered(&self, token: &str, now: i64) -> Option<Caller> {
        let mut verified = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
        match verified.get(token) {
            Some(caller) if caller.expires_at.is_some_and(|t| t >= now) => Some(caller.clone()),
            Some(_) => {
                verified.remove(token);
                None
            }
            None => None,
        }
    }

    fn remember(&self, token: &str, caller: &Caller) {
        let mut verified = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
        if verified.len() >= VERIFIED_MAX {
            verified.clear();
        }
        verified.insert(token.to_owned(), caller.clone());
    }
}

/// The `iss` a token claims, read before anything is verified (it only picks the keys).
fn unverified_issuer(token: &str) -> Result<Option<String>, Refusal> {
    #[derive(Deserialize)]
    struct Iss {
        iss: Option<serde_json::Value>,
    }
    let mut parts = token.split('.');
    let (Some(_), Some(payload), Some(_), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err(Refusal::Malformed);
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).map_err(|_| Refusal::Malformed)?;
    let claims: Iss = serde_json::from_slice(&bytes).map_err(|_| Refusal::Malformed)?;
    match claims.iss {
        None => Ok(None),
        Some(serde_json::Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(Refusal::Malformed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(json: &str) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
    }

    #[test]
    fn the_issuer_is_read_from_the_payload() {
        let t = |payload: &str| format!("{}.{}.sig", seg(r#"{"alg":"RS256"}"#), seg(payload));
        assert_eq!(unverified_issuer(&t(r#"{"sub":"1"}"#)), Ok(None));
        assert_eq!(unverified_issuer(&t(r#"{"iss":"https://a"}"#)), Ok(Some("https://a".into())));
        assert_eq!(unverified_issuer(&t(r#"{"iss":5}"#)), Err(Refusal::Malformed));
        assert_eq!(unverified_issuer("a.b"), Err(Refusal::Malformed));
        assert_eq!(unverified_issuer("a.!!.c"), Err(Refusal::Malformed));
    }

    #[tokio::test]
    async fn an_unknown_issuer_or_a_missing_secret_is_refused() {
        let auth = Authenticator::new(None, &[]).map_err(|e| e.to_string());
        let Ok(auth) = auth else { panic!("client") };
        let t = |payload: &str| format!("{}.{}.sig", seg(r#"{"alg":"HS256"}"#), seg(payload));
        assert_eq!(auth.verify(&t(r#"{"iss":"https://x"}"#)).await, Err(Refusal::UnknownIssuer));
        assert_eq!(auth.verify(&t(r#"{"sub":"1"}"#)).await, Err(Refusal::UnknownIssuer));
    }
}
