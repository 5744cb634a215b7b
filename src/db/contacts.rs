//! Queries of the `patient_contact` table, and the one fact about appointments its
//! visibility rule needs.

use chrono::{DateTime, Utc};
use sea_orm::{
    sea_query::OnConflict, ActiveValue::Set, ColumnTrait, Condition, ConnectionTrait, EntityTrait, QueryFilter,
    QuerySelect,
};

use super::{
    entity::{appointment, patient_contact},
    StoreError,
};

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

/// A patient's contact details, if any were ever given.
pub async fn find(conn: &impl ConnectionTrait, patient_id: i64) -> Result<Option<patient_contact::Model>, StoreError> {
    Ok(patient_contact::Entity::find_by_id(patient_id).one(conn).await?)
}

/// Applies `change` in one statement (an upsert): a new row takes the values given (a field
/// left out is not on file), an existing one changes only the fields named. Returns the row.
pub async fn apply(
    conn: &impl ConnectionTrait,
    patient_id: i64,
    change: &ContactChange,
    by: &str,
    now: DateTime<Utc>,
) -> Result<patient_contact::Model, StoreError> {
    use patient_contact::Column as C;
    let row = patient_contact::ActiveModel {
        patient_id: Set(patient_id),
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
    let upsert = OnConflict::column(C::PatientId).update_columns(columns).to_owned();
    Ok(patient_contact::Entity::insert(row).on_conflict(upsert).exec_with_returning(conn).await?)
}

/// Whether the caller scope `booked_by` made (or first made, before someone else rescheduled
/// it) any appointment of the patient, whatever its status: a partner sees the contact
/// details of the patients it booked.
pub async fn booked_by(conn: &impl ConnectionTrait, patient_id: i64, scope: &str) -> Result<bool, StoreError> {
    use appointment::Column as A;
    let found = appointment::Entity::find()
        .select_only()
        .column(A::Id)
        .filter(A::PatientId.eq(patient_id))
        .filter(Condition::any().add(A::BookedBy.eq(scope)).add(A::FirstBookedBy.eq(scope)))
        .limit(1)
        .into_tuple::<i64>()
        .one(conn)
        .await?;
    Ok(found.is_some())
}
