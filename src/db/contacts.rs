//! Queries of the `patient_contact` table: contact details kept per booker (the patient's own,
//! and each partner's for the appointments it makes).

use chrono::{DateTime, Utc};
use sea_orm::{sea_query::OnConflict, ActiveValue::Set, ConnectionTrait, EntityTrait};

use super::{entity::patient_contact, StoreError};

/// `patient_contact.booker` of the patient's own details (set by the patient, or by an admin
/// for it): they serve every message the patient gets, except those about the appointments of
/// a partner that keeps details of its own.
pub const OWN: &str = "";

/// What a write does to one field of a patient's contact details.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldChange {
    /// Leave it as it is (the field was left out).
    Keep,
    /// Remove it (an explicit null).
    Clear,
    /// Store this (already validated) value.
    Set(String),
}

impl FieldChange {
    fn value(&self) -> Option<String> {
        match self {
            Self::Set(v) => Some(v.clone()),
            Self::Keep | Self::Clear => None,
        }
    }
}

/// A write to a patient's contact details, field by field.
#[derive(Clone, Debug)]
pub struct ContactChange {
    /// The email address.
    pub email: FieldChange,
    /// The phone number.
    pub phone: FieldChange,
    /// The locale.
    pub locale: FieldChange,
}

/// The details `booker` ([`OWN`], or a partner's scope) keeps for a patient, if any.
pub async fn find(
    conn: &impl ConnectionTrait,
    patient_id: i64,
    booker: &str,
) -> Result<Option<patient_contact::Model>, StoreError> {
    Ok(patient_contact::Entity::find_by_id((patient_id, booker.to_owned())).one(conn).await?)
}

/// Applies `change` to what `booker` keeps for the patient, in one statement (an upsert): a
/// new row takes the values given (a field left out is not on file), an existing one changes
/// only the fields named. Returns the row.
pub async fn apply(
    conn: &impl ConnectionTrait,
    patient_id: i64,
    booker: &str,
    change: &ContactChange,
    by: &str,
    now: DateTime<Utc>,
) -> Result<patient_contact::Model, StoreError> {
    use patient_contact::Column as C;
    let row = patient_contact::ActiveModel {
        patient_id: Set(patient_id),
        booker: Set(booker.to_owned()),
        email: Set(change.email.value()),
        phone: Set(change.phone.value()),
        locale: Set(change.locale.value()),
        updated_at: Set(now),
        updated_by: Set(by.to_owned()),
    };
    let mut columns = vec![C::UpdatedAt, C::UpdatedBy];
    for (field, column) in [(&change.email, C::Email), (&change.phone, C::Phone), (&change.locale, C::Locale)] {
        if *field != FieldChange::Keep {
            columns.push(column);
        }
    }
    let upsert = OnConflict::columns([C::PatientId, C::Booker]).update_columns(columns).to_owned();
    Ok(patient_contact::Entity::insert(row).on_conflict(upsert).exec_with_returning(conn).await?)
}
