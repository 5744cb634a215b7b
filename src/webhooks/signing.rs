//! Standard Webhooks signatures: `webhook-signature: v1,<base64 HMAC-SHA256>` over
//! `{webhook-id}.{webhook-timestamp}.{body}`, keyed with the bytes of the endpoint's secret
//! (the base64 after `whsec_`). Several signatures are separated by spaces; a receiver accepts
//! the request when any of them verifies (how a secret rotation works).

use base64::{engine::general_purpose::STANDARD, Engine};
use hmac::{Hmac, KeyInit, Mac};
use rand::RngCore;
use sha2::Sha256;

/// The prefix of every endpoint secret.
pub const SECRET_PREFIX: &str = "whsec_";
/// Random bytes in a new secret.
const SECRET_BYTES: usize = 32;

/// A new endpoint secret: `whsec_` and the base64 of 32 random bytes from the OS generator.
pub fn new_secret() -> String {
    let mut bytes = [0u8; SECRET_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    format!("{SECRET_PREFIX}{}", STANDARD.encode(bytes))
}

/// The key of one secret, ready to sign with.
#[derive(Clone)]
pub struct SigningKey(Hmac<Sha256>);

/// Keys stay out of logs.
impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey(…)")
    }
}

/// The key of a `whsec_…` secret: the bytes its base64 stands for.
pub fn secret_key(secret: &str) -> Result<SigningKey, String> {
    let encoded = secret.strip_prefix(SECRET_PREFIX).ok_or("a webhook secret starts with whsec_")?;
    let bytes = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(encoded.trim_end_matches('='))
        .map_err(|_| "a webhook secret is whsec_ and base64".to_owned())?;
    if bytes.is_empty() {
        return Err("a webhook secret must not be empty".into());
    }
    Hmac::<Sha256>::new_from_slice(&bytes).map(SigningKey).map_err(|e| format!("unusable webhook secret: {e}"))
}

/// One `v1,…` signature of a message.
pub fn sign(key: &SigningKey, id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac = key.0.clone();
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

/// The `webhook-signature` header: one signature per key, newest first, space-separated.
pub fn signature_header(keys: &[SigningKey], id: &str, timestamp: i64, body: &[u8]) -> String {
    keys.iter().map(|key| sign(key, id, timestamp, body)).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    // The published test vector of the Standard Webhooks reference libraries ("sign function
    // works" in their JavaScript, Python and Rust tests).
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const MSG_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TIMESTAMP: i64 = 1_614_265_330;
    const PAYLOAD: &str = r#"{"test": 2432232314}"#;
    const EXPECTED: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    #[test]
    fn the_reference_test_vector() {
        let key = secret_key(SECRET).unwrap();
        assert_eq!(sign(&key, MSG_ID, TIMESTAMP, PAYLOAD.as_bytes()), EXPECTED);
    }

    #[test]
    fn anything_changed_changes_the_signature() {
        let key = secret_key(SECRET).unwrap();
        for (id, ts, body) in [
            ("msg_p5jXN8AQM9LWM0D4loKWxJeK", TIMESTAMP, PAYLOAD),
            (MSG_ID, TIMESTAMP + 1, PAYLOAD),
            (MSG_ID, TIMESTAMP, r#"{"test": 2432232315}"#),
        ] {
            assert_ne!(sign(&key, id, ts, body.as_bytes()), EXPECTED);
        }
    }

    #[test]
    fn a_rotation_signs_with_both_keys() {
        let new = secret_key(&new_secret()).unwrap();
        let old = secret_key(SECRET).unwrap();
        let header = signature_header(&[new.clone(), old], MSG_ID, TIMESTAMP, PAYLOAD.as_bytes());
        let parts: Vec<&str> = header.split(' ').collect();
        assert_eq!(parts, [sign(&new, MSG_ID, TIMESTAMP, PAYLOAD.as_bytes()).as_str(), EXPECTED]);
    }

    #[test]
    fn new_secrets_are_random_whsec_base64_of_32_bytes() {
        let (a, b) = (new_secret(), new_secret());
        assert_ne!(a, b);
        assert!(a.starts_with(SECRET_PREFIX));
        assert_eq!(STANDARD.decode(&a[SECRET_PREFIX.len()..]).unwrap().len(), SECRET_BYTES);
    }

    #[test]
    fn malformed_secrets() {
        for bad in ["", "whsec_", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_not base64!"] {
            assert!(secret_key(bad).is_err(), "{bad:?}");
        }
    }
}
