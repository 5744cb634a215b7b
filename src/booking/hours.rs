//! Working hours: a doctor's weekly pattern makes its slots, `SCHEDULE_HORIZON_DAYS` ahead,
//! day after day; a pattern change brings the days from its first day to the new pattern;
//! time off closes a range and keeps the horizon out of it.
//!
//! Slots are laid out by [`plan_day`], exactly as `publishSchedule` lays out a day (the same
//! boundaries and DST rules), and inserted with `ON CONFLICT DO NOTHING` on the unique
//! `(doctor, start)`, so any number of instances rolling the horizon at once make each slot
//! once. Each doctor's pass is one transaction that moves its `scheduledThrough` with the slots
//! it made: a pass that stops halfway leaves each doctor done or untouched, and the next pass
//! finishes it. A pattern change removes the earlier pattern's slots by one conditional
//! `DELETE … WHERE booked_count = 0` (no read decides it); a slot a booking took a seat in
//! first is kept, closed, and its appointments are returned as conflicts.

use std::{
    collections::{BTreeSet, HashSet},
    time::{Duration, Instant},
};

use chrono::{DateTime, Datelike, NaiveDate, Utc};
use chrono_tz::Tz;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::{sync::watch, task::JoinHandle};

use super::{
    changes::Changes,
    close::{close_range, MAX_REASON},
    input::{parse_id, parse_local_time, parse_timezone},
    retrying,
    schedule::plan_day,
    BookingService,
};
use crate::{
    auth::{Caller, Role},
    db::{
        doctors,
        entity::{appointment, doctor, time_off, working_hours},
        hours::{self, PatternSlot},
        micros, outbox, StoreError,
    },
    error::{Field, Outcome, Refusal, ServiceError},
    model::{day_bounds, DayRange},
};

/// Why a slot is closed when a pattern change leaves it holding a seat.
const PATTERN_CHANGED: &str = "working hours changed";
/// Doctors one instance rolls at once where the database has row locks (PostgreSQL).
const ROLL_LANES: usize = 4;
/// Most intervals in one week.
const MAX_INTERVALS: usize = 7 * 48;

/// One interval of a weekday: `start_minute`..`end_minute` local minutes since midnight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interval {
    /// The day of the week.
    #[serde(with = "weekday_number")]
    pub weekday: chrono::Weekday,
    /// Local start, minutes since midnight.
    pub start_minute: u32,
    /// Local end, minutes since midnight (up to 1440).
    pub end_minute: u32,
    /// Minutes per slot.
    pub slot_minutes: u32,
    /// Seats per slot.
    pub capacity: i32,
}

mod weekday_number {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(day: &chrono::Weekday, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(day.num_days_from_monday())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<chrono::Weekday, D::Error> {
        let n = u8::deserialize(d)?;
        chrono::Weekday::try_from(n).map_err(serde::de::Error::custom)
    }
}

/// A pattern in force from `valid_from` through `valid_until` (open when `None`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pattern {
    /// First day, in the doctor's zone.
    pub valid_from: NaiveDate,
    /// Last day: the day before the next pattern's first.
    pub valid_until: Option<NaiveDate>,
    /// The week's intervals, by weekday and start.
    pub weekly: Vec<Interval>,
}

/// One interval of a `setWorkingHours` request, values not yet checked.
#[derive(Clone, Debug)]
pub struct WeeklyRequest {
    /// The day of the week.
    pub weekday: chrono::Weekday,
    /// `HH:MM` local.
    pub start_time: String,
    /// `HH:MM` local (24:00 for midnight at the end of the day).
    pub end_time: String,
    /// Minutes per slot (default 15).
    pub slot_minutes: Option<i32>,
    /// Seats per slot (default 1).
    pub capacity: Option<i32>,
}

/// A `setWorkingHours` request.
#[derive(Clone, Debug)]
pub struct HoursRequest {
    /// The doctor's id.
    pub doctor_id: String,
    /// First day, in the doctor's zone (not before today).
    pub valid_from: NaiveDate,
    /// The week; empty means no hours from `valid_from` on.
    pub weekly: Vec<WeeklyRequest>,
}

/// The answer to `setWorkingHours`.
#[derive(Clone, Debug)]
pub struct HoursSet {
    /// The pattern now in force from its first day.
    pub pattern: Pattern,
    /// Slots made by this call.
    pub created: u64,
    /// Slots of the earlier pattern this call removed.
    pub removed: u64,
    /// Active appointments left in slots the new pattern does not have (kept, closed), by start.
    pub conflicts: Vec<appointment::Model>,
}

/// An `addTimeOff` request.
#[derive(Clone, Debug)]
pub struct TimeOffRequest {
    /// The doctor's id; `None` for the whole clinic.
    pub doctor_id: Option<String>,
    /// First instant off.
    pub from: DateTime<Utc>,
    /// First instant not off.
    pub to: DateTime<Utc>,
    /// Why.
    pub reason: Option<String>,
}

/// The answer to `addTimeOff`.
#[derive(Clone, Debug)]
pub struct TimeOffAdded {
    /// The entry.
    pub time_off: time_off::Model,
    /// Slots this call closed.
    pub closed: u64,
    /// Appointments this call cancelled, by start.
    pub cancelled: Vec<appointment::Model>,
}

/// The answer to `removeTimeOff`.
#[derive(Clone, Debug)]
pub struct TimeOffRemoved {
    /// The entry as it is now.
    pub time_off: time_off::Model,
    /// Whether this call removed it (false: it was removed already).
    pub removed: bool,
    /// Slots that take seats again: those it had closed, opened, and the pattern's slots made.
    pub reopened: u64,
}

/// What one horizon pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RollReport {
    /// Doctors whose horizon this pass moved.
    pub doctors: u64,
    /// Slots it made.
    pub created: u64,
}

impl RollReport {
    /// Counts one doctor's pass (`None`: another pass had done it).
    fn add(&mut self, created: Option<u64>) {
        if let Some(created) = created {
            self.doctors += 1;
            self.created += created;
        }
    }
}

/// How long the daily roll rests after a doctor's pass that took `worked`, so that it works
/// `share_percent` of the time: a busier database makes both longer.
fn pause_after(worked: Duration, share_percent: u32) -> Duration {
    let share = share_percent.clamp(1, 100);
    worked * (100 - share) / share
}

impl BookingService {
    /// `setWorkingHours`: sets the doctor's pattern from `valid_from` on and brings the days up
    /// to the horizon to it, in one transaction (admins, or that doctor).
    #[tracing::instrument(level = "debug", skip_all, fields(doctor = %req.doctor_id, from = %req.valid_from))]
    pub async fn set_working_hours(&self, caller: &Caller, req: &HoursRequest) -> Outcome<HoursSet> {
        let doctor_id = match super::managed_doctor(caller, &req.doctor_id, "set working hours")? {
            Ok(id) => id,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let weekly = match check_weekly(&req.weekly) {
            Ok(w) => w,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let Some(doctor) = doctors::find(self.db.conn(), doctor_id).await? else {
            return Ok(Err(Refusal::invalid(Field::DoctorId.in_request(), "no doctor with this id")));
        };
        let tz = zone_of(&doctor)?;
        if req.valid_from < today(tz) {
            return Ok(Err(Refusal::invalid(Field::ValidFrom.in_request(), "validFrom must not be before today")));
        }
        let json = serde_json::to_string(&weekly)
            .map_err(|e| StoreError::Inconsistent(format!("working hours do not serialize: {e}")))?;
        let from_day = req.valid_from;
        let done = retrying(|| async {
            let now = micros(Utc::now());
            let tx = self.db.begin_write().await?;
            hours::lock_doctors(&tx, &[doctor_id]).await?;
            hours::replace_patterns_from(&tx, doctor_id, &day_text(from_day), &json, now).await?;
            let patterns = patterns_from_rows(&hours::patterns_of(&tx, &[doctor_id]).await?)?;
            let through = hours::horizons_of(&tx, &[doctor_id]).await?.remove(&doctor_id);
            let target = self.horizon_end(tz);
            // Slots of the earlier pattern that the new one does not have: their times never
            // change, so choosing them from a read decides nothing about seats.
            let existing = hours::pattern_slots_after(&tx, doctor_id, day_bounds(tz, from_day).0, now).await?;
            let last_existing = existing.last().map(|s| s.start_at.with_timezone(&tz).date_naive());
            let end_day = [Some(target), through.as_deref().and_then(parse_day), last_existing]
                .into_iter()
                .flatten()
                .max()
                .unwrap_or(target);
            let wanted: HashSet<(DateTime<Utc>, DateTime<Utc>, i32)> =
                plan_days(doctor_id, tz, &patterns, from_day, end_day, now, &[])
                    .into_iter()
                    .map(|s| (s.start_at, s.end_at, s.capacity))
                    .collect();
            let gone: Vec<i64> = existing
                .iter()
                .filter(|s| !wanted.contains(&(s.start_at, s.end_at, s.capacity)))
                .map(|s| s.id)
                .collect();
            let mut changes = Changes::default();
            let removed = hours::remove_unheld(&tx, &gone).await?;
            changes.removed(&removed, now);
            let removed_ids: HashSet<i64> = removed.iter().map(|s| s.id).collect();
            let kept: Vec<i64> = gone.iter().copied().filter(|id| !removed_ids.contains(id)).collect();
            changes.closed(&hours::close_ids(&tx, &kept, PATTERN_CHANGED, now).await?);
            let conflicts = hours::active_in_slots(&tx, &kept).await?;
            let off = time_off_ranges(&tx, doctor_id, now).await?;
            let made = plan_days(doctor_id, tz, &patterns, today(tz), end_day, now, &off);
            let created = hours::insert_pattern_slots(&tx, &made).await?;
            hours::advance_horizon(&tx, doctor_id, &day_text(end_day), now).await?;
            if created > 0 {
                outbox::record_published(&tx, doctor_id, now).await?;
            }
            if !changes.is_empty() {
                changes.record(&tx, now).await?;
            }
            tx.commit().await?;
            Ok::<_, StoreError>((created, removed.len() as u64, conflicts, changes, patterns, end_day))
        })
        .await?;
        let (created, removed, conflicts, changes, patterns, end_day) = done;
        self.committed(&changes).await;
        if created > 0 {
            self.published_days(doctor_id, today(tz), end_day).await;
        }
        let pattern = patterns
            .into_iter()
            .find(|p| p.valid_from == from_day)
            .ok_or_else(|| StoreError::Inconsistent("the pattern just set is missing".into()))?;
        Ok(Ok(HoursSet { pattern, created, removed, conflicts }))
    }

    /// The doctor's patterns in force today or later, by first day (ended ones left out).
    pub async fn working_hours(&self, doctor: &doctor::Model) -> Result<Vec<Pattern>, ServiceError> {
        let tz = zone_of(doctor)?;
        let today = today(tz);
        let patterns = patterns_from_rows(&hours::patterns_of(self.db.conn(), &[doctor.id]).await?)?;
        Ok(patterns.into_iter().filter(|p| p.valid_until.is_none_or(|u| u >= today)).collect())
    }

    /// The last day whose slots the doctor's working hours made (`None` before any).
    pub async fn scheduled_through(&self, doctor_id: i64) -> Result<Option<NaiveDate>, ServiceError> {
        Ok(hours::horizons_of(self.db.conn(), &[doctor_id]).await?.remove(&doctor_id).as_deref().and_then(parse_day))
    }

    /// The time off in force overlapping `[from, to)`: the doctor's own and the clinic's
    /// (`doctor_id` `None`: the clinic's only), by start.
    pub async fn time_off(
        &self,
        doctor_id: Option<i64>,
        from: Option<DateTime<Utc>>,
        to: Option<DateTime<Utc>>,
    ) -> Result<Vec<time_off::Model>, ServiceError> {
        let ids: Vec<i64> = doctor_id.into_iter().collect();
        Ok(hours::time_off_overlapping(self.db.conn(), &ids, true, from, to).await?)
    }

    /// `addTimeOff`: closes the range like `closeSlots` (for one doctor, or every doctor) and
    /// keeps the horizon out of it.
    #[tracing::instrument(level = "debug", skip_all, fields(caller = %caller.scope()))]
    pub async fn add_time_off(&self, caller: &Caller, req: &TimeOffRequest) -> Outcome<TimeOffAdded> {
        let doctor_id = match req.doctor_id.as_deref().map(|raw| parse_id(Field::DoctorId.name(), raw)).transpose() {
            Ok(id) => id,
            Err(msg) => {
                if !matches!(caller.role, Role::Admin | Role::Doctor) {
                    return Err(ServiceError::Forbidden("only admins and doctors may add time off".into()));
                }
                return Ok(Err(Refusal::invalid(Field::DoctorId.in_request(), msg)));
            }
        };
        let allowed = match doctor_id {
            Some(id) => caller.manages_doctor(id),
            None => caller.role == Role::Admin,
        };
        if !allowed {
            return Err(ServiceError::Forbidden("only admins, or the doctor for itself, may add time off".into()));
        }
        if req.to <= req.from {
            return Ok(Err(Refusal::invalid(Field::To.in_request(), "to must be after from")));
        }
        let reason = req.reason.as_deref().map(str::trim).filter(|r| !r.is_empty());
        if reason.is_some_and(|r| r.chars().count() > MAX_REASON) {
            return Ok(Err(Refusal::invalid(
                Field::Reason.in_request(),
                format!("reason is at most {MAX_REASON} characters"),
            )));
        }
        if let Some(id) = doctor_id {
            if doctors::find(self.db.conn(), id).await?.is_none() {
                return Ok(Err(Refusal::invalid(Field::DoctorId.in_request(), "no doctor with this id")));
            }
        }
        let (from, to) = (micros(req.from), micros(req.to));
        let done = retrying(|| async {
            let now = micros(Utc::now());
            let tx = self.db.begin_write().await?;
            // Locked before the entry exists: a horizon pass either ran before (its slots are
            // closed here) or reads the entry after this commits (and makes none in it).
            let locked = match doctor_id {
                Some(id) => vec![id],
                None => hours::all_doctor_ids(&tx).await?,
            };
            hours::lock_doctors(&tx, &locked).await?;
            let entry = hours::insert_time_off(&tx, doctor_id, from, to, reason, now).await?;
            let closing = match doctor_id {
                Some(id) => vec![id],
                None => hours::doctors_with_open_slots_in(&tx, from, to).await?,
            };
            let mut changes = Changes::default();
            let mut closed = 0u64;
            let mut cancelled = Vec::new();
            for id in closing {
                let range = DayRange { doctor_id: id, from, to };
                let (slots, gone) = close_range(&tx, range, reason, now, &mut changes).await?;
                let ids: Vec<i64> = slots.iter().map(|s| s.id).collect();
                hours::tag_time_off(&tx, &ids, entry.id).await?;
                closed += ids.len() as u64;
                cancelled.extend(gone);
            }
            if !changes.is_empty() {
                changes.record(&tx, now).await?;
            }
            tx.commit().await?;
            cancelled.sort_unstable_by_key(|a: &appointment::Model| (a.start_at, a.id));
            Ok::<_, StoreError>((entry, closed, cancelled, changes))
        })
        .await?;
        let (time_off, closed, cancelled, changes) = done;
        self.committed(&changes).await;
        Ok(Ok(TimeOffAdded { time_off, closed, cancelled }))
    }

    /// `removeTimeOff`: ends the entry; the slots it closed open again and the pattern's slots
    /// in its range within the horizon are made (whoever may add it).
    #[tracing::instrument(level = "debug", skip_all, fields(caller = %caller.scope(), id = raw_id))]
    pub async fn remove_time_off(&self, caller: &Caller, raw_id: &str) -> Outcome<TimeOffRemoved> {
        if !matches!(caller.role, Role::Admin | Role::Doctor) {
            return Err(ServiceError::Forbidden("only admins and doctors may remove time off".into()));
        }
        let id = match parse_id(Field::Id.name(), raw_id) {
            Ok(id) => id,
            Err(msg) => return Ok(Err(Refusal::invalid(Field::Id.as_param(), msg))),
        };
        // Whose entry it is never changes: reading it first decides nothing.
        let Some(entry) = hours::find_time_off(self.db.conn(), id).await? else {
            return Ok(Err(Refusal::invalid(Field::Id.as_param(), "no time off with this id")));
        };
        let allowed = match entry.doctor_id {
            Some(d) => caller.manages_doctor(d),
            None => caller.role == Role::Admin,
        };
        if !allowed {
            return Err(ServiceError::Forbidden(
                "only admins, or the doctor for itself, may remove this time off".into(),
            ));
        }
        let done = retrying(|| async {
            let now = micros(Utc::now());
            let tx = self.db.begin_write().await?;
            let doctor_ids = match entry.doctor_id {
                Some(d) => vec![d],
                None => hours::all_doctor_ids(&tx).await?,
            };
            hours::lock_doctors(&tx, &doctor_ids).await?;
            let Some(ended) = hours::mark_time_off_removed(&tx, id, now).await? else {
                tx.rollback().await?;
                return Ok::<_, StoreError>(None);
            };
            let opened = hours::reopen_time_off(&tx, id, now).await?;
            let mut changes = Changes::default();
            changes.reopened(&opened);
            // The pattern's slots of the range, within each doctor's horizon.
            let with_patterns: BTreeSet<i64> = hours::doctors_with_patterns(&tx).await?.into_iter().collect();
            let filling: Vec<i64> = doctor_ids.into_iter().filter(|d| with_patterns.contains(d)).collect();
            let made = self.fill_range(&tx, &filling, ended.from_at, ended.to_at, now).await?;
            if !changes.is_empty() {
                changes.record(&tx, now).await?;
            }
            tx.commit().await?;
            Ok(Some((ended, opened.len() as u64, made, changes)))
        })
        .await?;
        let Some((time_off, opened, made, changes)) = done else {
            let time_off = hours::find_time_off(self.db.conn(), id)
                .await?
                .ok_or_else(|| StoreError::Inconsistent(format!("time off {id} vanished")))?;
            return Ok(Ok(TimeOffRemoved { time_off, removed: false, reopened: 0 }));
        };
        self.committed(&changes).await;
        let mut created = 0;
        for (doctor_id, from, to, n) in made {
            created += n;
            self.published_days(doctor_id, from, to).await;
        }
        Ok(Ok(TimeOffRemoved { time_off, removed: true, reopened: opened + created }))
    }

    /// Makes, in `tx`, the pattern slots of `doctor_ids` starting in `[from, to)` within each
    /// one's horizon; returns, per doctor that got some, the days and how many.
    async fn fill_range(
        &self,
        tx: &crate::db::WriteTransaction,
        doctor_ids: &[i64],
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Vec<(i64, NaiveDate, NaiveDate, u64)>, StoreError> {
        let mut made = Vec::new();
        if doctor_ids.is_empty() {
            return Ok(made);
        }
        let horizons = hours::horizons_of(tx, doctor_ids).await?;
        let all_patterns = hours::patterns_of(tx, doctor_ids).await?;
        for doctor in doctors::find_many(tx, doctor_ids).await? {
            let Some(through) = horizons.get(&doctor.id).and_then(|t| parse_day(t)) else { continue };
            let tz = zone_of(&doctor).map_err(|e| StoreError::Inconsistent(e.to_string()))?;
            let first = Ord::max(today(tz), from.with_timezone(&tz).date_naive());
            let last = Ord::min(through, to.with_timezone(&tz).date_naive());
            if first > last {
                continue;
            }
            let rows: Vec<working_hours::Model> =
                all_patterns.iter().filter(|p| p.doctor_id == doctor.id).cloned().collect();
            let patterns = patterns_from_rows(&rows)?;
            let off = time_off_ranges(tx, doctor.id, now).await?;
            let slots: Vec<PatternSlot> = plan_days(doctor.id, tz, &patterns, first, last, now, &off)
                .into_iter()
                .filter(|s| s.start_at >= from && s.start_at < to)
                .collect();
            let n = hours::insert_pattern_slots(tx, &slots).await?;
            if n > 0 {
                outbox::record_published(tx, doctor.id, now).await?;
                made.push((doctor.id, first, last, n));
            }
        }
        Ok(made)
    }

    /// One horizon pass: every doctor with working hours whose horizon is behind gets the
    /// slots of its missing days, one transaction per doctor. `max_doctors` stops it after
    /// that many (a pass cut short, as by a crash; the next one finishes).
    ///
    /// Doctors catching up (no horizon yet, or more than the newest day missing) go first, in
    /// `ROLL_LANES` at once: their near days have no slots to book. The daily roll, which only
    /// adds the horizon's far day, goes one doctor at a time and pauses after each so that it
    /// takes `SCHEDULE_ROLL_SHARE_PERCENT` of one connection's time: the opening-morning
    /// bookings beside it keep the cores.
    pub async fn roll_horizon(&self, max_doctors: Option<usize>) -> Result<RollReport, ServiceError> {
        let ids = hours::doctors_with_patterns(self.db.conn()).await?;
        let mut behind = Vec::new();
        for chunk in ids.chunks(1000) {
            let horizons = hours::horizons_of(self.db.conn(), chunk).await?;
            for doctor in doctors::find_many(self.db.conn(), chunk).await? {
                let tz = zone_of(&doctor)?;
                let through = horizons.get(&doctor.id).and_then(|t| parse_day(t));
                let end = self.horizon_end(tz);
                if through.is_none_or(|t| t < end) {
                    let daily = through.and_then(|t| t.succ_opt()) == Some(end);
                    behind.push((daily, doctor.id, tz));
                }
            }
        }
        behind.sort_unstable_by_key(|&(daily, id, _)| (daily, id));
        if let Some(max) = max_doctors {
            behind.truncate(max);
        }
        let split = behind.partition_point(|&(daily, _, _)| !daily);
        let daily = behind.split_off(split);
        let lanes = if self.db.skips_locked_rows() { ROLL_LANES } else { 1 };
        let mut report = RollReport::default();
        let mut passes = futures_util::stream::iter(behind)
            .map(|(_, doctor_id, tz)| async move { self.roll_doctor(doctor_id, tz).await })
            .buffer_unordered(lanes);
        while let Some(done) = passes.next().await {
            report.add(done?);
        }
        let last = daily.len().saturating_sub(1);
        for (i, (_, doctor_id, tz)) in daily.into_iter().enumerate() {
            let started = Instant::now();
            report.add(self.roll_doctor(doctor_id, tz).await?);
            if i < last {
                tokio::time::sleep(pause_after(started.elapsed(), self.roll_share_percent)).await;
            }
        }
        Ok(report)
    }

    /// Moves one doctor's horizon to today + `SCHEDULE_HORIZON_DAYS` with its slots, in one
    /// transaction; `None` when another pass had done it.
    async fn roll_doctor(&self, doctor_id: i64, tz: Tz) -> Result<Option<u64>, ServiceError> {
        let target = self.horizon_end(tz);
        let done = retrying(|| async {
            let now = micros(Utc::now());
            let tx = self.db.begin_write().await?;
            hours::lock_doctors(&tx, &[doctor_id]).await?;
            let through = hours::horizons_of(&tx, &[doctor_id]).await?.remove(&doctor_id);
            let through = through.as_deref().and_then(parse_day);
            if through.is_some_and(|t| t >= target) {
                tx.rollback().await?;
                return Ok::<_, StoreError>(None);
            }
            let first = match through {
                Some(t) => Ord::max(today(tz), t.succ_opt().unwrap_or(t)),
                None => today(tz),
            };
            let patterns = patterns_from_rows(&hours::patterns_of(&tx, &[doctor_id]).await?)?;
            let off = time_off_ranges(&tx, doctor_id, now).await?;
            let slots = plan_days(doctor_id, tz, &patterns, first, target, now, &off);
            let created = hours::insert_pattern_slots(&tx, &slots).await?;
            hours::advance_horizon(&tx, doctor_id, &day_text(target), now).await?;
            if created > 0 {
                outbox::record_published(&tx, doctor_id, now).await?;
            }
            tx.commit().await?;
            Ok(Some((created, first)))
        })
        .await?;
        let Some((created, first)) = done else { return Ok(None) };
        if created > 0 {
            self.published_days(doctor_id, first, target).await;
        }
        Ok(Some(created))
    }

    /// Tells the caches and the sink that the doctor's days `from..=to` gained slots.
    async fn published_days(&self, doctor_id: i64, from: NaiveDate, to: NaiveDate) {
        let mut day = from;
        while day <= to {
            self.guard.slots.invalidate(doctor_id, day).await;
            let Some(next) = day.succ_opt() else { break };
            day = next;
        }
        self.sink.published(doctor_id);
    }

    /// The last day of the horizon in `tz`: today + `SCHEDULE_HORIZON_DAYS`.
    fn horizon_end(&self, tz: Tz) -> NaiveDate {
        let today = today(tz);
        today.checked_add_days(chrono::Days::new(self.horizon_days.into())).unwrap_or(today)
    }
}

/// The horizon job of an instance.
pub struct HorizonJob;

impl HorizonJob {
    /// Rolls the horizon at once, then every `interval`, until `stop` says true. Every instance
    /// runs one: the database makes each slot once however many roll at the same moment.
    pub fn start(service: BookingService, interval: Duration, mut stop: watch::Receiver<bool>) -> JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                let started = Instant::now();
                match service.roll_horizon(None).await {
                    Ok(r) if r.doctors > 0 => tracing::info!(
                        doctors = r.doctors,
                        slots = r.created,
                        seconds = started.elapsed().as_secs_f64(),
                        "planning horizon extended"
                    ),
                    Ok(_) => {}
                    // The days stay missing; the next pass makes them.
                    Err(error) => tracing::warn!(%error, "extending the planning horizon failed"),
                }
                tokio::select! {
                    () = tokio::time::sleep(interval) => {}
                    () = async { let _ = stop.wait_for(|s| *s).await.map(drop); } => return,
                }
            }
        })
    }
}

/// Checks a week's intervals: times, lengths, capacities, at least one slot each, no overlap
/// within a weekday. Returns them by weekday and start.
fn check_weekly(weekly: &[WeeklyRequest]) -> Result<Vec<Interval>, Refusal> {
    let field = Field::Weekly.in_request();
    if weekly.len() > MAX_INTERVALS {
        return Err(Refusal::invalid(field, format!("weekly holds at most {MAX_INTERVALS} intervals")));
    }
    let mut out = Vec::with_capacity(weekly.len());
    for (i, w) in weekly.iter().enumerate() {
        let bad = |msg: String| Refusal::invalid(field, format!("weekly[{i}]: {msg}"));
        let start = parse_local_time(Field::StartTime.name(), &w.start_time).map_err(bad)?;
        let end = parse_local_time(Field::EndTime.name(), &w.end_time).map_err(bad)?;
        let slot_minutes = w.slot_minutes.unwrap_or(15);
        if !(1..=1440).contains(&slot_minutes) {
            return Err(bad("slotMinutes must be between 1 and 1440".into()));
        }
        let capacity = w.capacity.unwrap_or(1);
        if capacity < 1 {
            return Err(bad("capacity must be at least 1".into()));
        }
        if end <= start {
            return Err(bad("endTime must be after startTime".into()));
        }
        let slot_minutes = slot_minutes.unsigned_abs();
        if end - start < slot_minutes {
            return Err(bad(format!("{}-{} holds no {slot_minutes}-minute slot", w.start_time, w.end_time)));
        }
        out.push(Interval { weekday: w.weekday, start_minute: start, end_minute: end, slot_minutes, capacity });
    }
    out.sort_by_key(|iv| (iv.weekday.num_days_from_monday(), iv.start_minute));
    for pair in out.windows(2) {
        if let [a, b] = pair {
            if a.weekday == b.weekday && b.start_minute < a.end_minute {
                return Err(Refusal::invalid(
                    field,
                    format!(
                        "two intervals of {:?} overlap ({} and {})",
                        a.weekday,
                        clock(a.start_minute),
                        clock(b.start_minute)
                    ),
                ));
            }
        }
    }
    Ok(out)
}

/// `HH:MM` of local minutes since midnight.
pub fn clock(minute: u32) -> String {
    format!("{:02}:{:02}", minute / 60, minute % 60)
}

/// The slots `patterns` make for `doctor_id` on the days `from..=to` in `tz`, each day laid
/// out by [`plan_day`], leaving out those starting at or before `now` and those in `off`.
fn plan_days(
    doctor_id: i64,
    tz: Tz,
    patterns: &[Pattern],
    from: NaiveDate,
    to: NaiveDate,
    now: DateTime<Utc>,
    off: &[(DateTime<Utc>, DateTime<Utc>)],
) -> Vec<PatternSlot> {
    let mut slots = Vec::new();
    let mut day = from;
    while day <= to {
        if let Some(pattern) = patterns.iter().rev().find(|p| p.valid_from <= day) {
            for iv in pattern.weekly.iter().filter(|iv| iv.weekday == day.weekday()) {
                // Checked when set; a day where DST leaves nothing of an interval has no slot.
                let Ok(planned) = plan_day(tz, day, iv.start_minute, iv.end_minute, iv.slot_minutes) else { continue };
                slots.extend(
                    planned
                        .into_iter()
                        .filter(|s| s.start_at > now && !off.iter().any(|(f, t)| *f <= s.start_at && s.start_at < *t))
                        .map(|s| PatternSlot {
                            doctor_id,
                            start_at: s.start_at,
                            end_at: s.end_at,
                            capacity: iv.capacity,
                        }),
                );
            }
        }
        let Some(next) = day.succ_opt() else { break };
        day = next;
    }
    slots
}

/// The ranges of the time off in force for the doctor (its own and the clinic's) that end
/// after `now`.
async fn time_off_ranges(
    conn: &impl sea_orm::ConnectionTrait,
    doctor_id: i64,
    now: DateTime<Utc>,
) -> Result<Vec<(DateTime<Utc>, DateTime<Utc>)>, StoreError> {
    Ok(hours::time_off_overlapping(conn, &[doctor_id], true, Some(now), None)
        .await?
        .into_iter()
        .map(|o| (o.from_at, o.to_at))
        .collect())
}

/// One doctor's pattern rows (by first day) as patterns, each ended by the next.
fn patterns_from_rows(rows: &[working_hours::Model]) -> Result<Vec<Pattern>, StoreError> {
    let mut out: Vec<Pattern> = Vec::with_capacity(rows.len());
    for row in rows {
        let valid_from = parse_day(&row.valid_from).ok_or_else(|| {
            StoreError::Inconsistent(format!("working hours {}: bad day {:?}", row.id, row.valid_from))
        })?;
        let weekly: Vec<Interval> = serde_json::from_str(&row.weekly)
            .map_err(|e| StoreError::Inconsistent(format!("working hours {}: {e}", row.id)))?;
        if let Some(previous) = out.last_mut() {
            previous.valid_until = valid_from.pred_opt();
        }
        out.push(Pattern { valid_from, valid_until: None, weekly });
    }
    Ok(out)
}

fn zone_of(doctor: &doctor::Model) -> Result<Tz, StoreError> {
    parse_timezone(&doctor.timezone).map_err(|m| StoreError::Inconsistent(format!("doctor {}: {m}", doctor.id)))
}

/// Today in `tz`.
fn today(tz: Tz) -> NaiveDate {
    Utc::now().with_timezone(&tz).date_naive()
}

fn day_text(day: NaiveDate) -> String {
    day.format("%Y-%m-%d").to_string()
}

fn parse_day(text: &str) -> Option<NaiveDate> {
    NaiveDate::parse_from_str(text, "%Y-%m-%d").ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interval(weekday: chrono::Weekday, start: &str, end: &str, minutes: Option<i32>) -> WeeklyRequest {
        WeeklyRequest { weekday, start_time: start.into(), end_time: end.into(), slot_minutes: minutes, capacity: None }
    }

    #[test]
    fn overlapping_and_empty_intervals_are_refused() {
        use chrono::Weekday::{Mon, Tue};
        assert!(check_weekly(&[interval(Mon, "09:00", "12:00", None), interval(Mon, "12:00", "13:00", None)]).is_ok());
        assert!(check_weekly(&[interval(Mon, "09:00", "12:00", None), interval(Mon, "11:00", "13:00", None)]).is_err());
        assert!(check_weekly(&[interval(Mon, "09:00", "12:00", None), interval(Tue, "11:00", "13:00", None)]).is_ok());
        assert!(check_weekly(&[interval(Mon, "09:00", "09:10", Some(15))]).is_err(), "holds no slot");
        assert!(check_weekly(&[interval(Mon, "09:00", "08:00", None)]).is_err());
    }

    #[test]
    fn each_pattern_ends_the_day_before_the_next() -> Result<(), StoreError> {
        let row = |id, from: &str| working_hours::Model {
            id,
            doctor_id: 1,
            valid_from: from.into(),
            weekly: "[]".into(),
            created_at: Utc::now(),
        };
        let patterns = patterns_from_rows(&[row(1, "2030-01-01"), row(2, "2030-01-10")])?;
        assert_eq!(patterns[0].valid_until, parse_day("2030-01-09"));
        assert_eq!(patterns[1].valid_until, None);
        Ok(())
    }

    #[test]
    fn the_daily_roll_works_its_share_of_the_time() {
        let worked = Duration::from_millis(3);
        assert_eq!(pause_after(worked, 100), Duration::ZERO);
        assert_eq!(pause_after(worked, 50), worked);
        assert_eq!(pause_after(worked, 10), Duration::from_millis(27));
        assert_eq!(pause_after(worked, 0), pause_after(worked, 1), "a share is at least 1 %");
    }
}
