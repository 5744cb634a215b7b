//! Who the caller is (`me`) and the identity links of the clinic's sign-in providers
//! (`linkPatientIdentity`, `unlinkPatientIdentity`).

use async_graphql::{Context, Enum, InputObject, Object, Result, SimpleObject, ID};

use super::{
    context::{caller, principal},
    error::IntoGraphql,
    types::UserError,
};
use crate::{auth, booking::BookingService};

/// The roles of the contract.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A patient.
    Patient,
    /// A doctor.
    Doctor,
    /// An admin.
    Admin,
    /// A partner (a machine client).
    Partner,
}

impl From<auth::Role> for Role {
    fn from(r: auth::Role) -> Self {
        match r {
            auth::Role::Patient => Self::Patient,
            auth::Role::Doctor => Self::Doctor,
            auth::Role::Admin => Self::Admin,
            auth::Role::Partner => Self::Partner,
        }
    }
}

/// Who the service takes the caller to be.
#[derive(SimpleObject, Debug)]
pub struct Me {
    /// The caller's role.
    pub role: Role,
    /// The patient, for patients.
    pub patient_id: Option<ID>,
    /// The doctor, for doctors.
    pub doctor_id: Option<ID>,
    /// The partner, for partners: the provider's client id, or a `JWT_SECRET` token's subject.
    pub partner_id: Option<String>,
    /// The provider that issued the token; null for `JWT_SECRET` tokens.
    pub issuer: Option<String>,
    /// The token's subject.
    pub subject: String,
    /// The patient's `NOSHOW` appointments of the last 365 days (what `NO_SHOW_LIMIT` counts);
    /// null for other roles.
    pub no_show_count: Option<i32>,
}

/// The input of `linkPatientIdentity`.
#[derive(InputObject, Debug)]
pub struct LinkPatientIdentityInput {
    /// The provider's exact `iss`.
    pub issuer: String,
    /// The provider's `sub` of the person.
    pub subject: String,
    /// The patient the clinic already knows.
    pub patient_id: ID,
}

/// The input of `unlinkPatientIdentity`.
#[derive(InputObject, Debug)]
pub struct UnlinkPatientIdentityInput {
    /// The provider's exact `iss`.
    pub issuer: String,
    /// The provider's `sub` of the person.
    pub subject: String,
}

/// The answer to `linkPatientIdentity` and `unlinkPatientIdentity`.
#[derive(SimpleObject, Debug)]
pub struct LinkPatientIdentityPayload {
    /// Whether the identity is linked after the call: true after a link, false after an
    /// unlink (also when there was nothing to undo).
    pub linked: bool,
    /// Why it was refused (`IDENTITY_ALREADY_LINKED`, `INVALID_INPUT`); empty otherwise.
    pub user_errors: Vec<UserError>,
}

/// `me`.
#[derive(Default)]
pub struct IdentityQuery;

#[Object]
impl IdentityQuery {
    /// Who the service takes the caller to be; null for anonymous. An SPA calls it after sign-in.
    async fn me(&self, ctx: &Context<'_>) -> Result<Option<Me>> {
        let Some(c) = principal(ctx)?.caller() else {
            return Ok(None);
        };
        let no_show_count = match (c.role, c.patient_id) {
            (auth::Role::Patient, Some(id)) => {
                let count = ctx.data::<BookingService>()?.no_show_count(id).await.map_err(super::error::to_graphql)?;
                Some(i32::try_from(count).unwrap_or(i32::MAX))
            }
            _ => None,
        };
        Ok(Some(Me {
            role: c.role.into(),
            patient_id: c.patient_id.map(|id| ID(id.to_string())),
            doctor_id: c.doctor_id.map(|id| ID(id.to_string())),
            partner_id: c.partner().map(str::to_owned),
            issuer: c.issuer.clone(),
            subject: c.sub.clone(),
            no_show_count,
        }))
    }
}

/// The identity link mutations.
#[derive(Default)]
pub struct IdentityMutation;

#[Object]
impl IdentityMutation {
    /// Links a provider's `(issuer, subject)` to a patient the clinic already knows, before its
    /// first sign-in. Admins only.
    async fn link_patient_identity(
        &self,
        ctx: &Context<'_>,
        input: LinkPatientIdentityInput,
    ) -> Result<LinkPatientIdentityPayload> {
        let service = ctx.data::<BookingService>()?;
        let outcome = service
            .link_patient_identity(caller(ctx)?, &input.issuer, &input.subject, &input.patient_id)
            .await
            .gql()?;
        Ok(match outcome {
            Ok(()) => LinkPatientIdentityPayload { linked: true, user_errors: vec![] },
            Err(r) => LinkPatientIdentityPayload { linked: false, user_errors: vec![r.into()] },
        })
    }

    /// Removes the link of a provider's `(issuer, subject)` (nothing to undo is not an error).
    /// Admins only.
    async fn unlink_patient_identity(
        &self,
        ctx: &Context<'_>,
        input: UnlinkPatientIdentityInput,
    ) -> Result<LinkPatientIdentityPayload> {
        let service = ctx.data::<BookingService>()?;
        let outcome = service.unlink_patient_identity(caller(ctx)?, &input.issuer, &input.subject).await.gql()?;
        Ok(match outcome {
            Ok(_) => LinkPatientIdentityPayload { linked: false, user_errors: vec![] },
            Err(r) => LinkPatientIdentityPayload { linked: false, user_errors: vec![r.into()] },
        })
    }
}
