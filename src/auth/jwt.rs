//! HS256 bearer tokens: verification of presented tokens and issuing tokens for local use.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
};

use jsonwebtoken::{decode, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use super::Secret;
use super::{Caller, Role};

/// The claims of a clinic-booking token.
#[derive(Debug, Serialize, Deserialize)]
pub struct Claims {
    /// Subject: the patient id for patients, any stable string otherwise.
    pub sub: String,
    /// One of `patient`, `doctor`, `admin`, `partner`.
    pub role: String,
    /// Expiry, seconds since the Unix epoch.
    pub exp: i64,
    /// The doctor's id, for doctor tokens (a decimal string; a number is accepted too).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "string_or_number")]
    pub doctor_id: Option<String>,
}

impl Claims {
    /// The caller these claims make, or why a server refuses them: the one check of presented
    /// tokens, also run before minting one (`clinic-booking token`), so the two cannot drift.
    pub fn caller(&self) -> Result<Caller, TokenError> {
        caller_from_claims(self)
    }
}

fn string_or_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Id {
        S(String),
        N(i64),
    }
    Ok(Option::<Id>::deserialize(d)?.map(|id| match id {
        Id::S(s) => s,
        Id::N(n) => n.to_string(),
    }))
}

/// Why a presented token was refused.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// Bad signature, expired, wrong algorithm, malformed.
    #[error("invalid token: {0}")]
    Invalid(#[from] jsonwebtoken::errors::Error),
    /// Well signed, but the claims break the contract (unknown role, bad ids).
    #[error("invalid token claims: {0}")]
    Claims(String),
}

/// Tokens verified recently, kept before the map is emptied (a flood of distinct tokens costs
/// what verifying them costs, no more).
const VERIFIED_MAX: usize = 10_000;

/// Signs and verifies tokens with one HS256 secret.
#[derive(Clone)]
pub struct TokenIssuer {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    /// Tokens whose signature and claims were verified, with their caller and expiry: a partner
    /// sends one token with thousands of requests, and checking the signature each time was a
    /// few percent of a rejected booking.
    verified: Arc<Mutex<HashMap<String, (Caller, i64)>>>,
}

impl TokenIssuer {
    /// An issuer for `secret` (refused only when it is empty).
    pub fn new(secret: &Secret) -> Result<Self, TokenError> {
        // Only HS256: a token with `alg: none` or any other algorithm is refused outright.
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_required_spec_claims(&["exp", "sub"]);
        validation.leeway = 0;
        Ok(Self {
            encoding: EncodingKey::from_secret(secret.expose())?,
            decoding: DecodingKey::from_secret(secret.expose())?,
            validation,
            verified: Arc::default(),
        })
    }

    /// Verifies a token and turns its claims into a [`Caller`].
    pub fn verify(&self, token: &str) -> Result<Caller, TokenError> {
        let now = chrono::Utc::now().timestamp();
        let mut verified = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
        match verified.get(token) {
            // jsonwebtoken's own rule with no leeway: expired once `exp` is in the past.
            Some((caller, exp)) if *exp >= now => return Ok(caller.clone()),
            Some(_) => {
                verified.remove(token);
            }
            None => {}
        }
        drop(verified);
        let claims = decode::<Claims>(token, &self.decoding, &self.validation)?.claims;
        let exp = claims.exp;
        let caller = caller_from_claims(&claims)?;
        let mut verified = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
        if verified.len() >= VERIFIED_MAX {
            verified.clear();
        }
        verified.insert(token.to_owned(), (caller.clone(), exp));
        Ok(caller)
    }

    /// Signs `claims`.
    pub fn issue(&self, claims: &Claims) -> Result<String, TokenError> {
        Ok(encode(&Header::new(Algorithm::HS256), claims, &self.encoding)?)
    }
}

fn positive_id(s: &str) -> Option<i64> {
    s.parse::<i64>().ok().filter(|id| *id > 0)
}

fn caller_from_claims(claims: &Claims) -> Result<Caller, TokenError> {
    let role: Role = claims.role.parse().map_err(TokenError::Claims)?;
    if claims.sub.is_empty() || claims.sub.len() > 128 {
        return Err(TokenError::Claims("sub must be 1 to 128 characters".into()));
    }
    let patient_id = match role {
        Role::Patient => Some(
            positive_id(&claims.sub)
                .ok_or_else(|| TokenError::Claims("a patient's sub must be a positive integer".into()))?,
        ),
        _ => None,
    };
    let doctor_id = match role {
        Role::Doctor => Some(
            claims
                .doctor_id
                .as_deref()
                .and_then(positive_id)
                .ok_or_else(|| TokenError::Claims("a doctor token needs a doctor_id".into()))?,
        ),
        _ => None,
    };
    Ok(Caller { expires_at: Some(claims.exp), ..Caller::local(claims.sub.clone(), role, patient_id, doctor_id) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issuer() -> TokenIssuer {
        TokenIssuer::new(&Secret::new("0123456789abcdef0123456789abcdef")).unwrap_or_else(|e| panic!("{e}"))
    }

    fn claims(role: &str, sub: &str, exp_in: i64) -> Claims {
        Claims { sub: sub.into(), role: role.into(), exp: chrono::Utc::now().timestamp() + exp_in, doctor_id: None }
    }

    type TestResult = Result<(), TokenError>;

    #[test]
    fn claims_are_checked_before_minting_as_when_verifying() {
        assert!(claims("doctor", "d", 60).caller().is_err(), "a doctor needs a doctor_id");
        assert!(claims("patient", "abc", 60).caller().is_err(), "a patient's sub is a positive integer");
        let doctor = Claims { doctor_id: Some("3".into()), ..claims("doctor", "d", 60) };
        assert_eq!(doctor.caller().ok().and_then(|c| c.doctor_id), Some(3));
    }

    #[test]
    fn round_trip() -> TestResult {
        let t = issuer().issue(&claims("patient", "77", 60))?;
        let c = issuer().verify(&t)?;
        assert_eq!((c.role, c.patient_id), (Role::Patient, Some(77)));
        Ok(())
    }

    #[test]
    fn refuses_expired_unknown_role_and_foreign_signature() -> TestResult {
        let i = issuer();
        assert!(i.verify(&i.issue(&claims("patient", "77", -5))?).is_err());
        assert!(i.verify(&i.issue(&claims("root", "1", 60))?).is_err());
        assert!(i.verify(&i.issue(&claims("patient", "abc", 60))?).is_err());
        assert!(i.verify(&i.issue(&claims("doctor", "d", 60))?).is_err());
        let other = TokenIssuer::new(&Secret::new("another-secret-of-enough-length"))?;
        assert!(i.verify(&other.issue(&claims("admin", "1", 60))?).is_err());
        Ok(())
    }

    #[test]
    fn a_remembered_token_still_expires() -> TestResult {
        let i = issuer();
        let fresh = i.issue(&claims("partner", "p", 60))?;
        assert_eq!(i.verify(&fresh)?.sub, "p");
        assert_eq!(i.verify(&fresh)?.sub, "p", "served from the verified tokens");
        let expired = claims("partner", "p", -5);
        let (exp, token) = (expired.exp, i.issue(&expired)?);
        let caller = Caller::local("p", Role::Partner, None, None);
        i.verified.lock().unwrap_or_else(PoisonError::into_inner).insert(token.clone(), (caller, exp));
        assert!(i.verify(&token).is_err(), "a remembered token past its exp is refused");
        Ok(())
    }

    #[test]
    fn refuses_alg_none() {
        use base64_like::encode_segment as seg;
        let t = format!(
            "{}.{}.",
            seg(br#"{"alg":"none","typ":"JWT"}"#),
            seg(format!(r#"{{"sub":"1","role":"admin","exp":{}}}"#, chrono::Utc::now().timestamp() + 60).as_bytes())
        );
        assert!(issuer().verify(&t).is_err());
    }

    mod base64_like {
        pub(super) fn encode_segment(raw: &[u8]) -> String {
            const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
            let mut out = String::new();
            for chunk in raw.chunks(3) {
                let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
                let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
                for i in 0..=chunk.len() {
                    out.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
                }
            }
            out
        }
    }
}
