//! Tokens of a trusted OpenID Connect provider: verified with its keys ([`KeySet`]) and read
//! into a [`Caller`] by its claim map ([`IssuerSettings`]).

use std::sync::Arc;

use jsonwebtoken::{decode, decode_header, Validation};
use serde_json::Value;

use super::{
    keys::KeySet,
    settings::{IssuerSettings, PatientSource},
    Caller, Role,
};

/// Why a provider's token was refused: the `reason` label of `auth_tokens_refused_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Not a JWT, or claims of the wrong shape.
    #[error("malformed")]
    Malformed,
    /// `iss` names no trusted provider (and is not the service's own).
    #[error("unknown_issuer")]
    UnknownIssuer,
    /// An algorithm the provider is not trusted with (`none`, `HS*`, or not in `algorithms`),
    /// or one the key cannot verify.
    #[error("algorithm")]
    Algorithm,
    /// No key of the provider has the token's `kid`.
    #[error("unknown_key")]
    UnknownKey,
    /// The signature does not verify.
    #[error("signature")]
    Signature,
    /// `exp` past or missing.
    #[error("expired")]
    Expired,
    /// `nbf` in the future.
    #[error("not_yet_valid")]
    NotYetValid,
    /// `aud` missing or naming none of the audiences.
    #[error("audience")]
    Audience,
    /// Well signed, but no role, or a role without the identity it needs.
    #[error("claims")]
    Claims,
    /// The identity link could not be read or made (a store failure, logged).
    #[error("store")]
    Store,
}

impl Refusal {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Malformed => "malformed",
            Refusal::UnknownIssuer => "unknown_issuer",
            Refusal::Algorithm => "algorithm",
            Refusal::UnknownKey => "unknown_key",
            Refusal::Signature => "signature",
            Refusal::Expired => "expired",
            Refusal::NotYetValid => "not_yet_valid",
            Refusal::Audience => "audience",
            Refusal::Claims => "claims",
            Refusal::Store => "store",
        }
    }
}

impl From<jsonwebtoken::errors::Error> for Refusal {
    fn from(e: jsonwebtoken::errors::Error) -> Self {
        use jsonwebtoken::errors::ErrorKind as K;
        match e.kind() {
            K::ExpiredSignature => Refusal::Expired,
            K::ImmatureSignature => Refusal::NotYetValid,
            K::InvalidAudience => Refusal::Audience,
            K::MissingRequiredClaim(c) if c == "aud" => Refusal::Audience,
            K::MissingRequiredClaim(c) if c == "exp" => Refusal::Expired,
            K::InvalidSignature => Refusal::Signature,
            K::InvalidAlgorithm | K::InvalidAlgorithmName | K::MissingAlgorithm => Refusal::Algorithm,
            _ => Refusal::Malformed,
        }
    }
}

/// One trusted provider: its settings and its keys.
pub struct Provider {
    /// Its settings.
    pub settings: IssuerSettings,
    /// Its keys.
    pub keys: Arc<KeySet>,
}

/// What a verified token says about its bearer, before the identity link.
#[derive(Debug, PartialEq, Eq)]
pub struct Identity {
    /// The caller, with `patient_id` unset when the link must say it.
    pub caller: Caller,
    /// Whether the patient is the one linked to `(iss, sub)`.
    pub needs_link: bool,
}

impl Provider {
    /// Verifies `token` (whose `iss` is this provider's) and reads who it names.
    pub async fn verify(&self, token: &str, now: i64) -> Result<Identity, Refusal> {
        let header = decode_header(token).map_err(|_| Refusal::Malformed)?;
        if !self.settings.algorithms.contains(&header.alg) {
            return Err(Refusal::Algorithm);
        }
        let kid = header.kid.as_deref().ok_or(Refusal::UnknownKey)?;
        let set = self.keys.key(kid).await.ok_or(Refusal::UnknownKey)?;
        let key = set.get(kid).ok_or(Refusal::UnknownKey)?;
        if !key.verifies(header.alg) {
            return Err(Refusal::Algorithm);
        }
        let mut validation = Validation::new(header.alg);
        validation.set_required_spec_claims(&["exp", "aud", "iss"]);
        validation.set_audience(&self.settings.audience);
        validation.set_issuer(&[&self.settings.issuer]);
        validation.leeway = self.settings.leeway_seconds;
        validation.validate_nbf = true;
        let claims = decode::<Value>(token, &key.decoding, &validation)?.claims;
        let exp = claims.get("exp").and_then(Value::as_i64).ok_or(Refusal::Expired)?;
        let valid_until = exp.saturating_add(i64::try_from(self.settings.leeway_seconds).unwrap_or(0));
        if valid_until < now {
            return Err(Refusal::Expired);
        }
        identity(&self.settings, &claims, valid_until)
    }
}

/// The value at a dotted path (`realm_access.roles`), a literal claim name first (`https://x/roles`
/// holds dots).
fn claim<'a>(claims: &'a Value, path: &str) -> Option<&'a Value> {
    claims.get(path).or_else(|| path.split('.').try_fold(claims, |v, part| v.get(part)))
}

fn strings(v: Option<&Value>) -> Vec<&str> {
    match v {
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// A positive id given as a decimal string or a number.
fn positive_id(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::String(s) => s.parse::<i64>().ok(),
        Value::Number(n) => n.as_i64(),
        _ => None,
    }
    .filter(|id| *id > 0)
}

/// The id of `fhirUser` when it is a `{kind}/N` reference (relative or absolute).
fn fhir_user(claims: &Value, kind: &str) -> Option<i64> {
    let reference = claims.get("fhirUser")?.as_str()?;
    let mut parts = reference.trim_end_matches('/').rsplit('/');
    let id = parts.next()?;
    (parts.next()? == kind).then(|| id.parse::<i64>().ok().filter(|id| *id > 0)).flatten()
}

/// The longest subject or client id kept (the caller's scope is stored in 160 characters).
const MAX_ID: usize = 128;

fn bounded(s: Option<&str>) -> Option<&str> {
    s.filter(|s| !s.is_empty() && s.len() <= MAX_ID)
}

/// The caller a provider's verified claims make (the contract's "Who the caller is").
fn identity(p: &IssuerSettings, claims: &Value, valid_until: i64) -> Result<Identity, Refusal> {
    let client_id = bounded(claims.get("client_id").or_else(|| claims.get("azp")).and_then(Value::as_str));
    let sub = match claims.get("sub") {
        Some(Value::String(s)) => bounded(Some(s.as_str())).ok_or(Refusal::Claims)?,
        Some(_) => return Err(Refusal::Claims),
        // A client credentials token may name no subject: the client is its own.
        None => client_id.ok_or(Refusal::Claims)?,
    };
    let mapped = strings(claim(claims, &p.role_claim)).into_iter().find_map(|v| p.roles.get(v).copied());
    let role = match mapped {
        Some(role) => role,
        None if client_id.is_some() && is_machine(claims, sub, client_id) => p.client_roles,
        None => return Err(Refusal::Claims),
    };
    let mut caller = Caller {
        sub: sub.to_owned(),
        role,
        patient_id: None,
        doctor_id: None,
        issuer: Some(p.issuer.clone()),
        partner_id: None,
        expires_at: Some(valid_until),
    };
    let mut needs_link = false;
    match role {
        Role::Admin => {}
        Role::Partner => caller.partner_id = Some(client_id.ok_or(Refusal::Claims)?.to_owned()),
        Role::Doctor => {
            let id = positive_id(claim(claims, &p.doctor_claim)).or_else(|| fhir_user(claims, "Practitioner"));
            caller.doctor_id = Some(id.ok_or(Refusal::Claims)?);
        }
        Role::Patient => match positive_id(claim(claims, &p.patient_claim)).or_else(|| fhir_user(claims, "Patient")) {
            Some(id) => caller.patient_id = Some(id),
            None if p.patients == PatientSource::Link => needs_link = true,
            None => return Err(Refusal::Claims),
        },
    }
    Ok(Identity { caller, needs_link })
}

/// Whether a token with a client id and no mapped role names no end user: its subject is the
/// client (or absent), or it says it came from client credentials (Auth0's `gty`, Entra ID's
/// `idtyp: app`, Keycloak's service account user).
fn is_machine(claims: &Value, sub: &str, client_id: Option<&str>) -> bool {
    client_id == Some(sub)
        || claims.get("gty").and_then(Value::as_str) == Some("client-credentials")
        || claims.get("idtyp").and_then(Value::as_str) == Some("app")
        || claims.get("preferred_username").and_then(Value::as_str).is_some_and(|u| u.starts_with("service-account-"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::auth::settings::AUTH_ISSUERS;

    fn provider(extra: &str) -> IssuerSettings {
        let raw = format!(r#"[{{"issuer":"https://idp.example","audience":"clinic"{extra}}}]"#);
        let mut r = crate::settings::Reader::new(move |k| (k == AUTH_ISSUERS).then(|| raw.clone()));
        crate::auth::Settings::from_env(&mut r).map(|s| s.issuers).unwrap_or_default().remove(0)
    }

    fn who(p: &IssuerSettings, claims: Value) -> Result<Identity, Refusal> {
        identity(p, &claims, 130)
    }

    #[test]
    fn roles_clients_doctors_and_patients_follow_the_claim_map() {
        let p = provider(r#","role_claim":"realm_access.roles","roles":{"clinic-admin":"admin","staff":"doctor"}"#);
        let admin = who(&p, json!({"sub":"u1","realm_access":{"roles":["x","clinic-admin"]}}));
        assert_eq!(admin.map(|i| i.caller.role), Ok(Role::Admin));
        let doctor =
            who(&p, json!({"sub":"u2","realm_access":{"roles":"staff"},"fhirUser":"https://f/Practitioner/9"}));
        assert_eq!(doctor.map(|i| i.caller.doctor_id), Ok(Some(9)));
        assert_eq!(who(&p, json!({"sub":"u3","realm_access":{"roles":["staff"]}})), Err(Refusal::Claims));
        let machine = who(&p, json!({"sub":"app-1","client_id":"app-1"})).map(|i| i.caller);
        assert_eq!(machine.as_ref().map(|c| (c.role, c.partner_id.clone())), Ok((Role::Partner, Some("app-1".into()))));
        assert_eq!(who(&p, json!({"sub":"person","azp":"spa"})), Err(Refusal::Claims), "an end user without a role");
        let p = provider("");
        let linked = who(&p, json!({"sub":"u4","role":"patient"})).map(|i| (i.needs_link, i.caller.patient_id));
        assert_eq!(linked, Ok((true, None)));
        let claimed =
            who(&p, json!({"sub":"u4","role":"patient","fhirUser":"Patient/12"})).map(|i| i.caller.patient_id);
        assert_eq!(claimed, Ok(Some(12)));
        let p = provider(r#","patients":"claim""#);
        assert_eq!(who(&p, json!({"sub":"u4","role":"patient"})), Err(Refusal::Claims));
        assert_eq!(
            who(&p, json!({"sub":"u4","role":"patient","patient":"5"})).map(|i| i.caller.patient_id),
            Ok(Some(5))
        );
    }
}
