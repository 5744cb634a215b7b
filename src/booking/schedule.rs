//! Turning "this day, 09:00 to 17:00, every 15 minutes, in the doctor's zone" into slot
//! instants, correct across daylight-saving changes.
//!
//! Policy (also in the README):
//! - Slots are laid in real (absolute) time from the start instant to the end instant, so a
//!   day that loses an hour has fewer slots and a day that repeats one has more.
//! - A local time that occurs twice (clocks go back) means its first occurrence.
//! - A local time that does not exist (clocks go forward) is moved forward by the length of
//!   the gap: 02:30 on a day that jumps from 02:00 to 03:00 means 03:30.

use chrono::{Duration, NaiveDate};
use chrono_tz::Tz;

use crate::{db::slots::NewSlot, model::resolve_local};

/// Most slots one publish may create (a day of 1-minute slots, plus a repeated hour).
pub const MAX_SLOTS_PER_DAY: usize = 25 * 60;

/// Why a schedule cannot be laid out.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The end is not after the start.
    #[error("endTime must be after startTime")]
    EndNotAfterStart,
    /// Too many slots for one day.
    #[error("a day may hold at most {MAX_SLOTS_PER_DAY} slots")]
    TooManySlots,
}

/// The slots of one day: `start_minute`/`end_minute` are local minutes since midnight (end up
/// to 1440), `slot_minutes` ≥ 1. The last slot ends at or before the end instant.
pub fn plan_day(
    tz: Tz,
    date: NaiveDate,
    start_minute: u32,
    end_minute: u32,
    slot_minutes: u32,
) -> Result<Vec<NewSlot>, PlanError> {
    if end_minute <= start_minute {
        return Err(PlanError::EndNotAfterStart);
    }
    let midnight = date.and_time(chrono::NaiveTime::MIN);
    let start = resolve_local(tz, midnight + Duration::minutes(i64::from(start_minute)));
    let end = resolve_local(tz, midnight + Duration::minutes(i64::from(end_minute)));
    if end <= start {
        // Possible only when both ends fall in one DST gap.
        return Err(PlanError::EndNotAfterStart);
    }
    let step = Duration::minutes(i64::from(slot_minutes.max(1)));
    let count = usize::try_from((end - start).num_minutes() / step.num_minutes()).unwrap_or(usize::MAX);
    if count > MAX_SLOTS_PER_DAY {
        return Err(PlanError::TooManySlots);
    }
    let mut slots = Vec::with_capacity(count);
    let mut at = start;
    while at + step <= end {
        slots.push(NewSlot { start_at: at, end_at: at + step });
        at += step;
    }
    Ok(slots)
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn date(s: &str) -> Result<NaiveDate, chrono::ParseError> {
        NaiveDate::parse_from_str(s, "%Y-%m-%d")
    }

    fn local(slots: &[NewSlot], tz: Tz) -> Vec<String> {
        slots.iter().map(|s| s.start_at.with_timezone(&tz).format("%H:%M%z").to_string()).collect()
    }

    #[test]
    fn ordinary_day_in_utc() -> TestResult {
        let slots = plan_day(Tz::UTC, date("2030-01-10")?, 9 * 60, 17 * 60, 15)?;
        assert_eq!(slots.len(), 32);
        assert_eq!(slots[0].start_at.to_rfc3339(), "2030-01-10T09:00:00+00:00");
        assert_eq!(slots[31].end_at.to_rfc3339(), "2030-01-10T17:00:00+00:00");
        Ok(())
    }

    #[test]
    fn a_partial_last_slot_is_dropped() -> TestResult {
        let slots = plan_day(Tz::UTC, date("2030-01-10")?, 9 * 60, 10 * 60, 25)?;
        assert_eq!(slots.len(), 2);
        Ok(())
    }

    #[test]
    fn spring_forward_loses_an_hour() -> TestResult {
        // America/New_York: 2030-03-10 02:00 EST jumps to 03:00 EDT.
        let tz: Tz = "America/New_York".parse()?;
        let slots = plan_day(tz, date("2030-03-10")?, 0, 4 * 60, 60)?;
        assert_eq!(local(&slots, tz), ["00:00-0500", "01:00-0500", "03:00-0400"]);
        Ok(())
    }

    #[test]
    fn fall_back_repeats_an_hour() -> TestResult {
        // Europe/Berlin: 2030-10-27 03:00 CEST goes back to 02:00 CET.
        let tz: Tz = "Europe/Berlin".parse()?;
        let slots = plan_day(tz, date("2030-10-27")?, 60, 4 * 60, 60)?;
        assert_eq!(local(&slots, tz), ["01:00+0200", "02:00+0200", "02:00+0100", "03:00+0100"]);
        Ok(())
    }

    #[test]
    fn refuses_empty_and_oversized_days() -> TestResult {
        assert_eq!(plan_day(Tz::UTC, date("2030-01-10")?, 600, 600, 15), Err(PlanError::EndNotAfterStart));
        assert!(plan_day(Tz::UTC, date("2030-01-10")?, 0, 1440, 1).is_ok());
        Ok(())
    }
}
