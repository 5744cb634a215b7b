//! The `Date` scalar: a calendar day written `YYYY-MM-DD`, nothing else.

use async_graphql::{InputValueError, InputValueResult, Scalar, ScalarType, Value};
use chrono::NaiveDate;

/// A calendar day, `YYYY-MM-DD`, meant in the doctor's time zone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Date(pub NaiveDate);

impl Date {
    /// The day `s` writes as `YYYY-MM-DD`, exactly as the scalar reads it; `None` otherwise.
    pub fn read(s: &str) -> Option<Self> {
        // chrono alone would also take "2030-1-1".
        let well_formed = s.len() == 10
            && s.bytes().enumerate().all(|(i, b)| if i == 4 || i == 7 { b == b'-' } else { b.is_ascii_digit() });
        if !well_formed {
            return None;
        }
        NaiveDate::parse_from_str(s, "%Y-%m-%d").ok().map(Date)
    }
}

/// A calendar day written `YYYY-MM-DD` (ISO 8601 extended, no time, no offset).
#[Scalar(name = "Date")]
impl ScalarType for Date {
    fn parse(value: Value) -> InputValueResult<Self> {
        let Value::String(s) = &value else {
            return Err(InputValueError::custom("a Date is a string YYYY-MM-DD"));
        };
        Date::read(s).ok_or_else(|| InputValueError::custom(format!("{s:?} is not a date YYYY-MM-DD")))
    }

    // Validation asks this of literals and variables alike, so a malformed day refuses the
    // whole request (`BAD_REQUEST`, no `data`) before any field runs, as an ill-typed `Int`
    // does; `parse` alone would only fail the field, after the fields before it had run.
    fn is_valid(value: &Value) -> bool {
        matches!(value, Value::String(s) if Date::read(s).is_some())
    }

    fn to_value(&self) -> Value {
        Value::String(self.0.format("%Y-%m-%d").to_string())
    }
}
