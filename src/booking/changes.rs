//! What one write transaction did to slots and appointments, collected while it runs and
//! recorded in its outbox just before it commits; then told to live availability, the caches
//! and the known-full marks once it has committed.
//!
//! Every operation that moves seats (book, hold, cancel, expire, reschedule, close) goes
//! through here, so each committed change reaches subscribers, drops the cached lists it
//! changed and updates the marks the same way, whichever operation made it.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use sea_orm::ConnectionTrait;

use super::BookingService;
use crate::{
    db::{
        appointments,
        entity::{appointment, time_slot},
        outbox::{self, NewRow},
        slots, StoreError,
    },
    model::{AppointmentEvent, AppointmentState, SlotChange, SLOT_ONLY},
};

/// The slots a transaction changed (their state after its last statement) and the
/// appointment events it caused.
#[derive(Debug, Default)]
pub(super) struct Changes {
    slots: BTreeMap<i64, time_slot::Model>,
    /// Slots that gave seats back (their known-full marks must go).
    released: std::collections::BTreeSet<i64>,
    /// Slots deleted (a pattern change): told as closed, never marked full, so that a booking
    /// reaches the database and finds no slot.
    removed: std::collections::BTreeSet<i64>,
    /// Seats given back and not taken again within the transaction, per slot: what the
    /// waitlist may offer.
    freed: BTreeMap<i64, i32>,
    /// Each event, with the appointment as the event left it and, when the event changed
    /// it, the appointment's first slot (whose state goes into the same outbox row).
    events: Vec<(AppointmentEvent, i64, AppointmentState, Option<i64>)>,
}

impl Changes {
    /// Notes slots as a statement left them, after taking seats.
    pub(super) fn taken(&mut self, taken: &[time_slot::Model]) {
        for s in taken {
            self.slots.insert(s.id, s.clone());
            if let Some(seats) = self.freed.get_mut(&s.id) {
                *seats -= 1;
                if *seats == 0 {
                    self.freed.remove(&s.id);
                }
            }
        }
    }

    /// Notes an appointment event, with `appointment` as the event left it; `changed_slot`
    /// when the event changed its first slot (whose state goes into the same outbox row).
    pub(super) fn event(&mut self, event: AppointmentEvent, appointment: &appointment::Model, changed_slot: bool) {
        self.events.push((event, appointment.id, appointment.state(), changed_slot.then_some(appointment.slot_id)));
    }

    /// Gives back the seats of `gone` (appointments this transaction just moved out of an
    /// active status, each by its own conditional transition, so each is here once) and notes
    /// `event` for each. Returns nothing new: the released slots are noted here.
    pub(super) async fn release(
        &mut self,
        conn: &impl ConnectionTrait,
        gone: &[appointment::Model],
        event: Option<AppointmentEvent>,
    ) -> Result<(), StoreError> {
        if gone.is_empty() {
            return Ok(());
        }
        let held = appointments::slots_of(conn, gone).await?;
        let mut seats: BTreeMap<i64, i32> = BTreeMap::new();
        for slot in held.values().flatten() {
            *seats.entry(*slot).or_default() += 1;
        }
        let counts: Vec<(i64, i32)> = seats.into_iter().collect();
        for (slot, n) in &counts {
            *self.freed.entry(*slot).or_default() += n;
        }
        for slot in slots::release_seats(conn, &counts).await? {
            self.released.insert(slot.id);
            self.slots.insert(slot.id, slot);
        }
        if let Some(event) = event {
            for a in gone {
                self.event(event, a, true);
            }
        }
        Ok(())
    }

    /// The seats given back and not taken again, with their slots' state now, by start.
    pub(super) fn freed(&self) -> Vec<(time_slot::Model, i32)> {
        let mut freed: Vec<_> =
            self.freed.iter().filter_map(|(id, n)| self.slots.get(id).map(|s| (s.clone(), *n))).collect();
        freed.sort_unstable_by_key(|(s, _)| (s.start_at, s.id));
        freed
    }

    /// Notes slots a statement closed.
    pub(super) fn closed(&mut self, closed: &[time_slot::Model]) {
        self.taken(closed);
    }

    /// Notes slots a statement deleted: what subscribers, caches and the feed hear of them is the
    /// slot closed, one version on.
    pub(super) fn removed(&mut self, gone: &[time_slot::Model], now: DateTime<Utc>) {
        for s in gone {
            let mut s = s.clone();
            s.closed_at = Some(now);
            s.version += 1;
            self.removed.insert(s.id);
            self.slots.insert(s.id, s);
        }
    }

    /// Notes slots a statement opened again (time off removed): they take seats again.
    pub(super) fn reopened(&mut self, opened: &[time_slot::Model]) {
        for s in opened {
            self.released.insert(s.id);
            self.slots.insert(s.id, s.clone());
        }
    }

    /// Whether nothing changed.
    pub(super) fn is_empty(&self) -> bool {
        self.slots.is_empty() && self.events.is_empty()
    }

    /// Writes the outbox rows, in the transaction about to commit: one per event (with its
    /// first slot's final state when the event changed it), then one per other changed slot.
    pub(super) async fn record(&self, conn: &impl ConnectionTrait, at: DateTime<Utc>) -> Result<(), StoreError> {
        let mut covered = std::collections::BTreeSet::new();
        let mut rows = Vec::with_capacity(self.events.len() + self.slots.len());
        for (event, appointment, state, slot) in &self.events {
            let slot = slot.and_then(|s| self.slots.get(&s));
            if let Some(s) = slot {
                covered.insert(s.id);
            }
            rows.push(NewRow { kind: event.as_str(), appointment: Some((*appointment, state)), slot });
        }
        for slot in self.slots.values().filter(|s| !covered.contains(&s.id)) {
            rows.push(NewRow { kind: SLOT_ONLY, appointment: None, slot: Some(slot) });
        }
        outbox::record_many(conn, rows, at).await
    }
}

impl BookingService {
    /// Tells the caches, the known-full marks and live availability (with this instance's change
    /// observers) about a committed transaction. Awaited before the answer, so a client that
    /// reads after its change sees it.
    pub(super) async fn committed(&self, changes: &Changes) {
        for slot in changes.slots.values() {
            if changes.removed.contains(&slot.id) {
                self.guard.known_full.mark_open(slot).await;
            } else if slot.available() <= 0 {
                self.guard.known_full.mark_full(slot).await;
            } else if changes.released.contains(&slot.id) {
                self.guard.known_full.mark_open(slot).await;
            }
        }
        // The shared rows first, one invalidation per doctor's day however many of its slots
        // changed; then the sink, whose observers make what was read of them before stale. In
        // that order, a read made meanwhile either found the rows gone or is made stale.
        let mut days = std::collections::BTreeSet::new();
        for slot in changes.slots.values() {
            // A day that cannot be told (logged) keeps its rows for at most the cache TTL.
            if let Some(day) = self.day_of(slot).await {
                days.insert((slot.doctor_id, day));
            }
        }
        for (doctor_id, date) in days {
            self.guard.slots.invalidate(doctor_id, date).await;
        }
        for slot in changes.slots.values() {
            self.sink.committed(SlotChange::from(slot));
        }
    }
}
