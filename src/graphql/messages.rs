//! Contact details: `setPatientContact` and `patientContact`, thin over
//! [`ContactService`](crate::notify::ContactService).

use async_graphql::{ComplexObject, Context, InputObject, MaybeUndefined, Object, Result, SimpleObject, ID};

use super::{context::caller, error::IntoGraphql, types::UserError};
use crate::notify::{Contact, ContactInput, ContactService, Field};

/// A write to a patient's contact details. A field left out keeps its value; an explicit
/// `null` removes it.
#[derive(InputObject, Debug)]
pub struct PatientContactInput {
    /// The patient: required for partners and admins; a patient may name only itself.
    pub patient_id: Option<ID>,
    /// An email address (`name@example.org`: no display name, ASCII, a domain name).
    pub email: MaybeUndefined<String>,
    /// An E.164 number: `+` and 8–15 digits.
    pub phone: MaybeUndefined<String>,
    /// A BCP 47 language tag (`en`, `fr-CA`): the language of the messages.
    pub locale: MaybeUndefined<String>,
}

/// The answer to `setPatientContact`.
#[derive(SimpleObject)]
#[graphql(serial)]
pub struct PatientContactPayload {
    /// The details as you may now see them, unless refused.
    pub contact: Option<PatientContact>,
    /// Why the write was refused (one entry per invalid field); empty otherwise.
    pub user_errors: Vec<UserError>,
}

/// Where a patient's messages go.
#[derive(SimpleObject, Clone, Debug)]
#[graphql(complex)]
pub struct PatientContact {
    /// The patient.
    pub patient_id: ID,
    /// Emails go here, when set.
    pub email: Option<String>,
    /// SMS go here, when set.
    pub phone: Option<String>,
    /// The language of the messages.
    pub locale: Option<String>,
}

impl From<Contact> for PatientContact {
    fn from(c: Contact) -> Self {
        Self { patient_id: ID(c.patient_id.to_string()), email: c.email, phone: c.phone, locale: c.locale }
    }
}

#[ComplexObject]
impl PatientContact {
    /// The patient's appointments marked NOSHOW in the last 365 days (by their start).
    async fn no_show_count(&self, ctx: &Context<'_>) -> Result<i32> {
        let patient_id = self.patient_id.parse::<i64>().map_err(|_| super::error::internal())?;
        let count = ctx.data::<crate::booking::BookingService>()?.no_show_count(patient_id).await.gql()?;
        Ok(i32::try_from(count).unwrap_or(i32::MAX))
    }
}

fn field(value: MaybeUndefined<String>) -> Field {
    match value {
        MaybeUndefined::Undefined => Field::Keep,
        MaybeUndefined::Null => Field::Clear,
        MaybeUndefined::Value(v) => Field::Set(v),
    }
}

/// Reads of contact details.
#[derive(Default)]
pub struct MessagesQuery;

#[Object]
impl MessagesQuery {
    /// A patient's contact details, or null when none are on file or you may not see them.
    /// Details are kept per booker: a patient sees its own (`patientId` may be left out); a
    /// partner sees what it set for the patient (used for the appointments it makes), never
    /// what the patient or another partner set; an admin sees the patient's own, or with
    /// `partner` (a partner's token subject) what that partner set. Doctors: FORBIDDEN.
    async fn patient_contact(
        &self,
        ctx: &Context<'_>,
        patient_id: Option<ID>,
        partner: Option<String>,
    ) -> Result<Option<PatientContact>> {
        let patient_id = patient_id.as_ref().map(|p| p.as_str());
        let found = ctx.data::<ContactService>()?.get(caller(ctx)?, patient_id, partner.as_deref()).await.gql()?;
        Ok(found.map(PatientContact::from))
    }
}

/// Writes of contact details.
#[derive(Default)]
pub struct MessagesMutation;

#[Object]
impl MessagesMutation {
    /// Sets where a patient's messages go; sends nothing by itself. A patient (or an admin
    /// for it) sets the patient's own details; a partner sets details kept for it alone, used
    /// for the messages about the appointments it makes. Invalid values come back in
    /// `userErrors` (INVALID_INPUT, with `field`), and nothing is changed then.
    async fn set_patient_contact(
        &self,
        ctx: &Context<'_>,
        input: PatientContactInput,
    ) -> Result<PatientContactPayload> {
        let request = ContactInput {
            patient_id: input.patient_id.map(|p| p.0),
            email: field(input.email),
            phone: field(input.phone),
            locale: field(input.locale),
        };
        let outcome = ctx.data::<ContactService>()?.set(caller(ctx)?, request).await.gql()?;
        Ok(match outcome {
            Ok(contact) => PatientContactPayload { contact: Some(contact.into()), user_errors: vec![] },
            Err(refusals) => PatientContactPayload {
                contact: None,
                user_errors: refusals.into_iter().map(UserError::from).collect(),
            },
        })
    }
}
