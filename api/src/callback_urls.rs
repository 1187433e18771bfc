//! Where a callback may go: each token's callback secret, the networks an
//! operator allows although they are not public, and the check of a
//! submission's `callback_url` against both. Delivery (`callbacks`) checks
//! every attempt again with [`reachable`] and connects to the address it
//! checked.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use runbox_common::ConfigError;

use crate::error::ApiError;
use runbox_common::addresses::{self, Network};

/// Attempts per delivery, and the pause before each retry.
pub const ATTEMPTS: usize = 8;

/// How long one attempt may take.
pub(crate) const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest callback URL accepted.
const MAX_URL_BYTES: usize = 2048;

/// Callback secrets shorter than this are refused at start-up.
const MIN_SECRET_BYTES: usize = 16;

/// Who may be called back, and with which secret.
#[derive(Clone, Default)]
pub struct CallbackConfig {
    /// Token name → secret.
    secrets: Vec<(String, Vec<u8>)>,
    /// Networks allowed although they are not public.
    allow: Vec<Network>,
}

impl std::fmt::Debug for CallbackConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.secrets.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("CallbackConfig").field("secrets_for", &names).field("allow", &self.allow).finish()
    }
}

impl CallbackConfig {
    /// Parses `RUNBOX_CALLBACK_SECRETS` (`name:secret` pairs, named as in
    /// `RUNBOX_API_TOKENS`) and `RUNBOX_CALLBACK_ALLOW` (IP addresses or
    /// networks such as `127.0.0.1` or `10.0.0.0/8`).
    pub fn parse(secrets: &str, allow: &str) -> Result<CallbackConfig, ConfigError> {
        let mut config = CallbackConfig::default();
        for item in secrets.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let invalid = |reason: String| ConfigError::Invalid {
                name: "RUNBOX_CALLBACK_SECRETS",
                value: "(hidden)".into(),
                reason,
            };
            let Some((name, secret)) = item.split_once(':') else {
                return Err(invalid("each entry must be name:secret".into()));
            };
            let (name, secret) = (name.trim(), secret.trim());
            if name.is_empty() || secret.len() < MIN_SECRET_BYTES {
                return Err(invalid(format!("each secret must be at least {MIN_SECRET_BYTES} bytes")));
            }
            if config.secrets.iter().any(|(n, _)| n == name) {
                return Err(invalid(format!("the name {name:?} appears twice")));
            }
            config.secrets.push((name.to_owned(), secret.as_bytes().to_vec()));
        }
        for item in allow.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            config.allow.push(Network::parse(item).ok_or_else(|| ConfigError::Invalid {
                name: "RUNBOX_CALLBACK_ALLOW",
                value: item.to_owned(),
                reason: "expected an IP address or a network such as 10.0.0.0/8".into(),
            })?);
        }
        Ok(config)
    }

    pub(crate) fn secret(&self, owner: &str) -> Option<&[u8]> {
        self.secrets.iter().find(|(name, _)| name == owner).map(|(_, secret)| secret.as_slice())
    }

    /// Why a callback may not go to `ip`, or `None` if it may: an address
    /// [`addresses::refusal`] refuses is allowed only if listed.
    pub(crate) fn refusal(&self, ip: IpAddr) -> Option<&'static str> {
        addresses::refusal(ip).filter(|_| !self.allow.iter().any(|network| network.contains(ip)))
    }
}

/// Checks the `callback_url` of a submission by `owner`, if it has one.
pub async fn check_url(config: &CallbackConfig, owner: &str, url: Option<String>) -> Result<Option<String>, ApiError> {
    let Some(url) = url else { return Ok(None) };
    if config.secret(owner).is_none() {
        return Err(ApiError::invalid(
            "callback_url",
            format!("callback_url needs a callback secret for token {owner:?}: set it in RUNBOX_CALLBACK_SECRETS"),
        ));
    }
    if url.len() > MAX_URL_BYTES {
        return Err(ApiError::invalid("callback_url", format!("callback_url is longer than {MAX_URL_BYTES} bytes")));
    }
    reachable(config, &url)
        .await
        .map_err(|e| ApiError::invalid("callback_url", format!("callback_url {url:?}: {e}")))?;
    Ok(Some(url))
}

/// Where a callback to `url` may go: the host and the checked address.
pub(crate) async fn reachable(
    config: &CallbackConfig,
    url: &str,
) -> Result<(reqwest::Url, String, SocketAddr), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("not a valid URL ({e})"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err("only http and https URLs are called back".into());
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("credentials in the URL are not accepted".into());
    }
    let host = parsed.host_str().ok_or("the URL has no host")?.to_owned();
    let port = parsed.port_or_known_default().ok_or("the URL has no port")?;
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((bare, port))
            .await
            .map_err(|e| format!("its host does not resolve ({e})"))?
            .collect(),
    };
    // Every address must be allowed: a name that also resolves to a
    // private address could be steered there.
    match addrs.iter().find_map(|a| config.refusal(a.ip()).map(|why| (a.ip(), why))) {
        Some((refused, why)) => Err(format!(
            "{refused} is not a public address ({why}); an operator can allow it with RUNBOX_CALLBACK_ALLOW"
        )),
        None => addrs.first().map(|a| (parsed.clone(), bare.to_owned(), *a)).ok_or("its host has no address".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_addresses_pass_unless_allowed() {
        let none = CallbackConfig::parse("", "").expect("parses");
        for refused in ["127.0.0.1", "10.1.2.3", "169.254.169.254", "::1", "fd00::1", "::ffff:127.0.0.1"] {
            assert!(none.refusal(refused.parse().expect("ip")).is_some(), "{refused}");
        }
        // Ranges that wrap an IPv4 address are refused even around a public one.
        for wrapped in ["64:ff9b::808:808", "::8.8.8.8", "2002:808:808::1", "2001:0:4136:e378:8000:63bf:3fff:fdd2"] {
            assert!(none.refusal(wrapped.parse().expect("ip")).is_some(), "{wrapped}");
        }
        for public in ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"] {
            assert_eq!(none.refusal(public.parse().expect("ip")), None, "{public}");
        }
        let config = CallbackConfig::parse("", "127.0.0.1, 10.0.0.0/8, fd00::/8, 64:ff9b::/96").expect("parses");
        let allowed = |ip: &str| config.refusal(ip.parse().expect("ip")).is_none();
        assert!(allowed("127.0.0.1"));
        assert!(!allowed("127.0.0.2"));
        assert!(allowed("10.200.0.1"));
        assert!(allowed("fd12::1"));
        assert!(allowed("64:ff9b::a00:1"));
        assert!(!allowed("64:ff9b:1::1"));
        assert!(allowed("8.8.8.8"));
        assert!(CallbackConfig::parse("", "10.0.0.0/33").is_err());
        assert!(CallbackConfig::parse("alice:short", "").is_err());
    }
}
