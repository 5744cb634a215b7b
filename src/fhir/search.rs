//! `GET /fhir/Slot?…`: the search parameters, read by FHIR's rules.
//!
//! - `schedule` (required): `Schedule/{id}`, a bare `{id}`, or an absolute URL ending so.
//! - `start` (repeatable, all must hold): a FHIR `date` or `dateTime` with an optional prefix
//!   `eq` (default), `ge`, `gt`, `le`, `lt`. A value stands for the interval its precision
//!   implies (`2026-12-01` is that whole day; `…T09:00:00Z` that second), compared as FHIR
//!   says: `ge X` is a start at or after X's beginning, `gt X` after its end, `lt X` before its
//!   beginning, `le X` before its end, `eq X` inside it. A date without a time is the day in
//!   the doctor's time zone (as GraphQL's `date`); a time must carry its offset.
//! - `status` (comma-separated, any of them): `free`, `busy`, `busy-unavailable`,
//!   `busy-tentative`, `entered-in-error` (the last two never match).
//! - `_count`: 0–[`MAX_COUNT`] per page (default [`DEFAULT_COUNT`]; larger is cut to the
//!   maximum, as FHIR allows); `0` answers only `total`.
//! - `_cursor`: where the next page begins (from a `next` link; opaque to clients).
//!
//! A malformed value is `400` (`BAD_REQUEST`), per FHIR's search conventions. Unknown
//! parameters are ignored (and left out of the `self` link) unless the request says
//! `Prefer: handling=strict`, which makes them `400` too.

use chrono::{DateTime, Duration, FixedOffset, NaiveDate, NaiveDateTime, Utc};
use chrono_tz::Tz;

use super::outcome::FhirError;
use crate::{db::fhir::StatusFilter, model::resolve_local};

/// Entries per page unless `_count` says otherwise.
pub const DEFAULT_COUNT: u64 = 50;
/// Most entries per page.
pub const MAX_COUNT: u64 = 500;

/// A comparison prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prefix {
    /// Inside the value's interval.
    Eq,
    /// At or after its beginning.
    Ge,
    /// After its end.
    Gt,
    /// Before its end.
    Le,
    /// Before its beginning.
    Lt,
}

/// A FHIR date or dateTime, with its precision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DateValue {
    /// `YYYY`.
    Year(i32),
    /// `YYYY-MM`.
    Month(i32, u32),
    /// `YYYY-MM-DD`.
    Day(NaiveDate),
    /// A time with its offset, and the length its precision covers.
    Instant(DateTime<FixedOffset>, Duration),
}

impl DateValue {
    /// The half-open UTC interval the value stands for (dates in `tz`).
    pub fn interval(&self, tz: Tz) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        let midnight = |d: NaiveDate| resolve_local(tz, d.and_time(chrono::NaiveTime::MIN));
        Some(match *self {
            Self::Year(y) => {
                (midnight(NaiveDate::from_ymd_opt(y, 1, 1)?), midnight(NaiveDate::from_ymd_opt(y + 1, 1, 1)?))
            }
            Self::Month(y, m) => {
                let next =
                    if m == 12 { NaiveDate::from_ymd_opt(y + 1, 1, 1)? } else { NaiveDate::from_ymd_opt(y, m + 1, 1)? };
                (midnight(NaiveDate::from_ymd_opt(y, m, 1)?), midnight(next))
            }
            Self::Day(d) => (midnight(d), midnight(d.succ_opt()?)),
            Self::Instant(t, len) => (t.with_timezone(&Utc), t.with_timezone(&Utc) + len),
        })
    }
}

/// Parses `[prefix]value` of a date parameter.
pub fn parse_date_param(raw: &str) -> Result<(Prefix, DateValue), String> {
    let (prefix, value) = match raw.get(..2) {
        Some("eq") => (Prefix::Eq, &raw[2..]),
        Some("ge") => (Prefix::Ge, &raw[2..]),
        Some("gt") => (Prefix::Gt, &raw[2..]),
        Some("le") => (Prefix::Le, &raw[2..]),
        Some("lt") => (Prefix::Lt, &raw[2..]),
        Some("ne" | "sa" | "eb" | "ap") => return Err(format!("the prefix {:?} is not supported", &raw[..2])),
        _ => (Prefix::Eq, raw),
    };
    Ok((prefix, parse_date(value)?))
}

/// Parses a FHIR `date` or `dateTime` (`YYYY`, `YYYY-MM`, `YYYY-MM-DD`, or
/// `YYYY-MM-DDThh:mm[:ss[.fff]](Z|±hh:mm)`).
pub fn parse_date(raw: &str) -> Result<DateValue, String> {
    let bad = || {
        let shown: String = raw.chars().take(40).collect();
        format!(
            "{shown:?} is not a FHIR date or dateTime (YYYY, YYYY-MM, YYYY-MM-DD or YYYY-MM-DDThh:mm:ss with Z or an offset)"
        )
    };
    if !raw.is_ascii() {
        return Err(bad());
    }
    let b = raw.as_bytes();
    let digits = |r: std::ops::Range<usize>| b.get(r.clone()).is_some_and(|s| s.iter().all(u8::is_ascii_digit));
    if !digits(0..4) {
        return Err(bad());
    }
    let year: i32 = raw[..4].parse().map_err(|_| bad())?;
    match b.len() {
        4 => return Ok(DateValue::Year(year)),
        7 if b[4] == b'-' && digits(5..7) => {
            let month: u32 = raw[5..7].parse().map_err(|_| bad())?;
            NaiveDate::from_ymd_opt(year, month, 1).ok_or_else(bad)?;
            return Ok(DateValue::Month(year, month));
        }
        10 => return NaiveDate::parse_from_str(raw, "%Y-%m-%d").map(DateValue::Day).map_err(|_| bad()),
        _ => {}
    }
    if b.len() < 17 || b[10] != b'T' {
        return Err(bad());
    }
    // The offset: `Z` or `±hh:mm` at the end; a time without one is refused (FHIR requires it).
    let (local, offset) = if let Some(local) = raw.strip_suffix('Z') {
        (local, FixedOffset::east_opt(0).ok_or_else(bad)?)
    } else {
        let at = raw.len().checked_sub(6).ok_or_else(bad)?;
        let (local, off) = raw.split_at(at);
        let ob = off.as_bytes();
        if !(ob[0] == b'+' || ob[0] == b'-') || ob[3] != b':' {
            return Err(bad());
        }
        let h: i32 = off[1..3].parse().map_err(|_| bad())?;
        let m: i32 = off[4..6].parse().map_err(|_| bad())?;
        if h > 14 || m > 59 {
            return Err(bad());
        }
        let secs = (h * 3600 + m * 60) * if ob[0] == b'-' { -1 } else { 1 };
        (local, FixedOffset::east_opt(secs).ok_or_else(bad)?)
    };
    let (format, precision) = match local.len() {
        16 => ("%Y-%m-%dT%H:%M", Duration::minutes(1)),
        19 => ("%Y-%m-%dT%H:%M:%S", Duration::seconds(1)),
        n if n > 20 && n <= 29 && local.as_bytes()[19] == b'.' => {
            let frac = &local[20..];
            if !frac.bytes().all(|c| c.is_ascii_digit()) {
                return Err(bad());
            }
            let exp = u32::try_from(frac.len()).map_err(|_| bad())?;
            ("%Y-%m-%dT%H:%M:%S%.f", Duration::nanoseconds(10_i64.pow(9 - exp)))
        }
        _ => return Err(bad()),
    };
    let naive = NaiveDateTime::parse_from_str(local, format).map_err(|_| bad())?;
    let at = naive.and_local_timezone(offset).single().ok_or_else(bad)?;
    Ok(DateValue::Instant(at, precision))
}

/// Narrows `[from, to)` by one `start` constraint.
pub fn narrow(
    from: &mut Option<DateTime<Utc>>,
    to: &mut Option<DateTime<Utc>>,
    prefix: Prefix,
    (lo, hi): (DateTime<Utc>, DateTime<Utc>),
) {
    let raise = |b: &mut Option<DateTime<Utc>>, v| *b = Some(b.map_or(v, |x: DateTime<Utc>| x.max(v)));
    let lower = |b: &mut Option<DateTime<Utc>>, v| *b = Some(b.map_or(v, |x: DateTime<Utc>| x.min(v)));
    match prefix {
        Prefix::Eq => {
            raise(from, lo);
            lower(to, hi);
        }
        Prefix::Ge => raise(from, lo),
        Prefix::Gt => raise(from, hi),
        Prefix::Le => lower(to, hi),
        Prefix::Lt => lower(to, lo),
    }
}

/// Parses one `status` value (codes separated by commas, optionally `system|code`).
pub fn parse_status(raw: &str, into: &mut StatusFilter) -> Result<(), String> {
    for token in raw.split(',') {
        let code = match token.split_once('|') {
            Some(("" | "http://hl7.org/fhir/slotstatus", code)) => code,
            Some((system, _)) => return Err(format!("unknown status system {system:?}")),
            None => token,
        };
        match code {
            "free" => into.free = true,
            "busy" => into.busy = true,
            "busy-unavailable" => into.unavailable = true,
            "busy-tentative" | "entered-in-error" => {}
            other => {
                let shown: String = other.chars().take(40).collect();
                return Err(format!(
                    "status {shown:?} is not a slot status (free, busy, busy-unavailable, busy-tentative, entered-in-error)"
                ));
            }
        }
    }
    Ok(())
}

/// Reads a reference search value of `kind`: `Kind/{id}`, a bare `{id}`, or a URL ending so.
pub fn parse_reference_param(raw: &str, kind: &str) -> Option<String> {
    let path = raw.split(['?', '#']).next().unwrap_or("");
    let id = match path.rsplit_once('/') {
        Some((before, id)) => {
            let k = before.rsplit('/').next().unwrap_or("");
            if k != kind {
                return None;
            }
            id
        }
        None => path,
    };
    let ok =
        !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    ok.then(|| id.to_owned())
}

/// A page cursor: the `(start, id)` of the last entry of the previous page.
pub fn encode_cursor(start: DateTime<Utc>, id: i64) -> String {
    format!("{}.{id}", start.timestamp_micros())
}

/// Reads a cursor written by [`encode_cursor`].
pub fn decode_cursor(raw: &str) -> Option<(DateTime<Utc>, i64)> {
    let (micros, id) = raw.split_once('.')?;
    Some((DateTime::from_timestamp_micros(micros.parse().ok()?)?, id.parse().ok()?))
}

/// The parsed search (before the doctor's zone is known).
#[derive(Clone, Debug, Default)]
pub struct SlotQuery {
    /// The schedule's id, as sent.
    pub schedule: String,
    /// `start` constraints, as sent and parsed.
    pub start: Vec<(String, Prefix, DateValue)>,
    /// `status` values, as sent, and what they select.
    pub status: Option<(Vec<String>, StatusFilter)>,
    /// Entries per page.
    pub count: u64,
    /// Where the page begins.
    pub cursor: Option<(DateTime<Utc>, i64)>,
}

/// Reads the query string's parameters.
pub fn parse_slot_query(params: &[(String, String)], strict: bool) -> Result<SlotQuery, FhirError> {
    let bad = |name: &str, msg: String| FhirError::bad_request(msg).at(name.to_owned());
    let mut q = SlotQuery { count: DEFAULT_COUNT, ..SlotQuery::default() };
    let mut schedule = None;
    let mut statuses: Option<(Vec<String>, Vec<StatusFilter>)> = None;
    for (name, value) in params {
        match name.as_str() {
            "schedule" | "schedule:Schedule" => {
                if schedule.is_some() {
                    return Err(bad("schedule", "schedule may be given once".into()));
                }
                let id = parse_reference_param(value, "Schedule")
                    .ok_or_else(|| bad("schedule", format!("schedule must be Schedule/{{id}}, got {value:?}")))?;
                schedule = Some(id);
            }
            "start" => {
                let (prefix, date) = parse_date_param(value).map_err(|m| bad("start", m))?;
                q.start.push((value.clone(), prefix, date));
            }
            "status" => {
                let mut f = StatusFilter::default();
                parse_status(value, &mut f).map_err(|m| bad("status", m))?;
                let entry = statuses.get_or_insert_with(Default::default);
                entry.0.push(value.clone());
                entry.1.push(f);
            }
            "_count" => {
                let n: u64 = value
                    .parse()
                    .map_err(|_| bad("_count", format!("_count must be a whole number, got {value:?}")))?;
                q.count = n.min(MAX_COUNT);
            }
            "_cursor" => {
                q.cursor = Some(decode_cursor(value).ok_or_else(|| bad("_cursor", "this _cursor is not ours".into()))?);
            }
            // Formats and sorting we answer anyway (JSON, by start).
            "_format" | "_sort" => {}
            other if strict => return Err(bad(other, format!("unknown search parameter {other:?}"))),
            _ => {}
        }
    }
    q.schedule = schedule.ok_or_else(|| bad("schedule", "schedule is required (Schedule/{id})".into()))?;
    // Several `status` parameters must all hold (each is a list of alternatives).
    q.status = statuses.map(|(raw, filters)| {
        let all = filters.into_iter().reduce(|a, b| StatusFilter {
            free: a.free && b.free,
            busy: a.busy && b.busy,
            unavailable: a.unavailable && b.unavailable,
        });
        (raw, all.unwrap_or_default())
    });
    Ok(q)
}

impl SlotQuery {
    /// The query string of this search (the `self` link), with `cursor` for another page.
    pub fn query_string(&self, cursor: Option<&str>) -> String {
        let mut parts = vec![format!("schedule=Schedule/{}", enc(&self.schedule))];
        for (raw, _, _) in &self.start {
            parts.push(format!("start={}", enc(raw)));
        }
        if let Some((raw, _)) = &self.status {
            for r in raw {
                parts.push(format!("status={}", enc(r)));
            }
        }
        parts.push(format!("_count={}", self.count));
        if let Some(c) = cursor {
            parts.push(format!("_cursor={}", enc(c)));
        }
        parts.join("&")
    }
}

/// Percent-encodes what a query value may not hold as is (`+` of offsets included).
fn enc(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for b in raw.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~:/,|".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap()
    }

    #[test]
    fn dates_stand_for_their_interval() {
        let tz = chrono_tz::Europe::Paris;
        let day = parse_date("2026-12-01").unwrap().interval(tz).unwrap();
        assert_eq!(day, (utc(2026, 11, 30, 23, 0, 0), utc(2026, 12, 1, 23, 0, 0)));
        let month = parse_date("2026-12").unwrap().interval(chrono_tz::UTC).unwrap();
        assert_eq!(month, (utc(2026, 12, 1, 0, 0, 0), utc(2027, 1, 1, 0, 0, 0)));
        let year = parse_date("2026").unwrap().interval(chrono_tz::UTC).unwrap();
        assert_eq!(year.1, utc(2027, 1, 1, 0, 0, 0));
        let t = parse_date("2026-12-01T09:30:00+01:00").unwrap().interval(tz).unwrap();
        assert_eq!(t, (utc(2026, 12, 1, 8, 30, 0), utc(2026, 12, 1, 8, 30, 1)));
        let ms = parse_date("2026-12-01T08:30:00.250Z").unwrap().interval(tz).unwrap();
        assert_eq!(ms.1 - ms.0, Duration::milliseconds(1));
        let minute = parse_date("2026-12-01T08:30Z").unwrap().interval(tz).unwrap();
        assert_eq!(minute.1 - minute.0, Duration::minutes(1));
    }

    #[test]
    fn bad_dates_are_refused() {
        for bad in [
            "",
            "26",
            "2026-13",
            "2026-02-30",
            "2026-12-01T09:00:00",
            "2026-12-01T09:00:00+1:00",
            "2026-12-01 09:00:00Z",
            "2026-12-01T25:00:00Z",
            "2026-12-01T09:00:00.Z",
            "tomorrow",
        ] {
            assert!(parse_date(bad).is_err(), "{bad:?}");
        }
        assert!(parse_date_param("ne2026-12-01").is_err());
        assert!(parse_date_param("xx2026-12-01").is_err());
    }

    #[test]
    fn prefixes_narrow_the_range() {
        let tz = chrono_tz::UTC;
        let (mut from, mut to) = (None, None);
        for raw in ["ge2026-12-01", "lt2026-12-03"] {
            let (p, v) = parse_date_param(raw).unwrap();
            narrow(&mut from, &mut to, p, v.interval(tz).unwrap());
        }
        assert_eq!((from, to), (Some(utc(2026, 12, 1, 0, 0, 0)), Some(utc(2026, 12, 3, 0, 0, 0))));
        let (mut from, mut to) = (None, None);
        for raw in ["gt2026-12-01", "le2026-12-02"] {
            let (p, v) = parse_date_param(raw).unwrap();
            narrow(&mut from, &mut to, p, v.interval(tz).unwrap());
        }
        assert_eq!((from, to), (Some(utc(2026, 12, 2, 0, 0, 0)), Some(utc(2026, 12, 3, 0, 0, 0))));
        let (mut from, mut to) = (None, None);
        let (p, v) = parse_date_param("2026-12-01").unwrap();
        narrow(&mut from, &mut to, p, v.interval(tz).unwrap());
        assert_eq!((from, to), (Some(utc(2026, 12, 1, 0, 0, 0)), Some(utc(2026, 12, 2, 0, 0, 0))));
    }

    #[test]
    fn statuses_and_references() {
        let mut f = StatusFilter::default();
        parse_status("free,busy-unavailable", &mut f).unwrap();
        assert!(f.free && !f.busy && f.unavailable);
        parse_status("http://hl7.org/fhir/slotstatus|busy", &mut f).unwrap();
        assert!(f.busy);
        assert!(parse_status("open", &mut f).is_err());
        assert_eq!(parse_reference_param("Schedule/12", "Schedule").as_deref(), Some("12"));
        assert_eq!(parse_reference_param("12", "Schedule").as_deref(), Some("12"));
        assert_eq!(parse_reference_param("https://x.example/fhir/Schedule/12", "Schedule").as_deref(), Some("12"));
        assert_eq!(parse_reference_param("Slot/12", "Schedule"), None);
        assert_eq!(parse_reference_param("Schedule/", "Schedule"), None);
    }

    #[test]
    fn queries_and_cursors() {
        let params = |v: &[(&str, &str)]| v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect::<Vec<_>>();
        let q = parse_slot_query(
            &params(&[
                ("schedule", "Schedule/3"),
                ("start", "ge2026-12-01T09:00:00+01:00"),
                ("_count", "9999"),
                ("x", "1"),
            ]),
            false,
        )
        .unwrap();
        assert_eq!((q.schedule.as_str(), q.count), ("3", MAX_COUNT));
        assert_eq!(q.query_string(None), "schedule=Schedule/3&start=ge2026-12-01T09:00:00%2B01:00&_count=500");
        let strict = parse_slot_query(&params(&[("schedule", "3"), ("x", "1")]), true).unwrap_err();
        assert_eq!((strict.code, strict.expression.as_deref()), ("BAD_REQUEST", Some("x")));
        let missing = parse_slot_query(&params(&[("status", "free")]), false).unwrap_err();
        assert_eq!(missing.expression.as_deref(), Some("schedule"));
        assert!(parse_slot_query(&params(&[("schedule", "3"), ("_count", "-1")]), false).is_err());
        let both = parse_slot_query(&params(&[("schedule", "3"), ("status", "free,busy"), ("status", "busy")]), false)
            .unwrap();
        assert_eq!(both.status.unwrap().1, StatusFilter { free: false, busy: true, unavailable: false });
        let c = encode_cursor(utc(2026, 12, 1, 9, 0, 0), 42);
        assert_eq!(decode_cursor(&c), Some((utc(2026, 12, 1, 9, 0, 0), 42)));
        assert_eq!(decode_cursor("nope"), None);
    }
}
