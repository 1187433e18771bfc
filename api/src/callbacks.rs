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
//!   6to4, documentation, ...: see [`runbox_common::addresses`]) are refused at
//!   submission and again at each attempt, unless `RUNBOX_CALLBACK_ALLOW`
//!   lists them. Each attempt connects to the address it checked, and
//!   redirects are not followed, so DNS cannot swap in an address after
//!   the check.

use std::time::Duration;

use hmac::{Hmac, Mac};
use runbox_common::{CallbackDue, Queue, now_unix_ms};
use sha2::Sha256;

use crate::callback_urls::{ATTEMPT_TIMEOUT, ATTEMPTS, reachable};
use crate::state::AppState;

const BACKOFF: [u64; ATTEMPTS - 1] = [1, 2, 4, 8, 16, 32, 64];

/// A delivery another api left pending this long is taken over: longer
/// than all of one delivery's attempts and pauses.
const STALE: Duration = Duration::from_secs(600);

/// Deliveries in flight per api process.
const IN_FLIGHT: usize = 16;

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
    serde_json::to_vec(&crate::views::JobView::from(record)).map(|bytes| Some(post(bytes))).map_err(|e| e.to_string())
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
    fn the_signature_is_hmac_sha256_of_time_dot_body() {
        // Python: hmac.new(b"Jefe", b"0.what do ya want for nothing?", hashlib.sha256).hexdigest()
        assert_eq!(
            signature(b"Jefe", 0, b"what do ya want for nothing?"),
            "t=0,v1=37f471929915ccd2cbbe79feb84ffcff4f2bb25e15fc41c2506687331ae179cc"
        );
    }
}
