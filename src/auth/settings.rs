//! The settings of bearer tokens: the signing secret (`JWT_SECRET`) and the trusted identity
//! providers (`AUTH_ISSUERS`).

use std::collections::{HashMap, HashSet};

use jsonwebtoken::Algorithm;
use serde::Deserialize;

use super::Role;
use crate::settings::{ConfigError, Reader};

/// The settings of bearer tokens.
#[derive(Clone, Debug)]
pub struct Settings {
    /// HS256 secret for bearer tokens (`JWT_SECRET`, at least 16 bytes); `None` in
    /// single-process dev mode, which makes its own, or when providers are trusted (a rule
    /// [`crate::config::Config`] checks).
    pub jwt_secret: Option<Secret>,
    /// The trusted OpenID Connect providers (`AUTH_ISSUERS`), in the order given.
    pub issuers: Vec<IssuerSettings>,
}

/// The variable of the signing secret, also named where its absence is refused.
pub const JWT_SECRET: &str = "JWT_SECRET";
/// The variable of the trusted providers.
pub const AUTH_ISSUERS: &str = "AUTH_ISSUERS";
/// The `iss` of the service's own (`JWT_SECRET`) tokens, which no provider may take.
pub const OWN_ISSUER: &str = "clinic-booking";

impl Settings {
    /// Reads them.
    pub fn from_env(r: &mut Reader) -> Result<Self, ConfigError> {
        let jwt_secret = r.string(JWT_SECRET).map(Secret::new);
        if jwt_secret.as_ref().is_some_and(|s| s.expose().len() < 16) {
            return Err(ConfigError::new(JWT_SECRET, "(hidden)", "must be at least 16 bytes long"));
        }
        let issuers = r.with(AUTH_ISSUERS, parse_issuers)?.unwrap_or_default();
        Ok(Self { jwt_secret, issuers })
    }
}

/// Where a patient token's patient comes from (`patients`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatientSource {
    /// The patient claim (or `fhirUser`) only.
    Claim,
    /// The claim, else the patient linked to `(iss, sub)`, made on first use.
    Link,
}

/// One trusted provider, as `AUTH_ISSUERS` describes it (the contract's table).
#[derive(Clone, Debug)]
pub struct IssuerSettings {
    /// The exact `iss` of its tokens.
    pub issuer: String,
    /// Where its keys are; `None`: from its discovery document.
    pub jwks_uri: Option<url::Url>,
    /// A token must name one of these in `aud`.
    pub audience: Vec<String>,
    /// The signature algorithms accepted (asymmetric only).
    pub algorithms: Vec<Algorithm>,
    /// Clock skew allowed on `exp` and `nbf`, in seconds.
    pub leeway_seconds: u64,
    /// The claim (a dotted path) holding the role or roles.
    pub role_claim: String,
    /// Claim value → role.
    pub roles: HashMap<String, Role>,
    /// The role of a machine client's token that carries no mapped role.
    pub client_roles: Role,
    /// The claim holding the patient id.
    pub patient_claim: String,
    /// The claim holding a doctor's id.
    pub doctor_claim: String,
    /// Where a patient token's patient comes from.
    pub patients: PatientSource,
}

impl IssuerSettings {
    /// The discovery document's address: `{issuer}/.well-known/openid-configuration`.
    pub fn discovery_url(&self) -> String {
        format!("{}/.well-known/openid-configuration", self.issuer.trim_end_matches('/'))
    }
}

/// One object of `AUTH_ISSUERS` as written, every key but `issuer` and `audience` optional.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIssuer {
    issuer: String,
    jwks_uri: Option<String>,
    audience: OneOrMany,
    #[serde(default = "default_algorithms")]
    algorithms: Vec<String>,
    #[serde(default = "default_leeway")]
    leeway_seconds: u64,
    #[serde(default = "default_role_claim")]
    role_claim: String,
    #[serde(default = "default_roles")]
    roles: HashMap<String, String>,
    #[serde(default = "default_client_roles")]
    client_roles: String,
    #[serde(default = "default_patient_claim")]
    patient_claim: String,
    #[serde(default = "default_doctor_claim")]
    doctor_claim: String,
    #[serde(default = "default_patients")]
    patients: String,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

fn default_algorithms() -> Vec<String> {
    ["RS256", "ES256", "EdDSA"].map(str::to_owned).to_vec()
}
fn default_leeway() -> u64 {
    30
}
fn default_role_claim() -> String {
    "role".into()
}
fn default_roles() -> HashMap<String, String> {
    ["patient", "doctor", "admin", "partner"].iter().map(|r| ((*r).to_owned(), (*r).to_owned())).collect()
}
fn default_client_roles() -> String {
    "partner".into()
}
fn default_patient_claim() -> String {
    "patient".into()
}
fn default_doctor_claim() -> String {
    "doctor_id".into()
}
fn default_patients() -> String {
    "link".into()
}

/// Whether `url` names this machine (the only place plain `http` is fetched from).
pub fn is_loopback(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// A URL keys may be fetched from: `https`, or `http` on a loopback address.
fn fetchable(what: &str, raw: &str) -> Result<url::Url, String> {
    let url = url::Url::parse(raw).map_err(|e| format!("{what} {raw:?} is not a URL: {e}"))?;
    match url.scheme() {
        "https" => Ok(url),
        "http" if is_loopback(&url) => Ok(url),
        _ => Err(format!("{what} {raw:?} must be https:// (http:// only on a loopback address)")),
    }
}

/// Parses and checks `AUTH_ISSUERS`; the `Err` is the reason, naming the provider at fault.
fn parse_issuers(raw: &str) -> Result<Vec<IssuerSettings>, String> {
    let list: Vec<RawIssuer> =
        serde_json::from_str(raw).map_err(|e| format!("expected a JSON array of provider objects: {e}"))?;
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(list.len());
    for (i, p) in list.into_iter().enumerate() {
        let at = |reason: String| format!("provider {i} ({:?}): {reason}", p.issuer);
        let issuer = check_issuer(&p).map_err(at)?;
        if !seen.insert(issuer.clone()) {
            return Err(at("the same issuer is listed twice".into()));
        }
        out.push(issuer_settings(p, issuer).map_err(|reason| format!("provider {i}: {reason}"))?);
    }
    Ok(out)
}

fn check_issuer(p: &RawIssuer) -> Result<String, String> {
    if p.issuer == OWN_ISSUER {
        return Err(format!("issuer {OWN_ISSUER:?} is the service's own (JWT_SECRET) tokens"));
    }
    let url = fetchable("issuer", &p.issuer)?;
    // A fragment would make the issuer ambiguous in the identities built from it (`#`).
    if url.fragment().is_some() || p.issuer.contains('#') {
        return Err("an issuer has no #fragment".into());
    }
    Ok(p.issuer.clone())
}

fn issuer_settings(p: RawIssuer, issuer: String) -> Result<IssuerSettings, String> {
    let jwks_uri = p.jwks_uri.as_deref().map(|u| fetchable("jwks_uri", u)).transpose()?;
    let audience = match p.audience {
        OneOrMany::One(a) => vec![a],
        OneOrMany::Many(a) => a,
    };
    if audience.is_empty() || audience.iter().any(String::is_empty) {
        return Err("audience must name at least one non-empty audience".into());
    }
    let mut algorithms = Vec::new();
    for name in &p.algorithms {
        let alg: Algorithm = name.parse().map_err(|_| format!("unknown algorithm {name:?}"))?;
        if matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512) {
            return Err(format!("algorithm {name:?} is never accepted from a provider (asymmetric only)"));
        }
        algorithms.push(alg);
    }
    if algorithms.is_empty() {
        return Err("algorithms must name at least one algorithm".into());
    }
    if p.leeway_seconds > 300 {
        return Err("leeway_seconds must be 0 to 300".into());
    }
    let role = |what: &str, v: &str| v.parse::<Role>().map_err(|e| format!("{what}: {e}"));
    let mut roles = HashMap::new();
    for (value, r) in &p.roles {
        roles.insert(value.clone(), role("roles", r)?);
    }
    let client_roles = role("client_roles", &p.client_roles)?;
    let patients = match p.patients.as_str() {
        "link" => PatientSource::Link,
        "claim" => PatientSource::Claim,
        other => return Err(format!("patients must be \"link\" or \"claim\", not {other:?}")),
    };
    for (what, claim) in
        [("role_claim", &p.role_claim), ("patient_claim", &p.patient_claim), ("doctor_claim", &p.doctor_claim)]
    {
        if claim.is_empty() || claim.split('.').any(str::is_empty) {
            return Err(format!("{what} must be a claim name or a dotted path"));
        }
    }
    Ok(IssuerSettings {
        issuer,
        jwks_uri,
        audience,
        algorithms,
        leeway_seconds: p.leeway_seconds,
        role_claim: p.role_claim,
        roles,
        client_roles,
        patient_claim: p.patient_claim,
        doctor_claim: p.doctor_claim,
        patients,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_contract() {
        let list = parse_issuers(r#"[{"issuer":"https://idp.example","audience":"clinic"}]"#).unwrap_or_default();
        let p = &list[0];
        assert_eq!(p.algorithms, vec![Algorithm::RS256, Algorithm::ES256, Algorithm::EdDSA]);
        assert_eq!((p.leeway_seconds, p.role_claim.as_str(), p.client_roles), (30, "role", Role::Partner));
        assert_eq!((p.patient_claim.as_str(), p.doctor_claim.as_str()), ("patient", "doctor_id"));
        assert_eq!((p.patients, p.roles.get("admin")), (PatientSource::Link, Some(&Role::Admin)));
        assert_eq!(p.discovery_url(), "https://idp.example/.well-known/openid-configuration");
    }

    #[test]
    fn refuses_what_the_contract_forbids() {
        for bad in [
            "{}",
            r#"[{"issuer":"https://a"}]"#,
            r#"[{"issuer":"http://idp.example","audience":"a"}]"#,
            r#"[{"issuer":"https://a","audience":"a","algorithms":["HS256"]}]"#,
            r#"[{"issuer":"https://a","audience":"a","algorithms":["none"]}]"#,
            r#"[{"issuer":"https://a","audience":"a","leeway_seconds":301}]"#,
            r#"[{"issuer":"https://a","audience":"a","roles":{"x":"root"}}]"#,
            r#"[{"issuer":"https://a","audience":"a","patients":"maybe"}]"#,
            r#"[{"issuer":"https://a","audience":[]}]"#,
            r#"[{"issuer":"https://a","audience":"a","colour":"blue"}]"#,
            r#"[{"issuer":"https://a","audience":"a"},{"issuer":"https://a","audience":"b"}]"#,
            r#"[{"issuer":"clinic-booking","audience":"a"}]"#,
        ] {
            assert!(parse_issuers(bad).is_err(), "{bad} should be refused");
        }
        assert!(parse_issuers(r#"[{"issuer":"http://127.0.0.1:9/x","audience":["a","b"]}]"#).is_ok());
    }
}
