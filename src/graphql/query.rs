//! The booking part of the `Query` root: thin resolvers over [`BookingService`].

use async_graphql::{
    connection::{Connection, Edge},
    Context, Object, Result, ID,
};

use super::{
    context::{caller, principal, record_stamp},
    cursor,
    error::{to_graphql, IntoGraphql},
    scalars::Date,
    types::{Appointment, Doctor, Slot},
};
use crate::booking::BookingService;

/// Reads of doctors, slots and appointments.
#[derive(Default)]
pub struct BookingQuery;

#[Object]
impl BookingQuery {
    /// Doctors by id, `first` (0–100, default 20) after the cursor `after`.
    async fn doctors(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
    ) -> Result<Connection<String, Doctor>> {
        let after_id = after.as_deref().map(|c| cursor::decode(CURSOR_PREFIX, c)).transpose().map_err(to_graphql)?;
        let page = ctx.data::<BookingService>()?.doctors(first, after_id).await.gql()?;
        let mut conn = Connection::new(after_id.is_some(), page.has_next);
        conn.edges.extend(page.doctors.into_iter().map(|d| Edge::new(cursor::encode(CURSOR_PREFIX, d.id), Doctor(d))));
        Ok(conn)
    }

    /// One doctor, or null.
    async fn doctor(&self, ctx: &Context<'_>, id: ID) -> Result<Option<Doctor>> {
        Ok(ctx.data::<BookingService>()?.doctor(&id).await.gql()?.map(Doctor))
    }

    /// The doctor's slots of that day (in the doctor's zone) with a seat left and a start in
    /// the future, by start. Empty for an unknown doctor. Served from a cache: a change is seen
    /// at once after your own booking or cancel, and within the cache TTL (5 s by default)
    /// after anyone else's; booking always checks the seat itself.
    async fn available_slots(
        &self,
        ctx: &Context<'_>,
        doctor_id: ID,
        date: Date,
        #[graphql(desc = "Only slots at which an appointment this many minutes long could start now.")]
        duration_minutes: Option<i32>,
    ) -> Result<Vec<Slot>> {
        let service = ctx.data::<BookingService>()?;
        let list = service.available_slots(&doctor_id, date.0, duration_minutes).await.gql()?;
        record_stamp(ctx, list.stamp);
        Ok(list.slots.into_iter().map(Slot).collect())
    }

    /// One slot, or null.
    async fn slot(&self, ctx: &Context<'_>, id: ID) -> Result<Option<Slot>> {
        Ok(ctx.data::<BookingService>()?.slot(&id).await.gql()?.map(Slot))
    }

    /// One appointment, or null when it does not exist or the caller may not see it.
    async fn appointment(&self, ctx: &Context<'_>, id: ID) -> Result<Option<Appointment>> {
        let found = ctx.data::<BookingService>()?.appointment(principal(ctx)?, &id).await.gql()?;
        Ok(found.map(|r| Appointment(r.appointment)))
    }

    /// The caller's appointments, newest first (at most 500): a patient's own (whoever booked
    /// them), those in a doctor's slots, those a partner or admin created.
    async fn my_appointments(&self, ctx: &Context<'_>) -> Result<Vec<Appointment>> {
        let records = ctx.data::<BookingService>()?.my_appointments(caller(ctx)?).await.gql()?;
        Ok(records.into_iter().map(|r| Appointment(r.appointment)).collect())
    }
}

const CURSOR_PREFIX: &str = "doctor:";
