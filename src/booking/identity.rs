//! Links between a provider's identity `(iss, sub)` and a patient the clinic already knows,
//! made and undone by admins before the identity's first sign-in (after it, the link made on
//! first use is the patient's).

use super::BookingService;
use crate::{
    auth::{Caller, Role},
    booking::input::parse_id,
    db::identities,
    error::{Field, Outcome, Refusal, RefusalCode, ServiceError},
};

/// Longest issuer kept (as the column).
const MAX_ISSUER: usize = 512;
/// Longest subject kept (as the authenticator accepts).
const MAX_SUBJECT: usize = 128;

fn admin_only(caller: &Caller) -> Result<(), ServiceError> {
    if caller.role == Role::Admin {
        Ok(())
    } else {
        Err(ServiceError::Forbidden("only admins link identities to patients".into()))
    }
}

/// The issuer and subject, checked: `Err` names the one at fault.
fn identity<'a>(issuer: &'a str, subject: &'a str) -> Result<(&'a str, &'a str), Refusal> {
    if issuer.is_empty() || issuer.len() > MAX_ISSUER {
        return Err(Refusal::invalid(Field::Issuer.in_request(), "issuer must be 1 to 512 characters"));
    }
    if subject.is_empty() || subject.len() > MAX_SUBJECT {
        return Err(Refusal::invalid(Field::Subject.in_request(), "subject must be 1 to 128 characters"));
    }
    Ok((issuer, subject))
}

impl BookingService {
    /// Links `(issuer, subject)` to the patient `raw_patient_id` (admins only);
    /// `IDENTITY_ALREADY_LINKED` when the identity already has a patient.
    pub async fn link_patient_identity(
        &self,
        caller: &Caller,
        issuer: &str,
        subject: &str,
        raw_patient_id: &str,
    ) -> Outcome<()> {
        admin_only(caller)?;
        let (issuer, subject) = match identity(issuer, subject) {
            Ok(pair) => pair,
            Err(r) => return Ok(Err(r)),
        };
        let patient_id = match parse_id(Field::PatientId.name(), raw_patient_id) {
            Ok(id) => id,
            Err(m) => return Ok(Err(Refusal::invalid(Field::PatientId.in_request(), m))),
        };
        let _writing = self.db.writing().await;
        if identities::insert(self.db.conn(), issuer, subject, Some(patient_id)).await? {
            Ok(Ok(()))
        } else {
            Ok(Err(Refusal::new(RefusalCode::IdentityAlreadyLinked, "this identity already has a patient")))
        }
    }

    /// Removes the link of `(issuer, subject)` (admins only): `true` when there was one. The
    /// identity's next sign-in is linked afresh (a new patient, with `patients: "link"`).
    pub async fn unlink_patient_identity(&self, caller: &Caller, issuer: &str, subject: &str) -> Outcome<bool> {
        admin_only(caller)?;
        let (issuer, subject) = match identity(issuer, subject) {
            Ok(pair) => pair,
            Err(r) => return Ok(Err(r)),
        };
        let _writing = self.db.writing().await;
        Ok(Ok(identities::delete(self.db.conn(), issuer, subject).await?))
    }
}
