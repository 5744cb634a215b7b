//! Finding the earliest bookable slots across doctors ("the first dermatologist, mornings, this
//! week"): `findSlots` and FHIR `$find`.
//!
//! A slot matches when it could be booked now (open, a seat left, starting after now; with a
//! duration, the same for every slot of the run an appointment that long takes), starts in the
//! window, belongs to one of the doctors asked for, and starts on one of the weekdays and
//! within the local times asked for, in its doctor's zone. Matches are ordered by start, then
//! doctor id, then slot id; a page starts strictly after a [`SlotPosition`] in that order, so
//! paging never repeats a slot and never skips one that matched throughout.
//!
//! Read straight from the database at every call. A page carries the [`Stamp`]s of what it
//! depends on, taken before its reads: each listed doctor's, or the specialty's (with the new
//! doctors'), or everyone's, the last two only for the days up to the last row the page read
//! when it stopped short of the window's end; and they end when the earliest slot read starts
//! (time passing can change a page only by a slot starting). The GraphQL answer made of it is
//! kept while they are current, as a slot list's is.

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};

use super::{input::parse_duration, input::parse_id, input::parse_local_time, BookingService};
use crate::{
    db::{
        self,
        entity::time_slot,
        find::{Criteria, DoctorStart, DoctorZone, Scope},
        slots,
    },
    error::{Field, ServiceError},
    guard::{generations::day_of, Stamp},
    model::DayRange,
};

/// A position in the answer order, for `after`.
pub use crate::db::find::Position as SlotPosition;

/// Longest window, in days.
pub const MAX_WINDOW_DAYS: i64 = 31;
/// Most doctors one search may name.
pub const MAX_DOCTORS: usize = 100;
/// Slots per page unless `first` says otherwise.
pub const DEFAULT_FIRST: i32 = 20;
/// Most slots per page.
pub const MAX_FIRST: i32 = 100;
/// With a duration, most candidate starts one page examines (the runs are checked for each):
/// past it the page ends with what it found, saying more may follow.
pub const MAX_EXAMINED: usize = 20_000;

/// A search as a transport received it.
#[derive(Clone, Debug, Default)]
pub struct FindRequest {
    /// Starting at or after this (a past instant counts as now).
    pub from: DateTime<Utc>,
    /// Starting before this.
    pub to: DateTime<Utc>,
    /// The doctor's specialty, compared case-insensitively.
    pub specialty: Option<String>,
    /// Any of these doctors.
    pub doctor_ids: Option<Vec<String>>,
    /// Days of the week in each doctor's zone.
    pub weekdays: Option<Vec<chrono::Weekday>>,
    /// `HH:MM`: local start at or after.
    pub earliest_time: Option<String>,
    /// `HH:MM`: local start before.
    pub latest_time: Option<String>,
    /// Room for an appointment this long starting at the slot.
    pub duration_minutes: Option<i32>,
    /// Only each doctor's earliest matching slot.
    pub one_per_doctor: bool,
}

/// Specialties folded as the database folds them, by the spelling searched: bounded, since
/// the spellings are the callers'.
#[derive(Clone)]
pub(super) struct Folds(Arc<moka::sync::Cache<String, String>>);

impl Default for Folds {
    fn default() -> Self {
        Self(Arc::new(moka::sync::Cache::new(10_000)))
    }
}

/// One page of a search.
#[derive(Clone, Debug, Default)]
pub struct FoundSlots {
    /// The slots, in answer order.
    pub slots: Vec<time_slot::Model>,
    /// Whether more may follow the last one.
    pub has_next: bool,
    /// What the page depends on, taken before it was read: whatever is made of it is current
    /// while these are ([`crate::guard::Generations`]). Empty: not known, make nothing lasting.
    pub stamps: Vec<Stamp>,
}

/// What a page's reads covered.
#[derive(Default)]
struct Reads {
    /// The earliest start read: the page is right until it comes.
    earliest: Option<DateTime<Utc>>,
    /// The last start the page depends on, when its reads stopped short of the window's end
    /// (`None`: the whole window).
    through: Option<DateTime<Utc>>,
}

impl Reads {
    fn saw(&mut self, rows: &[time_slot::Model]) {
        if let Some(first) = rows.iter().map(|s| s.start_at).min() {
            self.earliest = Some(self.earliest.map_or(first, |e| e.min(first)));
        }
    }
}

/// A checked search.
struct Search {
    criteria: Criteria,
    specialty: Option<String>,
    doctor_ids: Option<Vec<i64>>,
    duration: Option<Duration>,
    one_per_doctor: bool,
    first: usize,
}

/// Checks `req` and `first`: every bad value is `INVALID_INPUT` about its field.
fn check(req: &FindRequest, first: Option<i32>, now: DateTime<Utc>) -> Result<Search, ServiceError> {
    let invalid = |field: Field, message: String| ServiceError::invalid(field.in_request(), message);
    let first = first.unwrap_or(DEFAULT_FIRST);
    if !(1..=MAX_FIRST).contains(&first) {
        return Err(ServiceError::invalid(
            Field::First.as_param(),
            format!("first must be between 1 and {MAX_FIRST}, got {first}"),
        ));
    }
    if req.to <= req.from {
        return Err(invalid(Field::To, "to must be after from".into()));
    }
    if req.to - req.from > Duration::days(MAX_WINDOW_DAYS) {
        return Err(invalid(Field::To, format!("to must be at most {MAX_WINDOW_DAYS} days after from")));
    }
    let specialty = match req.specialty.as_deref().map(str::trim) {
        Some("") => return Err(invalid(Field::Specialty, "specialty must not be blank".into())),
        other => other.map(str::to_owned),
    };
    let doctor_ids = match &req.doctor_ids {
        Some(ids) if ids.len() > MAX_DOCTORS => {
            return Err(invalid(Field::DoctorIds, format!("doctorIds may name at most {MAX_DOCTORS} doctors")))
        }
        Some(ids) => Some(
            ids.iter()
                .map(|raw| parse_id(Field::DoctorIds.name(), raw).map_err(|m| invalid(Field::DoctorIds, m)))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        None => None,
    };
    let earliest = req
        .earliest_time
        .as_deref()
        .map(|raw| parse_local_time(Field::EarliestTime.name(), raw).map_err(|m| invalid(Field::EarliestTime, m)))
        .transpose()?;
    let latest = req
        .latest_time
        .as_deref()
        .map(|raw| parse_local_time(Field::LatestTime.name(), raw).map_err(|m| invalid(Field::LatestTime, m)))
        .transpose()?;
    if let (Some(e), Some(l)) = (earliest, latest) {
        if l <= e {
            return Err(invalid(Field::LatestTime, "latestTime must be after earliestTime".into()));
        }
    }
    let duration = req
        .duration_minutes
        .map(|m| parse_duration(m).map(Duration::minutes).map_err(|msg| invalid(Field::DurationMinutes, msg)))
        .transpose()?;
    // "After now": slots start on whole microseconds, so the first instant after `now` that one
    // can start at is the next microsecond.
    let after_now = db::micros(now) + Duration::microseconds(1);
    let mut weekdays = req.weekdays.clone();
    if let Some(days) = &mut weekdays {
        days.sort_unstable_by_key(chrono::Weekday::num_days_from_monday);
        days.dedup();
    }
    Ok(Search {
        criteria: Criteria {
            from: req.from.max(after_now),
            to: req.to,
            weekdays,
            earliest_minute: earliest,
            latest_minute: latest,
        },
        specialty,
        doctor_ids,
        duration,
        one_per_doctor: req.one_per_doctor,
        first: first.unsigned_abs() as usize,
    })
}

impl BookingService {
    /// One page of bookable slots matching `req`, after `after` (see the module's doc). Bad
    /// values are `INVALID_INPUT`; unknown doctors simply match nothing.
    pub async fn find_slots(
        &self,
        req: &FindRequest,
        first: Option<i32>,
        after: Option<SlotPosition>,
    ) -> Result<FoundSlots, ServiceError> {
        let now = Utc::now();
        let search = check(req, first, now)?;
        if search.criteria.from >= search.criteria.to || search.criteria.weekdays.as_ref().is_some_and(Vec::is_empty) {
            return Ok(FoundSlots::default());
        }
        let conn = self.db.conn();
        let mut stamps = self.stamps(&search).await?;
        let mut reads = Reads::default();
        // The specialty's own index answers a specialty alone without its list of doctors.
        let indexed = match (&search.specialty, &search.doctor_ids) {
            (Some(s), None) if !search.one_per_doctor => db::find::IndexedSpecialty::on(&self.db, s),
            _ => None,
        };
        let doctors = match (&search.specialty, &search.doctor_ids) {
            (_, Some(ids)) if ids.is_empty() => return Ok(FoundSlots::default()),
            (None, None) => None,
            _ if indexed.is_some() => None,
            (specialty, ids) => Some(db::find::doctors(conn, specialty.as_deref(), ids.as_deref()).await?),
        };
        let mut found = if search.one_per_doctor {
            let doctors = match doctors {
                Some(list) => list,
                None => db::find::doctors(conn, None, None).await?,
            };
            let mut firsts = self.first_per_doctor(&search, &doctors, now, &mut reads).await?;
            // With a first for every doctor, no change after the latest (and its run) can make one
            // earlier or take one away: the page depends on nothing later.
            if firsts.len() == doctors.len() {
                let latest = firsts.iter().map(|s| s.start_at).max();
                reads.through = latest.map(|t| t + search.duration.unwrap_or_default());
            }
            firsts.sort_unstable_by_key(SlotPosition::of);
            firsts.retain(|s| after.is_none_or(|a| SlotPosition::of(s) > a));
            FoundSlots { has_next: firsts.len() > search.first, slots: firsts, stamps: Vec::new() }
        } else {
            let scope = match (indexed, &doctors) {
                (Some(specialty), _) => Scope::Specialty(specialty),
                (None, Some(list)) => Scope::Doctors(list),
                (None, None) => Scope::Everyone,
            };
            self.merged_page(&search, scope, after, now, &mut reads).await?
        };
        found.slots.truncate(search.first);
        if let Some(through) = reads.through {
            stamps.retain(|s| s.day().is_none_or(|day| day <= day_of(through)));
        }
        if let Some(first) = reads.earliest {
            stamps.iter_mut().for_each(|s| s.expire_at(first));
        }
        found.stamps = stamps;
        Ok(found)
    }

    /// The stamps of everything a search's page depends on, to take before reading it: the
    /// listed doctors', the specialty's (with the doctors the roster lacks), or everyone's, for
    /// every day a slot it reads may start on. Empty when the roster changed each time it was
    /// read.
    async fn stamps(&self, search: &Search) -> Result<Vec<Stamp>, ServiceError> {
        let generations = &self.guard.generations;
        if let Some(ids) = &search.doctor_ids {
            return Ok(ids.iter().map(|&id| generations.stamp(id)).collect());
        }
        let last = search.criteria.to + search.duration.unwrap_or_default();
        let days = day_of(search.criteria.from)..=day_of(last);
        let Some(specialty) = &search.specialty else {
            return Ok(generations.everyone(days));
        };
        let conn = self.db.conn();
        let folds = &self.folded_specialties.0;
        let folded = match folds.get(specialty) {
            Some(folded) => folded,
            None => {
                let folded = db::doctors::fold_specialty(conn, specialty).await?;
                folds.insert(specialty.clone(), folded.clone());
                folded
            }
        };
        for _ in 0..2 {
            if let Some(stamps) = generations.specialty(&folded, days.clone()) {
                return Ok(stamps);
            }
            let mark = generations.roster_mark();
            let roster = db::doctors::roster(conn).await?;
            generations.learn(mark, roster);
        }
        Ok(Vec::new())
    }

    /// A page of `scope`'s slots: `first + 1` matches, or fewer at the end.
    async fn merged_page(
        &self,
        search: &Search,
        scope: Scope<'_>,
        after: Option<SlotPosition>,
        now: DateTime<Utc>,
        reads: &mut Reads,
    ) -> Result<FoundSlots, ServiceError> {
        let want = search.first + 1;
        let page = |has_next, slots| FoundSlots { slots, has_next, stamps: Vec::new() };
        let Some(length) = search.duration else {
            let slots = db::find::merged(&self.db, &search.criteria, scope, after, want as u64).await?;
            reads.saw(&slots);
            if slots.len() >= want {
                reads.through = slots.last().map(|s| s.start_at);
            }
            return Ok(page(slots.len() > search.first, slots));
        };
        // With a duration, candidates whose run is not bookable drop out: read on in growing
        // batches until the page is full, the window ends, or the work bound is reached.
        let mut out = Vec::new();
        let mut pos = after;
        let mut batch = (want * 2).max(50);
        let mut examined = 0;
        loop {
            let rows = db::find::merged(&self.db, &search.criteria, scope, pos, batch as u64).await?;
            reads.saw(&rows);
            let exhausted = rows.len() < batch;
            examined += rows.len();
            if let Some(last) = rows.last() {
                pos = Some(SlotPosition::of(last));
            }
            out.extend(self.with_runs(rows, length, now).await?);
            // Past here the page read nothing: what it depends on ends with the last run read.
            let through = pos.map(|p| p.start_at + length);
            if out.len() >= want {
                reads.through = through;
                return Ok(page(true, out));
            }
            if exhausted || examined >= MAX_EXAMINED {
                reads.through = through.filter(|_| !exhausted);
                return Ok(page(!exhausted, out));
            }
            batch = (batch * 2).min(1000);
        }
    }

    /// Each doctor's earliest match (doctors without one left out), in no particular order.
    async fn first_per_doctor(
        &self,
        search: &Search,
        doctors: &[DoctorZone],
        now: DateTime<Utc>,
        reads: &mut Reads,
    ) -> Result<Vec<time_slot::Model>, ServiceError> {
        let Some(length) = search.duration else {
            let firsts: Vec<_> = doctors.iter().map(|d| (d.clone(), None)).collect();
            let rows = db::find::per_doctor(&self.db, &search.criteria, &firsts, 1, None).await?;
            reads.saw(&rows);
            return Ok(rows);
        };
        // With a duration: a few candidates per doctor at a time, until each doctor has a start
        // whose run is bookable or has no candidate left.
        let mut pending: Vec<DoctorStart> = doctors.iter().map(|d| (d.clone(), None)).collect();
        let mut out = Vec::new();
        let mut k: usize = 8;
        let mut examined = 0;
        while !pending.is_empty() && examined < MAX_EXAMINED {
            let rows = db::find::per_doctor(&self.db, &search.criteria, &pending, k as u64, None).await?;
            reads.saw(&rows);
            examined += rows.len();
            // Per doctor: how many candidates came, and the last one (where it reads on).
            let mut read: std::collections::HashMap<i64, (usize, (DateTime<Utc>, i64))> = Default::default();
            for row in &rows {
                let entry = read.entry(row.doctor_id).or_insert((0, (row.start_at, row.id)));
                entry.0 += 1;
                entry.1 = entry.1.max((row.start_at, row.id));
            }
            // Rows come in answer order: a doctor's first good one is its earliest.
            let mut done = std::collections::HashSet::new();
            for good in self.with_runs(rows, length, now).await? {
                if done.insert(good.doctor_id) {
                    out.push(good);
                }
            }
            let mut next = Vec::new();
            for (doctor, _) in pending {
                match read.get(&doctor.id) {
                    Some((n, last)) if *n >= k && !done.contains(&doctor.id) => next.push((doctor, Some(*last))),
                    _ => {}
                }
            }
            pending = next;
            k = (k * 4).min(256);
        }
        Ok(out)
    }

    /// The `candidates` (bookable themselves) at which an appointment `length` long could
    /// start now: the run from each, as booking forms it, exists and every slot of it is
    /// bookable. Order kept.
    async fn with_runs(
        &self,
        candidates: Vec<time_slot::Model>,
        length: Duration,
        now: DateTime<Utc>,
    ) -> Result<Vec<time_slot::Model>, ServiceError> {
        if candidates.is_empty() {
            return Ok(candidates);
        }
        // One range per doctor, from its first candidate to its last candidate's run end.
        let mut spans: std::collections::BTreeMap<i64, (DateTime<Utc>, DateTime<Utc>)> = Default::default();
        for c in &candidates {
            let end = c.start_at + length;
            spans
                .entry(c.doctor_id)
                .and_modify(|(from, to)| {
                    *from = (*from).min(c.start_at);
                    *to = (*to).max(end);
                })
                .or_insert((c.start_at, end));
        }
        let ranges: Vec<DayRange> =
            spans.into_iter().map(|(doctor_id, (from, to))| DayRange { doctor_id, from, to }).collect();
        let mut around: std::collections::HashMap<i64, Vec<time_slot::Model>> = Default::default();
        for s in slots::in_ranges(self.db.conn(), &ranges).await? {
            around.entry(s.doctor_id).or_default().push(s);
        }
        let bookable = |s: &time_slot::Model| s.available() > 0 && s.start_at > now;
        Ok(candidates
            .into_iter()
            .filter(|c| {
                around.get(&c.doctor_id).is_some_and(|list| {
                    slots::contiguous_run(list, c.start_at, c.start_at + length)
                        .is_some_and(|run| run.iter().all(bookable))
                })
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).map(|t| t.with_timezone(&Utc)).unwrap_or_default()
    }

    fn request() -> FindRequest {
        FindRequest { from: at("2030-01-07T00:00:00Z"), to: at("2030-01-14T00:00:00Z"), ..FindRequest::default() }
    }

    fn field_of(r: Result<Search, ServiceError>) -> Option<Field> {
        match r {
            Err(ServiceError::InvalidInput { field, .. }) => Some(field.field),
            _ => None,
        }
    }

    #[test]
    fn bad_values_name_their_field() {
        let now = at("2030-01-01T00:00:00Z");
        assert!(check(&request(), None, now).is_ok());
        let backwards = FindRequest { to: at("2030-01-06T00:00:00Z"), ..request() };
        assert_eq!(field_of(check(&backwards, None, now)), Some(Field::To));
        let long = FindRequest { to: at("2030-02-07T00:00:01Z"), ..request() };
        assert_eq!(field_of(check(&long, None, now)), Some(Field::To));
        let exactly_31 = FindRequest { to: at("2030-02-07T00:00:00Z"), ..request() };
        assert!(check(&exactly_31, None, now).is_ok());
        let many = FindRequest { doctor_ids: Some((1..=101).map(|i| i.to_string()).collect()), ..request() };
        assert_eq!(field_of(check(&many, None, now)), Some(Field::DoctorIds));
        let bad_id = FindRequest { doctor_ids: Some(vec!["x".into()]), ..request() };
        assert_eq!(field_of(check(&bad_id, None, now)), Some(Field::DoctorIds));
        let bad_time = FindRequest { earliest_time: Some("8:00".into()), ..request() };
        assert_eq!(field_of(check(&bad_time, None, now)), Some(Field::EarliestTime));
        let bad_latest = FindRequest { latest_time: Some("12:60".into()), ..request() };
        assert_eq!(field_of(check(&bad_latest, None, now)), Some(Field::LatestTime));
        let inverted =
            FindRequest { earliest_time: Some("12:00".into()), latest_time: Some("08:00".into()), ..request() };
        assert_eq!(field_of(check(&inverted, None, now)), Some(Field::LatestTime));
        let bad_duration = FindRequest { duration_minutes: Some(0), ..request() };
        assert_eq!(field_of(check(&bad_duration, None, now)), Some(Field::DurationMinutes));
        for first in [0, 101, -1] {
            assert_eq!(field_of(check(&request(), Some(first), now)), Some(Field::First), "{first}");
        }
    }

    #[test]
    fn a_past_from_counts_as_now() {
        let now = at("2030-01-10T12:00:00Z");
        let search = check(&request(), None, now).ok().map(|s| s.criteria.from);
        assert_eq!(search, Some(now + Duration::microseconds(1)));
    }
}
