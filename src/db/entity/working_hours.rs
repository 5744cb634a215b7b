//! `working_hours`: a doctor's weekly pattern from a first day on.

use sea_orm::entity::prelude::*;

/// One pattern row; the next row of the doctor (by `valid_from`) ends it.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "working_hours")]
pub struct Model {
    /// Primary key.
    #[sea_orm(primary_key)]
    pub id: i64,
    /// The doctor.
    pub doctor_id: i64,
    /// First day, in the doctor's zone, `YYYY-MM-DD`.
    pub valid_from: String,
    /// The week's intervals, JSON (see `booking::hours::Weekly`).
    pub weekly: String,
    /// When it was set.
    pub created_at: DateTimeUtc,
}

/// No relations are navigated through sea-orm; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
