//! `patient_contact`: the email, phone and locale a patient's messages go to, kept per booker.

use sea_orm::entity::prelude::*;

/// One patient's contact details as one booker keeps them; a `None` column is "not on file".
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "patient_contact")]
pub struct Model {
    /// The patient (with `booker`, the primary key).
    #[sea_orm(primary_key, auto_increment = false)]
    pub patient_id: i64,
    /// Whose details these are: `""` ([`crate::db::contacts::OWN`]) for the patient's own, or
    /// the scope (`partner:sub`) of the partner whose appointments they serve.
    #[sea_orm(primary_key, auto_increment = false)]
    pub booker: String,
    /// An address as validated by `crate::notify::contact` (RFC 5322 `addr-spec`).
    pub email: Option<String>,
    /// An E.164 number (`+` and 8–15 digits).
    pub phone: Option<String>,
    /// A BCP 47 language tag, for the language of the messages.
    pub locale: Option<String>,
    /// When the details last changed.
    pub updated_at: DateTimeUtc,
    /// Scope (`role:sub`) of the caller who last changed them.
    pub updated_by: String,
}

/// No relations.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
