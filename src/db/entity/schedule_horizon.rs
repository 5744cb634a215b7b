//! `schedule_horizon`: per doctor, the last day whose pattern slots exist.

use sea_orm::entity::prelude::*;

/// One doctor's horizon.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "schedule_horizon")]
pub struct Model {
    /// The doctor.
    #[sea_orm(primary_key, auto_increment = false)]
    pub doctor_id: i64,
    /// The last day, in the doctor's zone, `YYYY-MM-DD`, whose slots its working hours made.
    pub scheduled_through: String,
    /// When it last moved.
    pub updated_at: DateTimeUtc,
}

/// No relations are navigated through sea-orm; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
