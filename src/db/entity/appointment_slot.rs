//! `appointment_slot`: the slots after the first of an appointment longer than one slot.

use sea_orm::entity::prelude::*;

/// One further slot of a longer appointment.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "appointment_slot")]
pub struct Model {
    /// The appointment.
    #[sea_orm(primary_key, auto_increment = false)]
    pub appointment_id: i64,
    /// One of its slots after the first.
    #[sea_orm(primary_key, auto_increment = false)]
    pub slot_id: i64,
}

/// The slot, for ordering an appointment's slots by start.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {
    /// The slot taken.
    #[sea_orm(belongs_to = "super::time_slot::Entity", from = "Column::SlotId", to = "super::time_slot::Column::Id")]
    Slot,
}

impl Related<super::time_slot::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::Slot.def()
    }
}

impl ActiveModelBehavior for ActiveModel {}
