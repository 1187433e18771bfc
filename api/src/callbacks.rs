//! Signed callbacks. A job or batch submitted with `callback_url` is POSTed
//! there once it is finished: the job object, or the batch object without
//! its jobs.
//!
//! - The Lua scripts that write a final status queue the callback on the
//!   queue's callback stream (`runbox:{queue}:callbacks`) in the same
//!   step, so a finish is never without its callback. Each api process delivers from that stream
//!   through one consumer group, reading it on a connection of its own;
//!   what a dead api held is taken over after [`STALE`]. No worker slot is
//!   ever involved.
//! - The body is signed with HMAC-SHA256 under the submitting token's
//!   callback secret (`RUNBOX_CALLBACK_SECRETS`): header
//!   `Runbox-Signature: t=<unix seconds>,v1=<hex of HMAC(secret, "<t>.<body>")>`.
//!   `Runbox-Delivery` is the same on every attempt of one delivery.
//! - A job a compatible API submitted may be delivered in that API's shape:
//!   [`crate::compat::callback_body`] gives the body, and such a body is
//!   PUT (Judge0 PUTs the finished submission). The stream, retries,
//!   signature and address checks are the same.
//! - Errors and 5xx (and 408, 429) are retried with backoff, [`ATTEMPTS`]
//!   times in all; any other answer ends the delivery.
//! - Addresses that are not public (loopback, private, link-local, NAT64,
//!   6to4, documentation, ...: see [`crate::addresses`]) are refused at
//!   submission and again at each attempt, unless `RUNBOX_CALLBACK_ALLOW`
//!   lists them. Each attempt connects to the address it checked, and
//!   redirects are not followed, so DNS cannot swap in an address after
//!   the check.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hmac::{Hmac, Mac};
use runbox_common::{CallbackDue, ConfigError, Queue, now_unix_ms};
use sha2::Sha256;

use crate::AppState;
use crate::addresses::{self, Network};
use crate::error::ApiError;

/// Attempts per delivery, and the pause before each retry.
pub const ATTEMPTS: usize = 8;
const BACKOFF: [u64; ATTEMPTS - 1] = [1, 2, 4, 8, 16, 32, 64];

/// How long one attempt may take.
pub(crate) const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// A delivery another api left pending this long is taken over: longer
/// than all of one delivery's attempts and pauses.
const STALE: Duration = Duration::from_secs(600);

/// Deliveries in flight per api process.
const IN_FLIGHT: usize = 16;

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

    fn secret(&self, owner: &str) -> Option<&[u8]> {
        self.secrets.iter().find(|(name, _)| name == owner).map(|(_, secret)| secret.as_slice())
    }

    /// Why a callback may not go to `ip`, or `None` if it may: an address
    /// [`addresses::refusal`] refuses is allowed only if listed.
    fn refusal(&self, ip: IpAddr) -> Option<&'static str> {
        addresses::refusal(ip).filter(|_| !self.allow.iter().any(|network| network.contains(ip)))
    }
}

/// Checks the `callback_url` of a submission by `owner`, if it has one.
pub async fn check_url(state: &AppState, owner: &str, url: Option<String>) -> Result<Option<String>, ApiError> {
    let Some(url) = url else { return Ok(None) };
    if state.config.callbacks.secret(owner).is_none() {
        return Err(ApiError::invalid(
            "callback_url",
            format!("callback_url needs a callback secret for token {owner:?}: set it in RUNBOX_CALLBACK_SECRETS"),
        ));
    }
    if url.len() > MAX_URL_BYTES {
        return Err(ApiError::invalid("callback_url", format!("callback_url is longer than {MAX_URL_BYTES} bytes")));
    }
    reachable(&state.config.callbacks, &url)
        .await
        .map_err(|e| ApiError::invalid("callback_url", format!("callback_url {url:?}: {e}")))?;
    Ok(Some(url))
}

/// Where a callback to `url` may go: the host and the checked address.
async fn reachable(config: &CallbackConfig, url: &str) -> Result<(reqwest::Url, String, SocketAddr), String> {
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

/// How long one read of the callback stream waits for a new entry.
const READ_BLOCK: Duration = Duration::from_secs(1);

/// Delivers callbacks until the api stops.
pub async fn run(state: AppState) {
    // Its own connection: a blocking read on the shared one would stall
    // every request behind it for up to READ_BLOCK.
    let reader = match Queue::connect_blocking(&state.config.shared.redis, &state.config.shared.queue, READ_BLOCK) {
        Ok(reader) => reader,
        Err(e) => {
            tracing::error!(error = %e, "cannot deliver callbacks: bad Redis URL");
            return;
        }
    };
    let consumer = format!("api-{}", uuid::Uuid::new_v4().simple());
    let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let mut backoff = Duration::from_millis(100);
    while !state.stopping.is_cancelled() {
        let available = permits.available_permits().max(1);
        let due = tokio::select! {
            due = reader.due_callbacks(&consumer, available, READ_BLOCK, STALE) => due,
            () = state.stopping.cancelled() => return,
        };
        let due = match due {
            Ok(due) => {
                backoff = Duration::from_millis(100);
                due
            }
            Err(e) => {
                if e.to_string().contains("NOGROUP") {
                    let _ = state.queue.ensure_callback_group().await;
                } else {
                    tracing::warn!(error = %e, "could not read the callback stream; retrying");
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        for due in due {
            let Ok(permit) = permits.clone().acquire_owned().await else { return };
            let state = state.clone();
            tokio::spawn(async move {
                deliver(&state, &due).await;
                drop(permit);
            });
        }
    }
}

/// Delivers one callback, retrying as the module header says, then ends it.
async fn deliver(state: &AppState, due: &CallbackDue) {
    let outcome = match attempt_all(state, due).await {
        Ok(()) => "delivered",
        Err(e) => {
            tracing::warn!(kind = %due.kind, id = %due.id, delivery = %due.entry, error = %e, "callback not delivered");
            "failed"
        }
    };
    state.metrics.callbacks.with_label_values(&[outcome]).inc();
    if let Err(e) = state.queue.callback_done(&due.entry).await {
        tracing::warn!(error = %e, delivery = %due.entry, "could not end the delivery; it will be retried");
    }
}

async fn attempt_all(state: &AppState, due: &CallbackDue) -> Result<(), String> {
    let Some((owner, url)) = state.queue.callback_target(due).await.map_err(|e| e.to_string())? else {
        return Err("the job or batch expired before its callback was sent".into());
    };
    let secret = state.config.callbacks.secret(&owner).ok_or("the token's callback secret was removed")?;
    let body = match body(state, due).await? {
        Some(body) => body,
        None => return Err("the job or batch expired before its callback was sent".into()),
    };
    let mut last = String::new();
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_secs(BACKOFF[attempt - 1])).await;
        }
        match send(state, due, &url, secret, &body).await {
            Ok(status) if status.is_success() => return Ok(()),
            Ok(status) if status.is_server_error() || status.as_u16() == 408 || status.as_u16() == 429 => {
                last = format!("answered {status}");
            }
            Ok(status) => return Err(format!("answered {status}; not retried")),
            Err(e) => last = e,
        }
    }
    Err(format!("{ATTEMPTS} attempts failed; the last {last}"))
}

/// A callback's request: POST of the job object (or the batch object
/// without its jobs), or, for a job a compatible API submitted, what that
/// API sends instead (Judge0 PUTs its submission).
struct Body {
    method: reqwest::Method,
    bytes: Vec<u8>,
}

async fn body(state: &AppState, due: &CallbackDue) -> Result<Option<Body>, String> {
    let post = |bytes| Body { method: reqwest::Method::POST, bytes };
    if due.kind == CallbackDue::BATCH {
        let view = crate::batches::summary(state, &due.id).await.map_err(|e| e.to_string())?;
        return view.map(|view| serde_json::to_vec(&view).map(post)).transpose().map_err(|e| e.to_string());
    }
    let Some(record) = state.queue.get(&due.id).await.map_err(|e| e.to_string())? else { return Ok(None) };
    if let Some(bytes) = crate::compat::callback_body(&record) {
        return Ok(Some(Body { method: reqwest::Method::PUT, bytes }));
    }
    serde_json::to_vec(&crate::jobs::JobView::from(record)).map(|bytes| Some(post(bytes))).map_err(|e| e.to_string())
}

async fn send(
    state: &AppState,
    due: &CallbackDue,
    url: &str,
    secret: &[u8],
    body: &Body,
) -> Result<reqwest::StatusCode, String> {
    let (url, host, addr) = reachable(&state.config.callbacks, url).await?;
    let client = reqwest::Client::builder()
        .resolve(&host, addr)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(ATTEMPT_TIMEOUT)
        .build()
        .map_err(|e| e.to_string())?;
    let event = if due.kind == CallbackDue::BATCH { "batch.finished" } else { "job.finished" };
    let response = client
        .request(body.method.clone(), url)
        .header("Content-Type", "application/json")
        .header("User-Agent", "runbox-callbacks")
        .header("Runbox-Event", event)
        .header("Runbox-Delivery", &due.entry)
        .header("Runbox-Signature", signature(secret, now_unix_ms() / 1000, &body.bytes))
        .body(body.bytes.clone())
        .send()
        .await
        .map_err(|e| format!("failed: {e}"))?;
    Ok(response.status())
}

/// `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`.
pub fn signature(secret: &[u8], unix_s: u64, body: &[u8]) -> String {
    #[allow(clippy::expect_used)] // HMAC accepts a key of any length.
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("any key length");
    mac.update(format!("{unix_s}.").as_bytes());
    mac.update(body);
    format!("t={unix_s},v1={}", hex::encode(mac.finalize().into_bytes()))
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

    #[test]
    fn the_signature_is_hmac_sha256_of_time_dot_body() {
        // Python: hmac.new(b"Jefe", b"0.what do ya want for nothing?", hashlib.sha256).hexdigest()
        assert_eq!(
            signature(b"Jefe", 0, b"what do ya want for nothing?"),
            "t=0,v1=37f471929915ccd2cbbe79feb84ffcff4f2bb25e15fc41c2506687331ae179cc"
        );
    }
}
