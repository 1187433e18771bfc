//! An E2B-compatible API under `/e2b`, so that E2B's own SDKs
//! (`e2b-code-interpreter` on PyPI, `@e2b/code-interpreter` on npm) run
//! against runbox unchanged: a user sets `E2B_API_URL` and
//! `E2B_SANDBOX_URL` to `https://<runbox>/e2b` and `E2B_API_KEY` to a
//! runbox token.
//!
//! A sandbox is a few runbox sessions under one id: one per code context,
//! each in its language, made when first used. The default Python context's
//! session holds the sandbox's files (its home is E2B's `/home/user`).
//! Its record ([`Sandbox`]) lives in Redis beside the sessions, changed
//! when a context is made or removed, a timeout set, or the sandbox paused
//! or resumed, each change on the record as it is ([`update`]). A pause
//! checkpoints every context's session and ends it, freeing its process;
//! a connect starts them again from those checkpoints.
//!
//! - `control`: the control plane (`X-API-KEY`): create, list, connect,
//!   kill, timeouts, pause and resume.
//! - `envd`: the sandbox's files (`/files` and the `filesystem.Filesystem`
//!   Connect RPCs) and the clear refusal of `process.Process` (no shell).
//! - `interpreter`: `/execute`, streamed as E2B's lines, and `/contexts`.
//!
//! The data plane is one URL for every sandbox: a request names its
//! sandbox in `E2b-Sandbox-Id`, and is let in only with the access token
//! that sandbox was given at create, compared in constant time. The API
//! key is never sent there, so that token is the tenant's credential.
//!
//! Errors take E2B's shapes, so that the SDKs raise their own exceptions:
//! `{"code": <status>, "message"}` on the control plane and `/files`,
//! Connect's `{"code": "<name>", "message"}` on the RPCs.

mod control;
mod envd;
mod interpreter;

use std::collections::BTreeMap;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use runbox_common::{Language, MAX_SESSION_FILE_BYTES, now_unix_ms};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::requests::SessionRequest;
use crate::sessions;
use crate::state::AppState;

/// Where E2B's SDKs put a sandbox's files and run its code.
pub(crate) const HOME: &str = "/home/user";

/// The home as a session's code sees it (`os.getcwd()`), taken as E2B's.
const SESSION_HOME: &str = "/home/pyodide";

/// A sandbox's lifetime when create names none, as E2B's.
const DEFAULT_TIMEOUT_S: u64 = 300;

/// How long a paused sandbox's record is kept; its checkpoints last as
/// long as `RUNBOX_CHECKPOINT_TTL_S`, and a resume past that finds none.
const PAUSED_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// How many times [`update`] reads a sandbox again after another write
/// came between its read and its write.
const UPDATE_TRIES: usize = 20;

/// The envd version runbox answers as: past 0.4.0 the SDKs send no Basic
/// auth of a Linux user, and past 0.5.7 they may upload raw bytes.
const ENVD_VERSION: &str = "0.5.7";

/// The E2B API's routes, nested under `/e2b`.
pub fn router(state: &AppState) -> Router<AppState> {
    // An upload carries one file of at most the session's per-file cap, as
    // multipart: the cap, and room for the parts' headers.
    let uploads = DefaultBodyLimit::max(MAX_SESSION_FILE_BYTES + 64 * 1024);
    let body = DefaultBodyLimit::max(state.config.limits.max_body_bytes());
    Router::new()
        .merge(control::router().layer(body))
        .merge(interpreter::router().layer(body))
        .merge(envd::router().layer(uploads))
}

/// A sandbox: its sessions, its tokens, its deadline.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Sandbox {
    pub id: String,
    pub owner: String,
    pub template: String,
    /// What `X-Access-Token` must be on the data plane.
    pub access_token: String,
    /// What `E2B-Traffic-Access-Token` may be instead (the SDKs send only
    /// it on `/contexts`).
    pub traffic_token: String,
    pub metadata: BTreeMap<String, String>,
    pub started_at: String,
    /// When the sandbox ends, unless `set_timeout` or a connect moves it.
    pub end_at_ms: u64,
    pub paused: bool,
    pub contexts: Vec<Context>,
    /// The version of the record this was read from (see [`save`]).
    #[serde(skip)]
    pub version: u64,
}

/// One code context: a session in its language, or, while the sandbox is
/// paused, the checkpoint it starts again from.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Context {
    pub id: String,
    pub language: Language,
    /// The language's context that `run_code` without `context_id` uses.
    pub default: bool,
    pub session: Option<String>,
    pub checkpoint: Option<String>,
}

impl Sandbox {
    /// The context the files live in: the default Python one.
    fn home_context(&self) -> Option<&Context> {
        self.contexts.iter().find(|c| c.default && c.language == Language::Python)
    }

    fn end_at(&self) -> String {
        runbox_common::rfc3339_at_unix_ms(self.end_at_ms)
    }
}

/// A random token of 32 bytes, hex.
fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    bytes[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    bytes[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    hex::encode(bytes)
}

/// A new sandbox id: 20 lowercase letters and digits, as E2B's look.
fn new_sandbox_id() -> String {
    let hex = uuid::Uuid::new_v4().simple().to_string();
    format!("i{}", &hex[..19])
}

/// Sandbox `id`, if it exists and has not run out of time; one that has
/// is ended on the way.
async fn load(state: &AppState, id: &str) -> Result<Option<Sandbox>, ApiError> {
    let Some(stored) = state.queue.e2b_sandbox(id).await? else { return Ok(None) };
    let Ok(mut sandbox) = serde_json::from_str::<Sandbox>(&stored.json) else {
        tracing::error!(sandbox = %id, "an E2B sandbox record does not parse");
        return Ok(None);
    };
    sandbox.version = stored.version;
    if !sandbox.paused && sandbox.end_at_ms <= now_unix_ms() {
        end(state, &sandbox).await?;
        return Ok(None);
    }
    Ok(Some(sandbox))
}

/// Sandbox `id` of `caller`; another token's is not found.
async fn owned(state: &AppState, caller: &Caller, id: &str) -> Result<Option<Sandbox>, ApiError> {
    Ok(load(state, id).await?.filter(|s| s.owner == caller.0))
}

/// Writes `sandbox` if its record is still the version it was read at (a
/// new one, if there is none). False when another write came first.
async fn save(state: &AppState, sandbox: &Sandbox) -> Result<bool, ApiError> {
    let json = serde_json::to_string(sandbox).unwrap_or_default();
    let ttl = if sandbox.paused {
        PAUSED_TTL
    } else {
        Duration::from_millis(sandbox.end_at_ms.saturating_sub(now_unix_ms())) + Duration::from_secs(60)
    };
    Ok(state.queue.put_e2b_sandbox(&sandbox.id, &sandbox.owner, &json, sandbox.version, ttl).await?)
}

/// Changes sandbox `id` of `caller` with `change`, on the record as it is
/// now: read, changed and written again until no other write came between.
/// `change` answers what the caller needs, and whether to write at all.
/// None when there is no such sandbox (or it is another token's).
async fn update<T>(
    state: &AppState,
    caller: &Caller,
    id: &str,
    mut change: impl FnMut(&mut Sandbox) -> (T, bool),
) -> Result<Option<(Sandbox, T)>, ApiError> {
    for _ in 0..UPDATE_TRIES {
        let Some(mut sandbox) = owned(state, caller, id).await? else { return Ok(None) };
        let (answer, write) = change(&mut sandbox);
        if !write || save(state, &sandbox).await? {
            return Ok(Some((sandbox, answer)));
        }
    }
    Err(ApiError::SessionBusy(format!("sandbox {id} is being changed by other requests; try again")))
}

/// Ends every session of `sandbox` and forgets it. True if it was there.
async fn end(state: &AppState, sandbox: &Sandbox) -> Result<bool, ApiError> {
    let caller = Caller(sandbox.owner.clone());
    for session in sandbox.contexts.iter().filter_map(|c| c.session.as_deref()) {
        // A session that has ended already is fine: it is what was asked.
        if let Err(e) = sessions::destroy_session(state, &caller, session).await {
            tracing::debug!(%session, error = %e, "ending an E2B sandbox's session");
        }
    }
    tracing::info!(sandbox = %sandbox.id, "e2b sandbox ended");
    Ok(state.queue.delete_e2b_sandbox(&sandbox.id, &sandbox.owner).await?)
}

/// Starts a session for a context of `language`, from `checkpoint` if
/// given, idle for at most the sandbox's remaining time.
async fn start_session(
    state: &AppState,
    caller: &Caller,
    sandbox: &Sandbox,
    language: Language,
    checkpoint: Option<String>,
) -> Result<String, ApiError> {
    let left_s = sandbox.end_at_ms.saturating_sub(now_unix_ms()) / 1000;
    let idle = left_s.clamp(1, state.config.sessions.max_idle.as_secs());
    let request = SessionRequest {
        language: checkpoint.is_none().then_some(language),
        idle_timeout_s: Some(idle),
        from_checkpoint: checkpoint,
    };
    Ok(sessions::create_session(state, caller, request).await?.id)
}

/// The caller on the data plane: the owner of the sandbox the request
/// names, if it carries that sandbox's access token.
async fn data_caller(state: &AppState, headers: &HeaderMap) -> Result<(Caller, Sandbox), DataRefusal> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("");
    let id = header("e2b-sandbox-id");
    let sandbox = match load(state, id).await {
        Ok(Some(sandbox)) => sandbox,
        Ok(None) => return Err(DataRefusal::Gone(format!("the sandbox {id:?} was not found"))),
        Err(e) => return Err(DataRefusal::Failed(e)),
    };
    let matches = |presented: &str, secret: &str| bool::from(presented.as_bytes().ct_eq(secret.as_bytes()));
    let access = matches(header("x-access-token"), &sandbox.access_token);
    let traffic = matches(header("e2b-traffic-access-token"), &sandbox.traffic_token);
    if !(access || traffic) {
        return Err(DataRefusal::Unauthorized);
    }
    if sandbox.paused {
        return Err(DataRefusal::Gone(format!("the sandbox {id:?} is paused: connect to it to resume it")));
    }
    Ok((Caller(sandbox.owner.clone()), sandbox))
}

/// Why a data-plane request is not let in.
enum DataRefusal {
    /// No such sandbox (or it ended, or is paused): E2B answers 502.
    Gone(String),
    Unauthorized,
    Failed(ApiError),
}

impl DataRefusal {
    /// The refusal as E2B's `{code, message}` with its status.
    fn into_plain(self) -> Response {
        match self {
            DataRefusal::Gone(message) => plain_error(StatusCode::BAD_GATEWAY, &message),
            DataRefusal::Unauthorized => plain_error(
                StatusCode::UNAUTHORIZED,
                "the access token is missing or wrong for this sandbox; it is the one create or connect returned",
            ),
            DataRefusal::Failed(e) => api_error(e),
        }
    }
}

/// E2B's error body, `{"code": <status>, "message"}`: the SDKs read both.
fn plain_error(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({ "code": status.as_u16(), "message": message });
    (status, axum::Json(body)).into_response()
}

/// An [`ApiError`] in E2B's shape. A session cap is not worth the SDKs'
/// retries (they retry 429 and 503 three times): `Should-Retry: false`.
fn api_error(e: ApiError) -> Response {
    let status = e.status();
    let mut response = plain_error(status, &e.to_string());
    if matches!(e, ApiError::TooManySessions(_)) {
        response.headers_mut().insert("should-retry", axum::http::HeaderValue::from_static("false"));
    }
    if e.is_server_side() {
        tracing::warn!(error = %e, "e2b request failed");
    }
    response
}

/// A path as E2B's SDKs give it, as a path under the session's home:
/// relative paths are relative to the home, absolute ones must be under
/// it (`/home/user`, or the session's own name for it). `.` names are
/// dropped; the rest is checked as the files API checks a path. Empty for
/// the home itself.
fn home_path(path: &str) -> Result<String, ApiError> {
    let under = |home: &str| {
        path.strip_prefix(home).filter(|rest| rest.is_empty() || rest.starts_with('/')).map(|rest| rest.to_owned())
    };
    let relative = if path.starts_with('/') {
        under(HOME).or_else(|| under(SESSION_HOME)).ok_or_else(|| {
            ApiError::InvalidPath(format!(
                "{path:?} is outside the sandbox's home: a runbox sandbox's files live under {HOME} (and relative \
                 paths are relative to it)"
            ))
        })?
    } else if path == "~" || path.starts_with("~/") {
        path[1..].to_owned()
    } else {
        path.to_owned()
    };
    let names: Vec<&str> = relative.split('/').filter(|name| !name.is_empty() && *name != ".").collect();
    let joined = names.join("/");
    if !joined.is_empty() {
        crate::files::checked(&joined)?;
    }
    Ok(joined)
}

/// A path under the session's home as E2B shows it.
fn e2b_path(relative: &str) -> String {
    if relative.is_empty() { HOME.to_owned() } else { format!("{HOME}/{relative}") }
}

/// Seconds from a request, within what a session may be given.
fn timeout_s(asked: Option<u64>, state: &AppState) -> Result<u64, ApiError> {
    let max = state.config.sessions.lifetime.as_secs();
    match asked.unwrap_or(DEFAULT_TIMEOUT_S) {
        0 => Err(ApiError::invalid("timeout", "timeout must be at least 1 second")),
        s if s > max => Err(ApiError::invalid(
            "timeout",
            format!("timeout may be at most {max} seconds (RUNBOX_SESSION_LIFETIME_S)"),
        )),
        s => Ok(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_taken_under_the_home() {
        assert_eq!(home_path("data/x.csv").ok(), Some("data/x.csv".into()));
        assert_eq!(home_path("/home/user/data/x.csv").ok(), Some("data/x.csv".into()));
        assert_eq!(home_path("/home/pyodide/x").ok(), Some("x".into()));
        assert_eq!(home_path("/home/user").ok(), Some(String::new()));
        assert_eq!(home_path("/home/user/").ok(), Some(String::new()));
        assert_eq!(home_path("./a/./b/").ok(), Some("a/b".into()));
        assert_eq!(home_path("~/a").ok(), Some("a".into()));
        for refused in ["/etc/passwd", "/home/username/x", "../x", "a/../../x", "/home/user/../x", "a\0b"] {
            assert_eq!(home_path(refused).map_err(|e| e.code()), Err("invalid_path"), "{refused:?}");
        }
    }
}
