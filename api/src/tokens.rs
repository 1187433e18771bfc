//! The configured bearer tokens. Tokens are compared in constant time, and
//! every configured token is compared on every request, so response time
//! says nothing about which token came close.

use runbox_common::ConfigError;
use subtle::ConstantTimeEq;

/// The configured tokens, each with the name jobs are filed under.
#[derive(Clone)]
pub struct Tokens(Vec<(String, Vec<u8>)>);

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.iter().map(|(name, _)| name)).finish()
    }
}

/// Tokens shorter than this are refused at start-up.
const MIN_TOKEN_BYTES: usize = 16;

impl Tokens {
    /// Parses `name:token,name:token`. A bare token is named `default`.
    pub fn parse(text: &str) -> Result<Tokens, ConfigError> {
        let invalid =
            |reason: String| ConfigError::Invalid { name: "RUNBOX_API_TOKENS", value: "(hidden)".into(), reason };
        let mut tokens: Vec<(String, Vec<u8>)> = Vec::new();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (name, token) = item.split_once(':').unwrap_or(("default", item));
            let (name, token) = (name.trim(), token.trim());
            if name.is_empty() || token.len() < MIN_TOKEN_BYTES {
                return Err(invalid(format!(
                    "each entry must be name:token with a token of at least {MIN_TOKEN_BYTES} bytes"
                )));
            }
            if tokens.iter().any(|(n, _)| n == name) {
                return Err(invalid(format!("the name {name:?} appears twice")));
            }
            tokens.push((name.to_owned(), token.as_bytes().to_vec()));
        }
        if tokens.is_empty() {
            return Err(invalid("no tokens given".into()));
        }
        Ok(Tokens(tokens))
    }

    /// Whether any token equals `secret`: the signing key must not, or a
    /// caller holding that token could forge jobs for the workers.
    pub fn contains(&self, secret: &[u8]) -> bool {
        self.0.iter().any(|(_, token)| token.as_slice() == secret)
    }

    /// Every token's name.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(name, _)| name.as_str())
    }

    /// The name of the token equal to `presented`, if any.
    pub(crate) fn check(&self, presented: &[u8]) -> Option<&str> {
        let mut found = None;
        for (name, token) in &self.0 {
            if bool::from(token.as_slice().ct_eq(presented)) {
                found = Some(name.as_str());
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_named_and_bare_tokens() {
        let tokens = Tokens::parse("alice:aaaaaaaaaaaaaaaa, bob:bbbbbbbbbbbbbbbb").expect("valid");
        assert_eq!(tokens.check(b"aaaaaaaaaaaaaaaa"), Some("alice"));
        assert_eq!(tokens.check(b"bbbbbbbbbbbbbbbb"), Some("bob"));
        assert_eq!(tokens.check(b"aaaaaaaaaaaaaaab"), None);
        assert_eq!(tokens.check(b""), None);
        let bare = Tokens::parse("cccccccccccccccc").expect("valid");
        assert_eq!(bare.check(b"cccccccccccccccc"), Some("default"));
    }

    #[test]
    fn refuses_bad_token_lists() {
        for bad in ["", " , ", "alice:short", "a:aaaaaaaaaaaaaaaa,a:bbbbbbbbbbbbbbbb", ":aaaaaaaaaaaaaaaa"] {
            assert!(Tokens::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
