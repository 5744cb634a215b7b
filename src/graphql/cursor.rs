//! Opaque cursors of the connections (`doctors`, `webhookDeliveries`): a row id under a name of
//! its connection, hex-encoded, so a cursor of one connection is refused by another.

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
}
