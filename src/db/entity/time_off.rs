//! `time_off`: a range without slots, for one doctor or the whole clinic.

use sea_orm::entity::prelude::*;

/// One time-off entry.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "time_off")]
pub struct Model {
    /// Primary key.
    #[sea_orm(primary_key)]
    pub id: i64,
    /// The doctor; `None` for the whole clinic.
    pub doctor_id: Option<i64>,
    /// First instant off (inclusive).
    pub from_at: DateTimeUtc,
    /// First instant not off (exclusive).
    pub to_at: DateTimeUtc,
    /// Why, as the clinic said.
    pub reason: Option<String>,
    /// When it was added.
    pub created_at: DateTimeUtc,
    /// When it was removed; removed entries close nothing and hold back no slot.
    pub removed_at: Option<DateTimeUtc>,
}

/// No relations are navigated through sea-orm; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
