//! `GET|POST /fhir/Appointment/$find` (IHE ITI-115, "Find Potential Appointments"): the slot
//! search of `findSlots`, answered as a `searchset` `Bundle` of `proposed` `Appointment`s in
//! the same order, with a `next` link while more remain. Public.
//!
//! Parameters, in the query string (`GET`) or as a `Parameters` body (`POST`, any value type
//! that carries text: `valueDateTime`, `valueInstant`, `valueDate`, `valueString`, `valueCode`,
//! `valueInteger`, `valueReference`, `valueCoding`, `valueCodeableConcept`):
//! - `start` (required), `end` (default: 7 days after `start`): FHIR `date` or `dateTime`; the
//!   window is `[start, end)`, a date standing for its whole UTC day (`end=2026-12-10` runs to
//!   the end of that day). At most 31 days, as `findSlots`.
//! - `specialty` (text, or a token `system|code`: the code), compared case-insensitively.
//! - `practitioner` (repeatable, at most 100): `Practitioner/{id}` (or a bare id).
//! - `_count`: 1–100 per page (default 20; larger is cut to 100); `_cursor` (from a `next`
//!   link) where a page begins.
//!
//! Malformed parameters are `400`; values `findSlots` refuses are `422` (`INVALID_INPUT`), each
//! naming the parameter.

use chrono::{DateTime, Duration, Utc};
use serde_json::Value;

use super::{
    outcome::FhirError,
    resources::{Bundle, BundleEntry, BundleEntrySearch, BundleLink, Resource},
    search::{parse_date, parse_reference_param},
};
use crate::booking::{FindRequest, SlotPosition};

/// Entries per page unless `_count` says otherwise.
pub const DEFAULT_COUNT: i32 = 20;
/// Most entries per page (`findSlots`' largest `first`).
pub const MAX_COUNT: i32 = 100;
/// The window when `end` is not given.
const DEFAULT_DAYS: i64 = 7;

/// A parsed `$find`.
#[derive(Clone, Debug)]
pub struct FindQuery {
    /// The search.
    pub request: FindRequest,
    /// Entries per page.
    pub count: i32,
    /// Where the page begins.
    pub cursor: Option<SlotPosition>,
    /// The parameters as sent (for the `self` and `next` links), cursor left out.
    pairs: Vec<(String, String)>,
}

/// The `(name, value)` pairs of a `Parameters` body; `400` for anything else.
pub fn body_pairs(bytes: &[u8]) -> Result<Vec<(String, String)>, FhirError> {
    let bad = |m: &str| FhirError::bad_request(m.to_owned());
    let v: Value = serde_json::from_slice(bytes).map_err(|_| bad("the body is not JSON"))?;
    if v["resourceType"] != "Parameters" {
        return Err(bad("the body must be a Parameters resource"));
    }
    let mut pairs = Vec::new();
    for p in v["parameter"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let name = p["name"].as_str().ok_or_else(|| bad("each parameter needs a name"))?;
        let text = ["valueDateTime", "valueInstant", "valueDate", "valueString", "valueCode", "valueUri"]
            .iter()
            .find_map(|k| p[*k].as_str().map(str::to_owned))
            .or_else(|| p["valueInteger"].as_i64().map(|n| n.to_string()))
            .or_else(|| p["valueReference"]["reference"].as_str().map(str::to_owned))
            .or_else(|| p["valueCoding"]["code"].as_str().map(str::to_owned))
            .or_else(|| p["valueCodeableConcept"]["text"].as_str().map(str::to_owned))
            .or_else(|| p["valueCodeableConcept"]["coding"][0]["code"].as_str().map(str::to_owned))
            .ok_or_else(|| FhirError::bad_request(format!("parameter {name:?} has no value we read")).at(name))?;
        pairs.push((name.to_owned(), text));
    }
    Ok(pairs)
}

/// Reads the parameters.
pub fn parse(params: &[(String, String)]) -> Result<FindQuery, FhirError> {
    let bad = |name: &str, msg: String| FhirError::bad_request(msg).at(name.to_owned());
    let mut start = None;
    let mut end = None;
    let mut specialty = None;
    let mut practitioners: Option<Vec<String>> = None;
    let mut count = DEFAULT_COUNT;
    let mut cursor = None;
    let mut pairs = Vec::new();
    for (name, value) in params {
        match name.as_str() {
            "start" | "end" => {
                let date = parse_date(value).map_err(|m| bad(name, m))?;
                let (lo, hi) =
                    date.interval(chrono_tz::UTC).ok_or_else(|| bad(name, format!("{name} is out of range")))?;
                if name == "start" {
                    start = Some(lo);
                } else {
                    end = Some(hi);
                }
            }
            "specialty" => {
                let code = value.rsplit_once('|').map_or(value.as_str(), |(_, code)| code);
                specialty = Some(code.to_owned());
            }
            "practitioner" => {
                let id = parse_reference_param(value, "Practitioner").ok_or_else(|| {
                    bad("practitioner", format!("practitioner must be Practitioner/{{id}}, got {value:?}"))
                })?;
                practitioners.get_or_insert_with(Vec::new).push(id);
            }
            "_count" => {
                let n: i64 = value
                    .parse()
                    .map_err(|_| bad("_count", format!("_count must be a whole number, got {value:?}")))?;
                if n < 1 {
                    return Err(bad("_count", format!("_count must be between 1 and {MAX_COUNT}")));
                }
                count = i32::try_from(n.min(i64::from(MAX_COUNT))).unwrap_or(MAX_COUNT);
            }
            "_cursor" => {
                cursor = Some(decode_cursor(value).ok_or_else(|| bad("_cursor", "this _cursor is not ours".into()))?);
                continue;
            }
            _ => continue,
        }
        pairs.push((name.clone(), value.clone()));
    }
    let from: DateTime<Utc> = start.ok_or_else(|| bad("start", "start is required".into()))?;
    let to = end.unwrap_or(from + Duration::days(DEFAULT_DAYS));
    let request = FindRequest {
        from,
        to,
        specialty,
        doctor_ids: practitioners,
        weekdays: None,
        earliest_time: None,
        latest_time: None,
        duration_minutes: None,
        one_per_doctor: false,
    };
    Ok(FindQuery { request, count, cursor, pairs })
}

impl FindQuery {
    /// The query string of this search, with `cursor` for another page.
    pub fn query_string(&self, cursor: Option<SlotPosition>) -> String {
        let mut parts: Vec<String> = self.pairs.iter().map(|(k, v)| format!("{k}={}", enc(v))).collect();
        if !self.pairs.iter().any(|(k, _)| k == "_count") {
            parts.push(format!("_count={}", self.count));
        }
        if let Some(c) = cursor {
            parts.push(format!("_cursor={}", encode_cursor(c)));
        }
        parts.join("&")
    }
}

/// A page cursor: the position of the last entry of the previous page.
pub fn encode_cursor(p: SlotPosition) -> String {
    format!("{}.{}.{}", p.start_at.timestamp_micros(), p.doctor_id, p.slot_id)
}

/// Reads a cursor written by [`encode_cursor`].
pub fn decode_cursor(raw: &str) -> Option<SlotPosition> {
    let mut parts = raw.split('.');
    let start_at = DateTime::from_timestamp_micros(parts.next()?.parse().ok()?)?;
    let doctor_id = parts.next()?.parse().ok()?;
    let slot_id = parts.next()?.parse().ok()?;
    parts.next().is_none().then_some(SlotPosition { start_at, doctor_id, slot_id })
}

/// The searchset of a page: no `total` (the search counts nothing it does not show).
pub fn bundle(entries: Vec<BundleEntry>, self_url: String, next: Option<String>) -> Resource {
    let mut link = vec![BundleLink { relation: "self".into(), url: self_url }];
    if let Some(url) = next {
        link.push(BundleLink { relation: "next".into(), url });
    }
    Resource::Bundle(Bundle { type_: "searchset".into(), total: None, link, entry: entries })
}

/// One entry: the proposed appointment under a fresh `urn:uuid` (it has no id of its own).
pub fn entry(resource: Resource) -> BundleEntry {
    BundleEntry {
        full_url: format!("urn:uuid:{}", uuid::Uuid::new_v4()),
        resource: Box::new(resource),
        search: Some(BundleEntrySearch { mode: Some("match".into()) }),
    }
}

/// Percent-encodes what a query value may not hold as is.
fn enc(raw: &str) -> String {
    percent_encoding::utf8_percent_encode(raw, QUERY_VALUE).to_string()
}

/// Everything but unreserved characters and `:/,|`.
const QUERY_VALUE: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b':')
    .remove(b'/')
    .remove(b',')
    .remove(b'|');

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn reads_the_parameters() {
        let q = parse(&params(&[
            ("start", "2026-12-07"),
            ("end", "2026-12-10"),
            ("specialty", "http://snomed.info/sct|394582007"),
            ("practitioner", "Practitioner/3"),
            ("practitioner", "4"),
            ("_count", "500"),
        ]))
        .unwrap();
        assert_eq!(q.request.from.to_rfc3339(), "2026-12-07T00:00:00+00:00");
        assert_eq!(q.request.to.to_rfc3339(), "2026-12-11T00:00:00+00:00");
        assert_eq!(q.request.specialty.as_deref(), Some("394582007"));
        assert_eq!(q.request.doctor_ids, Some(vec!["3".to_owned(), "4".to_owned()]));
        assert_eq!(q.count, MAX_COUNT);
        let open = parse(&params(&[("start", "2026-12-07T09:00:00+01:00")])).unwrap();
        assert_eq!(open.request.to - open.request.from, Duration::days(7));
        assert_eq!(parse(&params(&[])).unwrap_err().expression.as_deref(), Some("start"));
        assert_eq!(parse(&params(&[("start", "x")])).unwrap_err().code, "BAD_REQUEST");
        assert!(parse(&params(&[("start", "2026-12-07"), ("_count", "0")])).is_err());
        assert!(parse(&params(&[("start", "2026-12-07"), ("practitioner", "Patient/3")])).is_err());
    }

    #[test]
    fn cursors_round_trip() {
        let p = SlotPosition {
            start_at: DateTime::from_timestamp_micros(1_700_000_000_000_000).unwrap(),
            doctor_id: 3,
            slot_id: 9,
        };
        assert_eq!(decode_cursor(&encode_cursor(p)), Some(p));
        assert_eq!(decode_cursor("1.2"), None);
        assert_eq!(decode_cursor("1.2.3.4"), None);
    }

    #[test]
    fn bodies_give_the_same_pairs() {
        let body = serde_json::json!({ "resourceType": "Parameters", "parameter": [
            { "name": "start", "valueDateTime": "2026-12-07T00:00:00Z" },
            { "name": "practitioner", "valueReference": { "reference": "Practitioner/3" } },
            { "name": "specialty", "valueCodeableConcept": { "text": "Dermatology" } },
            { "name": "_count", "valueInteger": 5 }
        ]});
        let pairs = body_pairs(body.to_string().as_bytes()).unwrap();
        assert_eq!(
            pairs,
            params(&[
                ("start", "2026-12-07T00:00:00Z"),
                ("practitioner", "Practitioner/3"),
                ("specialty", "Dermatology"),
                ("_count", "5")
            ])
        );
        assert!(body_pairs(b"{\"resourceType\":\"Patient\"}").is_err());
    }
}
