//! Opaque cursors of the connections (`doctors`, `webhookDeliveries`, `findSlots`): a row id (or
//! a position of several numbers) under a name of its connection, hex-encoded, so a cursor of
//! one connection is refused by another.

use crate::error::{Field, ServiceError};

/// The cursor of row `id` in the connection named `prefix`.
pub(crate) fn encode(prefix: &str, id: i64) -> String {
    hex::encode(format!("{prefix}{id}"))
}

/// The row id a cursor of the connection named `prefix` points after; `INVALID_INPUT` about
/// `after` for anything else.
pub(crate) fn decode(prefix: &str, cursor: &str) -> Result<i64, ServiceError> {
    hex::decode(cursor)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|s| s.strip_prefix(prefix).and_then(|id| id.parse().ok()))
        .ok_or_else(|| ServiceError::invalid(Field::After.as_param(), "after is not a cursor of this connection"))
}

/// The cursor of a position of several numbers (`findSlots`: start, doctor, slot) in the
/// connection named `prefix`.
pub(crate) fn encode_parts(prefix: &str, parts: &[i64]) -> String {
    let joined: Vec<String> = parts.iter().map(i64::to_string).collect();
    hex::encode(format!("{prefix}{}", joined.join(":")))
}

/// The `N` numbers a cursor of [`encode_parts`] holds; `INVALID_INPUT` about `after` for
/// anything else.
pub(crate) fn decode_parts<const N: usize>(prefix: &str, cursor: &str) -> Result<[i64; N], ServiceError> {
    let bad = || ServiceError::invalid(Field::After.as_param(), "after is not a cursor of this connection");
    let text = hex::decode(cursor).ok().and_then(|b| String::from_utf8(b).ok()).ok_or_else(bad)?;
    let numbers: Vec<i64> = text
        .strip_prefix(prefix)
        .ok_or_else(bad)?
        .split(':')
        .map(|n| n.parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    numbers.try_into().map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_within_their_connection_only() {
        let c = encode("doctor:", 42);
        assert_eq!(decode("doctor:", &c).ok(), Some(42));
        assert!(decode("webhook-delivery:", &c).is_err());
        assert!(decode("doctor:", "zz").is_err());
    }

    #[test]
    fn positions_round_trip_with_their_length() {
        let c = encode_parts("slot-search:", &[1_700_000_000_000_000, 3, 42]);
        assert_eq!(decode_parts::<3>("slot-search:", &c).ok(), Some([1_700_000_000_000_000, 3, 42]));
        assert!(decode_parts::<2>("slot-search:", &c).is_err());
        assert!(decode_parts::<3>("doctor:", &c).is_err());
        assert!(decode_parts::<1>("slot-search:", &encode("doctor:", 4)).is_err());
    }
}
