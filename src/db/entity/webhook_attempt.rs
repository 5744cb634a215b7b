//! `webhook_attempt`: the log of every attempt to send a delivery.

use sea_orm::entity::prelude::*;

/// One attempt.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_attempt")]
pub struct Model {
    /// Primary key.
    #[sea_orm(primary_key)]
    pub id: i64,
    /// The delivery.
    pub delivery_id: i64,
    /// Its number (1 for the first).
    pub attempt: i32,
    /// When it started.
    pub started_at: DateTimeUtc,
    /// How long it took, in milliseconds.
    pub duration_ms: i32,
    /// The HTTP status of the answer, if one came.
    pub status_code: Option<i32>,
    /// Why no acceptable answer came (connect error, timeout, refused address).
    pub error: Option<String>,
}

/// No relations are navigated through sea-orm.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
