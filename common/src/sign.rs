//! HMAC-SHA256 signatures over jobs, so a worker runs only what the API
//! accepted. The signed bytes bind the job id to its exact payload: a
//! payload moved under another id, or altered by one byte, fails.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::ConfigError;

type HmacSha256 = Hmac<Sha256>;

/// The key jobs are signed with (`RUNBOX_SIGNING_KEY`). It is never the same
/// as an API token.
#[derive(Clone)]
pub struct SigningKey(Vec<u8>);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey(..)")
    }
}

/// Keys shorter than this are refused at start-up.
pub const MIN_SIGNING_KEY_BYTES: usize = 32;

impl SigningKey {
    pub fn new(key: impl Into<Vec<u8>>) -> Result<SigningKey, ConfigError> {
        let key = key.into();
        if key.len() < MIN_SIGNING_KEY_BYTES {
            return Err(ConfigError::Invalid {
                name: "RUNBOX_SIGNING_KEY",
                value: "(hidden)".into(),
                reason: format!("must be at least {MIN_SIGNING_KEY_BYTES} bytes; `openssl rand -hex 32` makes one"),
            });
        }
        Ok(SigningKey(key))
    }

    /// The key itself, for start-up checks such as "not an api token";
    /// never for logs.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    fn mac(&self, id: &str, payload: &str) -> HmacSha256 {
        // new_from_slice accepts keys of any length for HMAC.
        let mut mac = HmacSha256::new_from_slice(&self.0).unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
        mac.update(id.as_bytes());
        mac.update(b"\n");
        mac.update(payload.as_bytes());
        mac
    }

    /// The hex signature of job `id` with `payload`.
    pub fn sign(&self, id: &str, payload: &str) -> String {
        hex::encode(self.mac(id, payload).finalize().into_bytes())
    }

    /// Checks `signature` in constant time.
    pub fn verify(&self, id: &str, payload: &str, signature: &str) -> bool {
        match hex::decode(signature) {
            Ok(bytes) => self.mac(id, payload).verify_slice(&bytes).is_ok(),
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> SigningKey {
        SigningKey::new(vec![7u8; 32]).expect("valid key")
    }

    #[test]
    fn signature_round_trips() {
        let sig = key().sign("job-1", r#"{"code":"1"}"#);
        assert!(key().verify("job-1", r#"{"code":"1"}"#, &sig));
    }

    #[test]
    fn tampering_is_detected() {
        let sig = key().sign("job-1", r#"{"code":"1"}"#);
        assert!(!key().verify("job-1", r#"{"code":"2"}"#, &sig), "altered payload");
        assert!(!key().verify("job-2", r#"{"code":"1"}"#, &sig), "payload moved to another id");
        assert!(!key().verify("job-1", r#"{"code":"1"}"#, "zz"), "not hex");
        let other = SigningKey::new(vec![8u8; 32]).expect("valid key");
        assert!(!other.verify("job-1", r#"{"code":"1"}"#, &sig), "another key");
    }

    #[test]
    fn short_keys_are_refused() {
        assert!(SigningKey::new(b"short".to_vec()).is_err());
    }
}
