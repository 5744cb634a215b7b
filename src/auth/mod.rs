//! Who is calling: bearer tokens (the service's own HS256 tokens and the access tokens of the
//! clinic's OpenID Connect providers), the roles of the contract, and the rules of what each
//! role may see and do.
//!
//! A request carries no token (anonymous), a valid token (a [`Caller`]), or an invalid one,
//! which is refused with `UNAUTHENTICATED` before any operation runs. The [`Authenticator`]
//! routes a token by its `iss`: none (or `clinic-booking`) to `JWT_SECRET`, a trusted
//! provider's to that provider's keys ([`keys::KeySet`]).

mod authenticator;
mod jwt;
pub mod keys;
pub mod provider;
mod secret;
pub mod settings;

pub use authenticator::{Authenticator, IssuerState, SmartProvider};
pub use jwt::{Claims, TokenError, TokenIssuer};
pub use secret::load_or_create_dev_secret;
pub use settings::{Secret, Settings};

use std::fmt;

use sha2::{Digest, Sha256};

/// The roles of the contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Books and cancels for itself; `sub` is its patient id.
    Patient,
    /// Publishes its own schedule and sees appointments in its own slots.
    Doctor,
    /// May do everything.
    Admin,
    /// Books and cancels on behalf of any patient; sees what it created.
    Partner,
}

impl Role {
    /// The role's name in tokens and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Patient => "patient",
            Role::Doctor => "doctor",
            Role::Admin => "admin",
            Role::Partner => "partner",
        }
    }
}

impl std::str::FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "patient" => Ok(Role::Patient),
            "doctor" => Ok(Role::Doctor),
            "admin" => Ok(Role::Admin),
            "partner" => Ok(Role::Partner),
            other => Err(format!("unknown role {other:?} (patient, doctor, admin or partner)")),
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The identity stored with what a caller of `role` with token subject `sub` creates
/// ([`Caller::scope`]).
pub fn scope(role: Role, sub: &str) -> String {
    format!("{role}:{sub}")
}

/// A provider's short, fixed-length tag in scopes: the first 8 bytes of SHA-256 of its issuer,
/// in hex (scopes are stored in 160 characters; an issuer may be longer).
fn issuer_tag(issuer: &str) -> String {
    hex::encode(&Sha256::digest(issuer.as_bytes())[..8])
}

/// An authenticated caller, as proven by a valid token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The token's subject.
    pub sub: String,
    /// The token's role.
    pub role: Role,
    /// The patient this caller is, for the patient role (its `sub` as a number for
    /// `JWT_SECRET` tokens; a provider's claim or identity link otherwise).
    pub patient_id: Option<i64>,
    /// The doctor this caller is, for the doctor role (its `doctor_id` claim).
    pub doctor_id: Option<i64>,
    /// The provider that issued the token; `None` for the service's own (`JWT_SECRET`) tokens.
    pub issuer: Option<String>,
    /// A provider's partner: its client id (`client_id`, else `azp`).
    pub partner_id: Option<String>,
    /// When the token stops being accepted (its `exp` plus the leeway), seconds since the
    /// Unix epoch.
    pub expires_at: Option<i64>,
}

impl Caller {
    /// A caller of a `JWT_SECRET` token with no expiry (tests and tools).
    pub fn local(sub: impl Into<String>, role: Role, patient_id: Option<i64>, doctor_id: Option<i64>) -> Self {
        Self { sub: sub.into(), role, patient_id, doctor_id, issuer: None, partner_id: None, expires_at: None }
    }

    /// The caller's identity as stored with what it creates: `role:sub` for `JWT_SECRET`
    /// tokens, `role@<issuer tag>#<id>` for a provider's (the id is the client id for partners,
    /// the subject otherwise). Idempotency keys are scoped by it, and a partner sees the
    /// appointments whose creator it is. A local scope never holds `@` before its `:`, and the
    /// tag differs per provider, so identities of two providers, or of a provider and
    /// `JWT_SECRET`, never collide.
    pub fn scope(&self) -> String {
        match &self.issuer {
            None => scope(self.role, &self.sub),
            Some(issuer) => {
                format!("{}@{}#{}", self.role, issuer_tag(issuer), self.partner_id.as_deref().unwrap_or(&self.sub))
            }
        }
    }

    /// The partner this caller is, for the partner role: its client id, or the subject of a
    /// `JWT_SECRET` token.
    pub fn partner(&self) -> Option<&str> {
        (self.role == Role::Partner).then(|| self.partner_id.as_deref().unwrap_or(&self.sub))
    }

    /// True when the caller may manage `doctor_id`'s schedule.
    pub fn manages_doctor(&self, doctor_id: i64) -> bool {
        self.role == Role::Admin || (self.role == Role::Doctor && self.doctor_id == Some(doctor_id))
    }
}

/// What a request proves about its sender.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Principal {
    /// No token: may read doctors, slots and availability only.
    #[default]
    Anonymous,
    /// A valid token.
    Caller(Caller),
}

impl Principal {
    /// The caller, if authenticated.
    pub fn caller(&self) -> Option<&Caller> {
        match self {
            Principal::Anonymous => None,
            Principal::Caller(c) => Some(c),
        }
    }
}

/// Facts about an appointment that decide who may see it.
#[derive(Clone, Copy, Debug)]
pub struct AppointmentAccess<'a> {
    /// The patient who holds it.
    pub patient_id: i64,
    /// The doctor whose slot it is in.
    pub doctor_id: i64,
    /// The scope of the caller who created it ([`Caller::scope`]).
    pub booked_by: &'a str,
    /// The scope of whoever booked the appointment it was rescheduled from, when someone else
    /// moved it: a partner keeps seeing what it booked.
    pub first_booked_by: Option<&'a str>,
}

impl Caller {
    /// The contract's visibility rule for one appointment, checked on every object returned.
    pub fn may_see(&self, a: AppointmentAccess<'_>) -> bool {
        match self.role {
            Role::Admin => true,
            Role::Patient => self.patient_id == Some(a.patient_id),
            Role::Doctor => self.doctor_id == Some(a.doctor_id),
            Role::Partner => {
                let scope = self.scope();
                a.booked_by == scope || a.first_booked_by == Some(scope.as_str())
            }
        }
    }

    /// Who may cancel: whoever may see it, except a doctor (doctors do not book or cancel).
    pub fn may_cancel(&self, a: AppointmentAccess<'_>) -> bool {
        self.role != Role::Doctor && self.may_see(a)
    }
}

/// The principal an `Authorization` header value proves: `Bearer <token>` with a valid token.
/// `Err` (with a message for the client) for anything presented that is not a valid token.
pub async fn principal_from_header(tokens: &Authenticator, value: &str) -> Result<Principal, String> {
    let mut parts = value.trim().splitn(2, ' ');
    let scheme = parts.next().unwrap_or("");
    let token = parts.next().map(str::trim).unwrap_or("");
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        metrics::counter!("auth_tokens_refused_total", "reason" => "malformed").increment(1);
        return Err("the Authorization header must be `Bearer <token>`".into());
    }
    match tokens.verify(token).await {
        Ok(caller) => Ok(Principal::Caller(caller)),
        Err(reason) => {
            tracing::debug!(reason = reason.label(), "token refused");
            Err("the bearer token is invalid or expired".into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(role: Role, sub: &str) -> Caller {
        Caller::local(
            sub,
            role,
            if role == Role::Patient { sub.parse().ok() } else { None },
            (role == Role::Doctor).then_some(9),
        )
    }

    #[test]
    fn scopes_of_providers_and_the_secret_never_collide() {
        let local = caller(Role::Partner, "app");
        let of = |iss: &str| Caller {
            issuer: Some(iss.into()),
            partner_id: Some("app".into()),
            ..caller(Role::Partner, "app")
        };
        let (a, b) = (of("https://a.example"), of("https://b.example"));
        assert_eq!(local.scope(), "partner:app");
        assert_ne!(a.scope(), b.scope());
        assert!(a.scope().starts_with("partner@") && a.scope().ends_with("#app") && a.scope().len() < 40);
        assert_eq!((a.partner(), local.partner()), (Some("app"), Some("app")));
    }

    #[test]
    fn visibility_follows_the_contract() {
        let a = AppointmentAccess { patient_id: 77, doctor_id: 9, booked_by: "partner:p1", first_booked_by: None };
        assert!(caller(Role::Patient, "77").may_see(a));
        assert!(!caller(Role::Patient, "78").may_see(a));
        assert!(caller(Role::Doctor, "d").may_see(a));
        assert!(!caller(Role::Doctor, "d").may_cancel(a));
        assert!(caller(Role::Partner, "p1").may_see(a));
        assert!(!caller(Role::Partner, "p2").may_see(a));
        assert!(caller(Role::Admin, "root").may_see(a));
        let moved = AppointmentAccess { booked_by: "patient:77", first_booked_by: Some("partner:p1"), ..a };
        assert!(caller(Role::Partner, "p1").may_see(moved), "a partner sees what it booked after a move");
        assert!(!caller(Role::Partner, "p2").may_see(moved));
    }
}
