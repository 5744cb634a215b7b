//! `doctor`: a practitioner whose schedule has slots.

use sea_orm::entity::prelude::*;

/// One doctor row.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "doctor")]
pub struct Model {
    /// Primary key.
    #[sea_orm(primary_key)]
    pub id: i64,
    /// Display name.
    pub name: String,
    /// Free-text specialty.
    pub specialty: Option<String>,
    /// IANA time zone the doctor's dates and times are in.
    pub timezone: String,
    /// When the row was made.
    pub created_at: DateTimeUtc,
}

/// No relations are navigated through sea-orm; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
