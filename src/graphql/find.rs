//! `findSlots`: the earliest bookable slots across doctors (contract, part three), a thin
//! resolver over [`BookingService::find_slots`].

use async_graphql::{
    connection::{Connection, ConnectionNameType, Edge, EdgeNameType, EmptyFields},
    Context, InputObject, Object, OutputType, Result, ID,
};
use chrono::{DateTime, Utc};

use super::{context::record_stamp, cursor, error::IntoGraphql, types::Slot, weekday::Weekday};
use crate::booking::{BookingService, FindRequest, SlotPosition};

/// The name cursors of this connection carry.
const CURSOR_PREFIX: &str = "slot-search:";

/// What `findSlots` looks for.
#[derive(InputObject)]
pub struct FindSlotsInput {
    /// Slots starting at or after this instant (a time already past counts as now)…
    pub from: DateTime<Utc>,
    /// …and before this one: at most 31 days after `from`.
    pub to: DateTime<Utc>,
    /// The doctor's specialty, compared case-insensitively.
    pub specialty: Option<String>,
    /// Any of these doctors (at most 100; an empty list matches nothing).
    pub doctor_ids: Option<Vec<ID>>,
    /// Days of the week, each in the slot's doctor's zone (an empty list matches nothing).
    pub weekdays: Option<Vec<Weekday>>,
    /// `HH:MM`: the slot's local start (in its doctor's zone) is at or after this.
    pub earliest_time: Option<String>,
    /// `HH:MM` (up to `24:00`): the slot's local start is before this; after `earliestTime`.
    pub latest_time: Option<String>,
    /// Only slots at which an appointment this many minutes long could start now (the run of
    /// slots it would take, each with a seat), as `availableSlots(durationMinutes)`.
    pub duration_minutes: Option<i32>,
    /// Only each doctor's earliest matching slot (default false).
    pub one_per_doctor: Option<bool>,
}

/// Names the connection `SlotSearchConnection`.
pub struct SlotSearchConnectionName;

impl ConnectionNameType for SlotSearchConnectionName {
    fn type_name<T: OutputType>() -> String {
        "SlotSearchConnection".into()
    }
}

/// Names its edges `SlotSearchEdge`.
pub struct SlotSearchEdgeName;

impl EdgeNameType for SlotSearchEdgeName {
    fn type_name<T: OutputType>() -> String {
        "SlotSearchEdge".into()
    }
}

/// A page of `findSlots`.
pub type SlotSearchConnection =
    Connection<String, Slot, EmptyFields, EmptyFields, SlotSearchConnectionName, SlotSearchEdgeName>;

/// The slot search.
#[derive(Default)]
pub struct FindQuery;

#[Object]
impl FindQuery {
    /// Bookable slots (a seat left — in every slot of the run for `durationMinutes` — starting
    /// after now, not closed) matching `input`, ordered by start, then doctor id, then slot id;
    /// `first` 1–100 (default 20) after the cursor `after`. Paging never repeats a slot and
    /// never skips one that matched throughout. Public; as fresh as `availableSlots` (an equal
    /// request is answered again from memory until one of the doctors it covers changes).
    async fn find_slots(
        &self,
        ctx: &Context<'_>,
        input: FindSlotsInput,
        first: Option<i32>,
        after: Option<String>,
    ) -> Result<SlotSearchConnection> {
        let position = after.as_deref().map(decode).transpose().gql()?;
        let req = FindRequest {
            from: input.from,
            to: input.to,
            specialty: input.specialty,
            doctor_ids: input.doctor_ids.map(|ids| ids.into_iter().map(|id| id.0).collect()),
            weekdays: input.weekdays.map(|days| days.into_iter().map(chrono::Weekday::from).collect()),
            earliest_time: input.earliest_time,
            latest_time: input.latest_time,
            duration_minutes: input.duration_minutes,
            one_per_doctor: input.one_per_doctor.unwrap_or(false),
        };
        let page = ctx.data::<BookingService>()?.find_slots(&req, first, position).await.gql()?;
        page.stamps.iter().for_each(|s| record_stamp(ctx, Some(*s)));
        let mut conn = SlotSearchConnection::new(position.is_some(), page.has_next);
        conn.edges.extend(page.slots.into_iter().map(|s| Edge::new(encode(SlotPosition::of(&s)), Slot(s))));
        Ok(conn)
    }
}

/// The cursor of a position: its start in microseconds, its doctor, its slot.
fn encode(p: SlotPosition) -> String {
    cursor::encode_parts(CURSOR_PREFIX, &[p.start_at.timestamp_micros(), p.doctor_id, p.slot_id])
}

/// The position a cursor of [`encode`] names.
fn decode(raw: &str) -> std::result::Result<SlotPosition, crate::error::ServiceError> {
    let [micros, doctor_id, slot_id] = cursor::decode_parts::<3>(CURSOR_PREFIX, raw)?;
    let start_at = DateTime::from_timestamp_micros(micros).ok_or_else(|| {
        crate::error::ServiceError::invalid(
            crate::error::Field::After.as_param(),
            "after is not a cursor of this connection",
        )
    })?;
    Ok(SlotPosition { start_at, doctor_id, slot_id })
}
