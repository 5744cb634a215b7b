//! The `Subscription` root (live availability; see `crate::events`).

use async_graphql::{Context, Result, Subscription, ID};
use futures_util::Stream;

use super::{scalars::Date, types::SlotAvailabilityEvent};

/// Live operations.
pub struct SubscriptionRoot;

#[Subscription(name = "Subscription")]
impl SubscriptionRoot {
    /// The current state of every matching slot, then each committed change of them.
    async fn slot_availability(
        &self,
        ctx: &Context<'_>,
        doctor_id: ID,
        date: Option<Date>,
    ) -> Result<impl Stream<Item = SlotAvailabilityEvent>> {
        let _ = (ctx, doctor_id, date);
        Ok(futures_util::stream::empty())
    }
}
