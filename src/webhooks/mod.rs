//! Partner webhooks: endpoints partners and admins register, the deliveries committed
//! appointment events make for them, and the workers that send those deliveries, signed by
//! the Standard Webhooks scheme and retried on its schedule.
//!
//! The path of one event:
//!
//! 1. the outbox relay hands every committed appointment event to [`WebhookRecorder`] (a
//!    [`crate::events::FollowUp`]) inside the transaction that deletes its outbox row; it
//!    records one delivery per subscribed, enabled endpoint, with the body and event id every
//!    attempt will send (so a rolled-back change sends nothing, and a restart loses nothing);
//! 2. after that commit it wakes the instance's [`sender`], which claims due deliveries (any
//!    instance's worker may: claims are leases in the database), POSTs them, logs each attempt
//!    and schedules the next on `WEBHOOK_RETRY_SCHEDULE`, or gives up (`FAILED`);
//! 3. every connection passes the SSRF rule of [`address`] again.
//!
//! Delivery is at least once: a worker stopped between the partner's answer and writing it
//! down sends again later, with the same `webhook-id`, which receivers deduplicate on.

pub mod address;
pub mod event;
mod follow_up;
pub mod sender;
pub mod settings;
pub mod signing;

use std::sync::Arc;

use chrono::{DateTime, Duration as TimeDelta, Utc};
use tokio::sync::Notify;

pub use address::UrlPolicy;
pub use event::EventType;
pub use follow_up::{EventIds, WebhookRecorder};
pub use sender::WebhookTasks;
pub use settings::Settings;

use crate::{
    auth::{Caller, Role},
    booking::input::parse_id,
    db::{
        entity::{webhook_delivery, webhook_endpoint},
        micros, webhooks as store, Db,
    },
    error::{Field, Outcome, Refusal, ServiceError},
};

/// Most endpoints one partner (or admin) may have.
pub const MAX_ENDPOINTS_PER_OWNER: u64 = 20;
/// How long the secret before a rotation still signs.
pub const ROTATION_OVERLAP_HOURS: i64 = 24;
/// Largest `first` of the deliveries connection.
pub const MAX_PAGE: i32 = 100;

/// The endpoint operations, shared by every request of an instance.
#[derive(Clone)]
pub struct WebhookService {
    db: Db,
    policy: Arc<UrlPolicy>,
    /// Attempts of a new delivery: the first plus one per wait of the schedule.
    max_attempts: i32,
    /// Rings the instance's sender (a redelivery is due at once).
    wake: Arc<Notify>,
}

/// An endpoint with its secret, as created or rotated (the only time the secret is shown).
#[derive(Clone)]
pub struct WithSecret {
    /// The endpoint.
    pub endpoint: webhook_endpoint::Model,
    /// Its new secret.
    pub secret: String,
}

/// One page of an endpoint's deliveries.
#[derive(Clone, Debug, Default)]
pub struct DeliveryPage {
    /// The deliveries, newest first.
    pub deliveries: Vec<webhook_delivery::Model>,
    /// Whether more follow.
    pub has_next: bool,
}

impl WebhookService {
    /// A service on `db` with the URL rule `policy`; new deliveries get `max_attempts`.
    pub fn new(db: Db, policy: Arc<UrlPolicy>, max_attempts: i32, wake: Arc<Notify>) -> Self {
        Self { db, policy, max_attempts, wake }
    }

    /// Attempts a new delivery is allowed.
    pub fn max_attempts(&self) -> i32 {
        self.max_attempts
    }

    /// `createWebhookEndpoint`: checks the URL, makes a secret, stores the endpoint.
    pub async fn create(&self, caller: &Caller, url: &str, events: Option<&[EventType]>) -> Outcome<WithSecret> {
        let role = managing_role(caller)?;
        let checked = match self.policy.check(url).await {
            Ok(c) => c,
            Err(msg) => return Ok(Err(Refusal::invalid(Field::Url.in_request(), msg))),
        };
        let owner = caller.scope();
        if store::count_endpoints(self.db.conn(), &owner).await? >= MAX_ENDPOINTS_PER_OWNER {
            return Ok(Err(Refusal::invalid(
                Field::Url.in_request(),
                format!("at most {MAX_ENDPOINTS_PER_OWNER} endpoints each; delete one first"),
            )));
        }
        let secret = signing::new_secret();
        let _writing = self.db.writing().await;
        let endpoint = store::insert_endpoint(
            self.db.conn(),
            store::NewEndpoint {
                owner: &owner,
                owner_role: role,
                url: checked.url.as_str(),
                events: event::store_filter(events),
                secret: &secret,
                created_at: micros(Utc::now()),
            },
        )
        .await?;
        tracing::info!(endpoint = endpoint.id, owner = %owner, "webhook endpoint created");
        Ok(Ok(WithSecret { endpoint, secret }))
    }

    /// `deleteWebhookEndpoint`: true when this call deleted it.
    pub async fn delete(&self, caller: &Caller, raw_id: &str) -> Outcome<bool> {
        managing_role(caller)?;
        let endpoint = match self.visible_endpoint(caller, raw_id).await? {
            Ok(e) => e,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let _writing = self.db.writing().await;
        let deleted = store::delete_endpoint(self.db.conn(), endpoint.id).await?;
        if deleted {
            tracing::info!(endpoint = endpoint.id, "webhook endpoint deleted");
        }
        Ok(Ok(deleted))
    }

    /// `rotateWebhookSecret`: a new secret; the old one keeps signing (beside it) for 24 h.
    pub async fn rotate(&self, caller: &Caller, raw_id: &str) -> Outcome<WithSecret> {
        managing_role(caller)?;
        let endpoint = match self.visible_endpoint(caller, raw_id).await? {
            Ok(e) => e,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let secret = signing::new_secret();
        let until = micros(Utc::now()) + TimeDelta::hours(ROTATION_OVERLAP_HOURS);
        let _writing = self.db.writing().await;
        let Some(endpoint) = store::rotate_secret(self.db.conn(), endpoint.id, &secret, until).await? else {
            return Ok(Err(unknown(Field::Id, "webhook endpoint")));
        };
        tracing::info!(endpoint = endpoint.id, "webhook secret rotated");
        Ok(Ok(WithSecret { endpoint, secret }))
    }

    /// `enableWebhookEndpoint`: an endpoint a `410` (or anything else) disabled gets the events
    /// that follow again (the deliveries failed meanwhile stay failed; each may be redelivered).
    /// An enabled one is answered as it is, without a write.
    pub async fn enable(&self, caller: &Caller, raw_id: &str) -> Outcome<webhook_endpoint::Model> {
        managing_role(caller)?;
        let endpoint = match self.visible_endpoint(caller, raw_id).await? {
            Ok(e) => e,
            Err(refusal) => return Ok(Err(refusal)),
        };
        if endpoint.enabled {
            return Ok(Ok(endpoint));
        }
        let _writing = self.db.writing().await;
        let Some(endpoint) = store::enable_endpoint(self.db.conn(), endpoint.id).await? else {
            return Ok(Err(unknown(Field::Id, "webhook endpoint")));
        };
        tracing::info!(endpoint = endpoint.id, "webhook endpoint enabled again");
        Ok(Ok(endpoint))
    }

    /// `redeliverWebhook`: one more attempt of a delivery, due now, same event id and body.
    pub async fn redeliver(&self, caller: &Caller, raw_id: &str) -> Outcome<webhook_delivery::Model> {
        managing_role(caller)?;
        let id = match parse_id(Field::DeliveryId.name(), raw_id) {
            Ok(id) => id,
            Err(msg) => return Ok(Err(Refusal::invalid(Field::DeliveryId.as_param(), msg))),
        };
        let Some(delivery) = store::find_delivery(self.db.conn(), id).await? else {
            return Ok(Err(unknown(Field::DeliveryId, "webhook delivery")));
        };
        let endpoint = store::find_endpoint(self.db.conn(), delivery.endpoint_id).await?;
        let Some(endpoint) = endpoint.filter(|e| may_manage(caller, e)) else {
            return Ok(Err(unknown(Field::DeliveryId, "webhook delivery")));
        };
        if !endpoint.enabled {
            return Ok(Err(Refusal::invalid(
                Field::DeliveryId.as_param(),
                "the endpoint is disabled (it answered 410 Gone); enable it with enableWebhookEndpoint first",
            )));
        }
        let _writing = self.db.writing().await;
        let Some(delivery) = store::redeliver(self.db.conn(), id, micros(Utc::now())).await? else {
            return Ok(Err(unknown(Field::DeliveryId, "webhook delivery")));
        };
        self.wake.notify_one();
        Ok(Ok(delivery))
    }

    /// `webhookEndpoints`: a partner's own; every endpoint for an admin.
    pub async fn endpoints(&self, caller: &Caller) -> Result<Vec<webhook_endpoint::Model>, ServiceError> {
        let owner = match managing_role(caller)? {
            ADMIN => None,
            _ => Some(caller.scope()),
        };
        Ok(store::list_endpoints(self.db.conn(), owner.as_deref()).await?)
    }

    /// `webhookDeliveries`: an endpoint's deliveries, newest first, `first` after the delivery
    /// `after`. Empty for an endpoint that does not exist or is not the caller's.
    pub async fn deliveries(
        &self,
        caller: &Caller,
        raw_endpoint_id: &str,
        first: Option<i32>,
        after: Option<i64>,
    ) -> Result<DeliveryPage, ServiceError> {
        managing_role(caller)?;
        let first = first.unwrap_or(20);
        if !(0..=MAX_PAGE).contains(&first) {
            return Err(ServiceError::invalid(
                Field::First.as_param(),
                format!("first must be between 0 and {MAX_PAGE}"),
            ));
        }
        let id = parse_id(Field::EndpointId.name(), raw_endpoint_id)
            .map_err(|m| ServiceError::invalid(Field::EndpointId.as_param(), m))?;
        let visible = store::find_endpoint(self.db.conn(), id).await?.filter(|e| may_manage(caller, e));
        if visible.is_none() {
            return Ok(DeliveryPage::default());
        }
        let limit = u64::from(first.unsigned_abs());
        let mut deliveries = store::deliveries_page(self.db.conn(), id, after, limit + 1).await?;
        let has_next = deliveries.len() as u64 > limit;
        deliveries.truncate(first.unsigned_abs() as usize);
        Ok(DeliveryPage { deliveries, has_next })
    }

    async fn visible_endpoint(
        &self,
        caller: &Caller,
        raw_id: &str,
    ) -> Result<Result<webhook_endpoint::Model, Refusal>, ServiceError> {
        let id = match parse_id(Field::Id.name(), raw_id) {
            Ok(id) => id,
            Err(msg) => return Ok(Err(Refusal::invalid(Field::Id.as_param(), msg))),
        };
        let found = store::find_endpoint(self.db.conn(), id).await?.filter(|e| may_manage(caller, e));
        Ok(found.ok_or_else(|| unknown(Field::Id, "webhook endpoint")))
    }
}

const PARTNER: &str = "partner";
const ADMIN: &str = "admin";

/// The stored role of a caller who may manage endpoints; others are `FORBIDDEN`.
fn managing_role(caller: &Caller) -> Result<&'static str, ServiceError> {
    match caller.role {
        Role::Partner => Ok(PARTNER),
        Role::Admin => Ok(ADMIN),
        Role::Patient | Role::Doctor => {
            Err(ServiceError::Forbidden("only partners and admins manage webhook endpoints".into()))
        }
    }
}

/// A partner manages its own endpoints; an admin every endpoint.
fn may_manage(caller: &Caller, endpoint: &webhook_endpoint::Model) -> bool {
    caller.role == Role::Admin || (caller.role == Role::Partner && endpoint.owner == caller.scope())
}

/// The answer for an id that does not exist or is not the caller's (the same, so ids leak
/// nothing): `INVALID_INPUT` on that parameter, the contract having no code of its own for it.
fn unknown(field: Field, what: &str) -> Refusal {
    Refusal::invalid(field.as_param(), format!("no {what} with this id"))
}

/// The signing keys of an endpoint at `now`: its secret, then the one it replaced while the
/// rotation window lasts.
pub fn signing_keys(
    endpoint: &webhook_endpoint::Model,
    now: DateTime<Utc>,
) -> Result<Vec<signing::SigningKey>, String> {
    let mut keys = vec![signing::secret_key(&endpoint.secret)?];
    if let (Some(previous), Some(until)) = (&endpoint.previous_secret, endpoint.previous_secret_until) {
        if now < until {
            keys.push(signing::secret_key(previous)?);
        }
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn the_old_secret_signs_until_the_rotation_window_ends() {
        let t = Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap();
        let endpoint = webhook_endpoint::Model {
            id: 1,
            owner: "partner:p".into(),
            owner_role: "partner".into(),
            url: "https://example.com/".into(),
            events: None,
            secret: signing::new_secret(),
            previous_secret: Some(signing::new_secret()),
            previous_secret_until: Some(t + TimeDelta::hours(ROTATION_OVERLAP_HOURS)),
            enabled: true,
            disabled_at: None,
            created_at: t,
        };
        let count = |at| signing_keys(&endpoint, at).unwrap().len();
        assert_eq!(count(t), 2);
        assert_eq!(count(t + TimeDelta::hours(24) - TimeDelta::seconds(1)), 2);
        assert_eq!(count(t + TimeDelta::hours(24)), 1);
        let mut never_rotated = endpoint.clone();
        never_rotated.previous_secret = None;
        never_rotated.previous_secret_until = None;
        assert_eq!(signing_keys(&never_rotated, t).unwrap().len(), 1);
    }

    #[test]
    fn who_manages_endpoints() {
        let caller = |role, sub: &str| Caller::local(sub, role, None, None);
        let mut endpoint = webhook_endpoint::Model {
            id: 1,
            owner: "partner:a".into(),
            owner_role: "partner".into(),
            url: String::new(),
            events: None,
            secret: String::new(),
            previous_secret: None,
            previous_secret_until: None,
            enabled: true,
            disabled_at: None,
            created_at: Utc::now(),
        };
        assert!(may_manage(&caller(Role::Partner, "a"), &endpoint));
        assert!(!may_manage(&caller(Role::Partner, "b"), &endpoint));
        assert!(may_manage(&caller(Role::Admin, "root"), &endpoint));
        endpoint.owner = "admin:root".into();
        assert!(!may_manage(&caller(Role::Partner, "root"), &endpoint));
        for role in [Role::Patient, Role::Doctor] {
            assert!(matches!(managing_role(&caller(role, "1")), Err(ServiceError::Forbidden(_))));
        }
    }
}
