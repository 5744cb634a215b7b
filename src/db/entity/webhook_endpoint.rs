//! `webhook_endpoint`: a URL a partner or an admin asked to be told about appointment events at.

use sea_orm::entity::prelude::*;

/// One endpoint.
#[derive(Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_endpoint")]
pub struct Model {
    /// Primary key.
    #[sea_orm(primary_key)]
    pub id: i64,
    /// Scope (`role:sub`) of the caller who created it.
    pub owner: String,
    /// `partner` or `admin`: an admin's endpoints get every event.
    pub owner_role: String,
    /// Where events are POSTed.
    pub url: String,
    /// Comma-separated event types (`appointment.booked,…`); `None` = every type.
    pub events: Option<String>,
    /// The signing secret (`whsec_…`), kept as is: signing needs it.
    pub secret: String,
    /// The secret before the last rotation, still signed with until `previous_secret_until`.
    pub previous_secret: Option<String>,
    /// End of the rotation window.
    pub previous_secret_until: Option<DateTimeUtc>,
    /// False once the endpoint answered `410 Gone`: nothing more is sent to it.
    pub enabled: bool,
    /// When it was disabled.
    pub disabled_at: Option<DateTimeUtc>,
    /// When it was created.
    pub created_at: DateTimeUtc,
}

/// Secrets stay out of logs and panics.
impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("webhook_endpoint")
            .field("id", &self.id)
            .field("owner", &self.owner)
            .field("events", &self.events)
            .field("enabled", &self.enabled)
            .finish_non_exhaustive()
    }
}

/// No relations are navigated through sea-orm; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
