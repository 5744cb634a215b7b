//! Parsing of the values callers send: ids, idempotency keys, time zones, local times.
//! Each parser returns a message fit for a `userErrors`/`INVALID_INPUT` answer.

pub use crate::model::parse_timezone;
use sha2::{Digest, Sha256};

/// Longest idempotency key.
pub const MAX_KEY_LEN: usize = 64;

/// Parses a GraphQL `ID` of a row: a positive decimal 64-bit integer.
pub fn parse_id(what: &str, raw: &str) -> Result<i64, String> {
    let ok = !raw.is_empty() && raw.len() <= 19 && raw.bytes().all(|b| b.is_ascii_digit());
    ok.then(|| raw.parse::<i64>().ok())
        .flatten()
        .filter(|id| *id > 0)
        .ok_or_else(|| format!("{what} must be a positive integer id, got {:?}", truncate(raw)))
}

/// Checks an idempotency key: 1–64 characters from `!` to `~` (printable ASCII, no spaces).
pub fn parse_idempotency_key(raw: &str) -> Result<&str, String> {
    if raw.is_empty() || raw.len() > MAX_KEY_LEN || !raw.bytes().all(|b| (b'!'..=b'~').contains(&b)) {
        return Err(format!(
            "idempotencyKey must be 1 to {MAX_KEY_LEN} printable ASCII characters without spaces, got {:?}",
            truncate(raw)
        ));
    }
    Ok(raw)
}

/// Parses a local time of day `HH:MM` (00:00–23:59, and 24:00 for the end of the day) into
/// minutes since midnight.
pub fn parse_local_time(field: &str, raw: &str) -> Result<u32, String> {
    let bad = || format!("{field} must be a time HH:MM between 00:00 and 24:00, got {:?}", truncate(raw));
    let b = raw.as_bytes();
    if b.len() != 5 || b[2] != b':' || !b.iter().enumerate().all(|(i, c)| i == 2 || c.is_ascii_digit()) {
        return Err(bad());
    }
    let h = u32::from(b[0] - b'0') * 10 + u32::from(b[1] - b'0');
    let m = u32::from(b[3] - b'0') * 10 + u32::from(b[4] - b'0');
    if m > 59 || h > 24 || (h == 24 && m != 0) {
        return Err(bad());
    }
    Ok(h * 60 + m)
}

/// Longest appointment, in minutes (a day).
pub const MAX_DURATION_MINUTES: i32 = 24 * 60;

/// Checks an appointment length in minutes: 1 to a day.
pub fn parse_duration(minutes: i32) -> Result<i64, String> {
    if (1..=MAX_DURATION_MINUTES).contains(&minutes) {
        Ok(i64::from(minutes))
    } else {
        Err(format!("durationMinutes must be between 1 and {MAX_DURATION_MINUTES}, got {minutes}"))
    }
}

/// Fingerprint of a seat-taking request (`book` or `hold`): a retry must carry the same one, a
/// reused key won't. A booking without a duration keeps the form keys made before durations
/// existed, so their retries still replay.
pub fn booking_fingerprint(operation: &str, slot_id: i64, patient_id: i64, minutes: Option<i64>) -> String {
    let text = match minutes {
        None => format!("{operation}:v1:{slot_id}:{patient_id}"),
        Some(m) => format!("{operation}:v1:{slot_id}:{patient_id}:{m}"),
    };
    hex::encode(Sha256::digest(text))
}

/// Fingerprint of a reschedule request.
pub fn reschedule_fingerprint(appointment_id: i64, new_slot_id: i64) -> String {
    hex::encode(Sha256::digest(format!("reschedule:v1:{appointment_id}:{new_slot_id}")))
}

fn truncate(raw: &str) -> String {
    raw.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        assert_eq!(parse_id("slotId", "42"), Ok(42));
        for bad in ["", "0", "-1", "+1", "1.0", "abc", "99999999999999999999", " 1"] {
            assert!(parse_id("slotId", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn keys() {
        assert!(parse_idempotency_key("a").is_ok());
        assert!(parse_idempotency_key(&"~".repeat(64)).is_ok());
        for bad in ["", "has space", "tab\t", "é", &"a".repeat(65)] {
            assert!(parse_idempotency_key(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn local_times() {
        assert_eq!(parse_local_time("startTime", "09:30"), Ok(570));
        assert_eq!(parse_local_time("endTime", "24:00"), Ok(1440));
        for bad in ["9:30", "09:60", "24:01", "25:00", "0930", "09:3a", "09:30:00"] {
            assert!(parse_local_time("startTime", bad).is_err(), "{bad:?}");
        }
    }
}
