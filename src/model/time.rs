//! Days and instants in a doctor's time zone: what a `date` argument means, correct across
//! daylight-saving changes.
//!
//! Policy (also in the README):
//! - A local time that occurs twice (clocks go back) means its first occurrence.
//! - A local time that does not exist (clocks go forward) is moved forward by the length of
//!   the gap: 02:30 on a day that jumps from 02:00 to 03:00 means 03:30.

use chrono::{DateTime, Duration, LocalResult, NaiveDate, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;

/// A half-open interval `[from, to)` of one doctor's slot starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DayRange {
    /// The doctor.
    pub doctor_id: i64,
    /// First instant of the range (inclusive).
    pub from: DateTime<Utc>,
    /// First instant after the range (exclusive).
    pub to: DateTime<Utc>,
}

/// Parses an IANA time zone name such as `Europe/Paris`; the error is fit for a client.
pub fn parse_timezone(raw: &str) -> Result<Tz, String> {
    raw.parse::<Tz>().map_err(|_| {
        let shown: String = raw.chars().take(80).collect();
        format!("timezone must be an IANA zone name such as Europe/Paris, got {shown:?}")
    })
}

/// The instant a local wall-clock time means, by the policy above.
pub fn resolve_local(tz: Tz, local: NaiveDateTime) -> DateTime<Utc> {
    match tz.from_local_datetime(&local) {
        LocalResult::Single(t) => t.with_timezone(&Utc),
        LocalResult::Ambiguous(first, _) => first.with_timezone(&Utc),
        LocalResult::None => {
            // Inside a gap: the offset before the gap applied to this wall time gives the
            // instant "as if the clock had not jumped", i.e. moved forward by the gap.
            let mut probe = local;
            for _ in 0..(48 * 4) {
                probe -= Duration::minutes(15);
                if let LocalResult::Single(before) | LocalResult::Ambiguous(before, _) = tz.from_local_datetime(&probe)
                {
                    let offset = *before.offset();
                    let seconds = chrono::Offset::fix(&offset).local_minus_utc();
                    return (local - Duration::seconds(i64::from(seconds))).and_utc();
                }
            }
            local.and_utc()
        }
    }
}

/// The half-open UTC interval of `date` in `tz`: from its first instant to the next day's.
pub fn day_bounds(tz: Tz, date: NaiveDate) -> (DateTime<Utc>, DateTime<Utc>) {
    let start = resolve_local(tz, date.and_time(chrono::NaiveTime::MIN));
    let next = date.succ_opt().unwrap_or(date);
    (start, resolve_local(tz, next.and_time(chrono::NaiveTime::MIN)))
}

/// The slot starts of a doctor's `date`, by the doctor's zone name (as stored). `Err` names
/// a zone the code cannot read: a bug or a hand-edited row, never the caller's fault.
pub fn doctor_day(doctor_id: i64, timezone: &str, date: NaiveDate) -> Result<DayRange, String> {
    let tz = parse_timezone(timezone).map_err(|m| format!("doctor {doctor_id}: {m}"))?;
    let (from, to) = day_bounds(tz, date);
    Ok(DayRange { doctor_id, from, to })
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn date(s: &str) -> Result<NaiveDate, chrono::ParseError> {
        NaiveDate::parse_from_str(s, "%Y-%m-%d")
    }

    #[test]
    fn a_time_in_the_gap_moves_forward() -> TestResult {
        let tz: Tz = "America/New_York".parse()?;
        let t = resolve_local(tz, date("2030-03-10")?.and_hms_opt(2, 30, 0).ok_or("bad time")?);
        assert_eq!(t.with_timezone(&tz).format("%H:%M%z").to_string(), "03:30-0400");
        Ok(())
    }

    #[test]
    fn day_bounds_follow_the_zone() -> TestResult {
        let tz: Tz = "Europe/Berlin".parse()?;
        let (from, to) = day_bounds(tz, date("2030-10-27")?);
        assert_eq!((to - from).num_hours(), 25);
        assert_eq!(from.to_rfc3339(), "2030-10-26T22:00:00+00:00");
        let day = doctor_day(7, "Europe/Berlin", date("2030-10-27")?)?;
        assert_eq!((day.doctor_id, day.from, day.to), (7, from, to));
        Ok(())
    }

    #[test]
    fn zones() {
        assert!(parse_timezone("Europe/Paris").is_ok());
        assert!(parse_timezone("Mars/Olympus").is_err());
        assert!(doctor_day(1, "Mars/Olympus", NaiveDate::MIN).is_err());
    }
}
