//! Partner webhooks in the API: thin resolvers over [`WebhookService`], and their types.

use async_graphql::{
    connection::{Connection, Edge},
    Context, Enum, InputObject, Object, Result, SimpleObject, ID,
};
use chrono::{DateTime, Utc};

use super::{
    context::caller,
    cursor,
    error::{to_graphql, IntoGraphql},
    types::UserError,
};
use crate::{
    db::entity::{webhook_delivery, webhook_endpoint},
    webhooks::{self, EventType, WebhookService, WithSecret},
};

/// Webhook endpoints and their deliveries.
#[derive(Default)]
pub struct WebhookQuery;

#[Object]
impl WebhookQuery {
    /// The caller's webhook endpoints, by id (an admin: every endpoint). Partners and admins.
    async fn webhook_endpoints(&self, ctx: &Context<'_>) -> Result<Vec<WebhookEndpoint>> {
        let found = ctx.data::<WebhookService>()?.endpoints(caller(ctx)?).await.gql()?;
        Ok(found.into_iter().map(WebhookEndpoint).collect())
    }

    /// An endpoint's deliveries, newest first, `first` (0–100, default 20) after the cursor
    /// `after`. Empty for an endpoint that does not exist or is not the caller's.
    async fn webhook_deliveries(
        &self,
        ctx: &Context<'_>,
        endpoint_id: ID,
        first: Option<i32>,
        after: Option<String>,
    ) -> Result<Connection<String, WebhookDelivery>> {
        let after_id = after.as_deref().map(|c| cursor::decode(CURSOR_PREFIX, c)).transpose().map_err(to_graphql)?;
        let service = ctx.data::<WebhookService>()?;
        let page = service.deliveries(caller(ctx)?, &endpoint_id, first, after_id).await.gql()?;
        let mut conn = Connection::new(after_id.is_some(), page.has_next);
        conn.edges.extend(
            page.deliveries.into_iter().map(|d| Edge::new(cursor::encode(CURSOR_PREFIX, d.id), WebhookDelivery(d))),
        );
        Ok(conn)
    }
}

/// Managing webhook endpoints.
#[derive(Default)]
pub struct WebhookMutation;

#[Object]
impl WebhookMutation {
    /// Registers an endpoint for the events of the appointments the caller creates (an admin:
    /// of every appointment). The URL must be `https://` and reach a public address. The
    /// answer carries the signing secret, shown this once. Partners and admins.
    async fn create_webhook_endpoint(
        &self,
        ctx: &Context<'_>,
        input: CreateWebhookEndpointInput,
    ) -> Result<CreateWebhookEndpointPayload> {
        let events: Option<Vec<EventType>> = input.events.map(|e| e.into_iter().map(EventType::from).collect());
        let outcome = ctx.data::<WebhookService>()?.create(caller(ctx)?, &input.url, events.as_deref()).await.gql()?;
        Ok(CreateWebhookEndpointPayload::from(outcome))
    }

    /// Deletes an endpoint with its deliveries; nothing more is sent to it.
    async fn delete_webhook_endpoint(&self, ctx: &Context<'_>, id: ID) -> Result<DeleteWebhookEndpointPayload> {
        let outcome = ctx.data::<WebhookService>()?.delete(caller(ctx)?, &id).await.gql()?;
        Ok(match outcome {
            Ok(deleted) => DeleteWebhookEndpointPayload { deleted, user_errors: vec![] },
            Err(r) => DeleteWebhookEndpointPayload { deleted: false, user_errors: vec![r.into()] },
        })
    }

    /// Gives an endpoint a new secret, shown this once. For 24 hours requests carry a
    /// signature with the old secret too, so a receiver can switch without losing events.
    async fn rotate_webhook_secret(&self, ctx: &Context<'_>, id: ID) -> Result<CreateWebhookEndpointPayload> {
        let outcome = ctx.data::<WebhookService>()?.rotate(caller(ctx)?, &id).await.gql()?;
        Ok(CreateWebhookEndpointPayload::from(outcome))
    }

    /// Enables an endpoint again that a `410 Gone` (or anything else) disabled: the events that
    /// follow reach it. Events of the time it was disabled are not sent; the deliveries that
    /// failed when it was disabled may be redelivered. An enabled endpoint is answered as it
    /// is. `secret` is always null here.
    async fn enable_webhook_endpoint(&self, ctx: &Context<'_>, id: ID) -> Result<CreateWebhookEndpointPayload> {
        let outcome = ctx.data::<WebhookService>()?.enable(caller(ctx)?, &id).await.gql()?;
        Ok(match outcome {
            Ok(endpoint) => CreateWebhookEndpointPayload {
                endpoint: Some(WebhookEndpoint(endpoint)),
                secret: None,
                user_errors: vec![],
            },
            Err(r) => CreateWebhookEndpointPayload { endpoint: None, secret: None, user_errors: vec![r.into()] },
        })
    }

    /// Queues one more attempt of a delivery, at once, with the same event id and body.
    async fn redeliver_webhook(&self, ctx: &Context<'_>, delivery_id: ID) -> Result<RedeliverWebhookPayload> {
        let outcome = ctx.data::<WebhookService>()?.redeliver(caller(ctx)?, &delivery_id).await.gql()?;
        Ok(match outcome {
            Ok(d) => RedeliverWebhookPayload { delivery: Some(WebhookDelivery(d)), user_errors: vec![] },
            Err(r) => RedeliverWebhookPayload { delivery: None, user_errors: vec![r.into()] },
        })
    }
}

/// What happened to an appointment, as a webhook tells it (`appointment.booked`, …).
#[derive(Enum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum WebhookEventType {
    /// `appointment.booked`: a seat was booked.
    AppointmentBooked,
    /// `appointment.held`: a seat was held until `expiresAt` (also a waitlist offer).
    AppointmentHeld,
    /// `appointment.confirmed`: a hold became a booking.
    AppointmentConfirmed,
    /// `appointment.cancelled`: cancelled (`cancelledBy` says by whom).
    AppointmentCancelled,
    /// `appointment.expired`: a hold ran out.
    AppointmentExpired,
    /// `appointment.rescheduled`: the new appointment of a reschedule.
    AppointmentRescheduled,
    /// `appointment.arrived`: the patient checked in at the desk.
    AppointmentArrived,
    /// `appointment.fulfilled`: the patient was seen.
    AppointmentFulfilled,
    /// `appointment.noshow`: the patient did not come.
    #[graphql(name = "APPOINTMENT_NOSHOW")]
    AppointmentNoShow,
}

impl From<WebhookEventType> for EventType {
    fn from(t: WebhookEventType) -> Self {
        match t {
            WebhookEventType::AppointmentBooked => Self::Booked,
            WebhookEventType::AppointmentHeld => Self::Held,
            WebhookEventType::AppointmentConfirmed => Self::Confirmed,
            WebhookEventType::AppointmentCancelled => Self::Cancelled,
            WebhookEventType::AppointmentExpired => Self::Expired,
            WebhookEventType::AppointmentRescheduled => Self::Rescheduled,
            WebhookEventType::AppointmentArrived => Self::Arrived,
            WebhookEventType::AppointmentFulfilled => Self::Fulfilled,
            WebhookEventType::AppointmentNoShow => Self::NoShow,
        }
    }
}

impl From<EventType> for WebhookEventType {
    fn from(t: EventType) -> Self {
        match t {
            EventType::Booked => Self::AppointmentBooked,
            EventType::Held => Self::AppointmentHeld,
            EventType::Confirmed => Self::AppointmentConfirmed,
            EventType::Cancelled => Self::AppointmentCancelled,
            EventType::Expired => Self::AppointmentExpired,
            EventType::Rescheduled => Self::AppointmentRescheduled,
            EventType::Arrived => Self::AppointmentArrived,
            EventType::Fulfilled => Self::AppointmentFulfilled,
            EventType::NoShow => Self::AppointmentNoShow,
        }
    }
}

/// Where a delivery stands.
#[derive(Enum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum WebhookDeliveryStatus {
    /// Not accepted yet: an attempt is due at `nextAttemptAt` (or under way).
    Pending,
    /// The endpoint answered 2xx.
    Succeeded,
    /// Given up: every attempt failed, or the endpoint was disabled.
    Failed,
}

/// A URL told about appointment events.
pub struct WebhookEndpoint(pub(crate) webhook_endpoint::Model);

/// A URL told about appointment events.
#[Object(serial)]
impl WebhookEndpoint {
    /// Stable id.
    async fn id(&self) -> ID {
        ID(self.0.id.to_string())
    }

    /// Where events are POSTed.
    async fn url(&self) -> &str {
        &self.0.url
    }

    /// The event types it receives (all of them when created without a filter; such an
    /// endpoint also gets types added later).
    async fn events(&self) -> Vec<WebhookEventType> {
        webhooks::event::read_filter(self.0.events.as_deref()).into_iter().map(WebhookEventType::from).collect()
    }

    /// False once it answered `410 Gone`: nothing more is sent to it until
    /// `enableWebhookEndpoint`.
    async fn enabled(&self) -> bool {
        self.0.enabled
    }

    /// When it was created.
    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }
}

/// One event on its way to one endpoint.
pub struct WebhookDelivery(pub(crate) webhook_delivery::Model);

/// One event on its way to one endpoint.
#[Object(serial)]
impl WebhookDelivery {
    /// Stable id.
    async fn id(&self) -> ID {
        ID(self.0.id.to_string())
    }

    /// The event's id: the `webhook-id` header of every attempt (and redelivery) of it.
    async fn event_id(&self) -> ID {
        ID(self.0.event_id.clone())
    }

    /// The event type.
    async fn event_type(&self) -> Result<WebhookEventType> {
        EventType::parse(&self.0.event_type).map(WebhookEventType::from).ok_or_else(|| {
            tracing::error!(delivery = self.0.id, "stored event type unknown");
            super::error::internal()
        })
    }

    /// Attempts made so far.
    async fn attempts(&self) -> i32 {
        self.0.attempts
    }

    /// Where it stands.
    async fn status(&self) -> WebhookDeliveryStatus {
        match self.0.status.as_str() {
            webhook_delivery::SUCCEEDED => WebhookDeliveryStatus::Succeeded,
            webhook_delivery::FAILED => WebhookDeliveryStatus::Failed,
            _ => WebhookDeliveryStatus::Pending,
        }
    }

    /// The HTTP status of the last attempt's answer (none when it got no answer).
    async fn last_status_code(&self) -> Option<i32> {
        self.0.last_status_code
    }

    /// When the last attempt started.
    async fn last_attempt_at(&self) -> Option<DateTime<Utc>> {
        self.0.last_attempt_at
    }

    /// When the next attempt is due, while `PENDING`.
    async fn next_attempt_at(&self) -> Option<DateTime<Utc>> {
        self.0.next_attempt_at
    }
}

/// A new endpoint.
#[derive(InputObject, Debug)]
pub struct CreateWebhookEndpointInput {
    /// `https://` URL reaching a public address (plain `http://` only for hosts in
    /// `WEBHOOK_ALLOW_CIDRS`), at most 2048 characters, without user name or password.
    pub url: String,
    /// The event types to receive; none (or empty) = all.
    pub events: Option<Vec<WebhookEventType>>,
}

/// The answer to `createWebhookEndpoint`, `rotateWebhookSecret` and `enableWebhookEndpoint`.
#[derive(SimpleObject)]
#[graphql(serial)]
pub struct CreateWebhookEndpointPayload {
    /// The endpoint, unless refused.
    pub endpoint: Option<WebhookEndpoint>,
    /// The signing secret (`whsec_…`), shown only in this answer (null for
    /// `enableWebhookEndpoint`, which keeps the secret).
    pub secret: Option<String>,
    /// Why it was refused; empty otherwise.
    pub user_errors: Vec<UserError>,
}

impl From<Result<WithSecret, crate::error::Refusal>> for CreateWebhookEndpointPayload {
    fn from(outcome: Result<WithSecret, crate::error::Refusal>) -> Self {
        match outcome {
            Ok(w) => Self { endpoint: Some(WebhookEndpoint(w.endpoint)), secret: Some(w.secret), user_errors: vec![] },
            Err(r) => Self { endpoint: None, secret: None, user_errors: vec![r.into()] },
        }
    }
}

/// The answer to `deleteWebhookEndpoint`.
#[derive(SimpleObject)]
#[graphql(serial)]
pub struct DeleteWebhookEndpointPayload {
    /// True when this call deleted it.
    pub deleted: bool,
    /// Why it was refused; empty otherwise.
    pub user_errors: Vec<UserError>,
}

/// The answer to `redeliverWebhook`.
#[derive(SimpleObject)]
#[graphql(serial)]
pub struct RedeliverWebhookPayload {
    /// The delivery, `PENDING` again, unless refused.
    pub delivery: Option<WebhookDelivery>,
    /// Why it was refused; empty otherwise.
    pub user_errors: Vec<UserError>,
}

const CURSOR_PREFIX: &str = "webhook-delivery:";
