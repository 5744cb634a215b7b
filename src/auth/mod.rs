//! Who is calling: bearer tokens (HS256 JWT), the roles of the contract, and the rules of
//! what each role may see and do.
//!
//! A request carries no token (anonymous), a valid token (a [`Caller`]), or an invalid one,
//! which is refused with `UNAUTHENTICATED` before any operation runs.

mod jwt;
mod secret;
pub mod settings;

pub use jwt::{Claims, TokenError, TokenIssuer};
pub use secret::load_or_create_dev_secret;
pub use settings::{Secret, Settings};

use std::fmt;

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

/// An authenticated caller, as proven by a valid token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The token's subject.
    pub sub: String,
    /// The token's role.
    pub role: Role,
    /// The patient this caller is, for the patient role (its `sub` as a number).
    pub patient_id: Option<i64>,
    /// The doctor this caller is, for the doctor role (its `doctor_id` claim).
    pub doctor_id: Option<i64>,
}

impl Caller {
    /// The caller's identity as stored with what it creates: `role:sub`. Idempotency keys are
    /// scoped by it, and a partner sees the appointments whose creator it is.
    pub fn scope(&self) -> String {
        scope(self.role, &self.sub)
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
pub fn principal_from_header(tokens: &TokenIssuer, value: &str) -> Result<Principal, String> {
    let mut parts = value.trim().splitn(2, ' ');
    let scheme = parts.next().unwrap_or("");
    let token = parts.next().map(str::trim).unwrap_or("");
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err("the Authorization header must be `Bearer <token>`".into());
    }
    match tokens.verify(token) {
        Ok(caller) => Ok(Principal::Caller(caller)),
        Err(e) => {
            tracing::debug!(error = %e, "token refused");
            Err("the bearer token is invalid or expired".into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(role: Role, sub: &str) -> Caller {
        Caller {
            sub: sub.into(),
            role,
            patient_id: if role == Role::Patient { sub.parse().ok() } else { None },
            doctor_id: (role == Role::Doctor).then_some(9),
        }
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
