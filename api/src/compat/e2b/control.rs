//! E2B's control plane: sandboxes made, listed, connected to, timed,
//! paused and ended, for the token in `X-API-KEY`.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::FromRequestParts;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use runbox_common::{Language, now_rfc3339, now_unix_ms};
use serde::Deserialize;
use serde_json::{Value, json};

use super::interpreter::new_context;
use super::{
    ENVD_VERSION, Sandbox, api_error, end, new_sandbox_id, new_secret, owned, plain_error, save, start_session,
    timeout_s, update,
};
use crate::auth::{Caller, bearer, identify};
use crate::error::ApiError;
use crate::sessions;
use crate::state::AppState;

/// Templates a sandbox may name: E2B's code interpreter's and its base
/// one. Both are the same runbox sandbox.
const TEMPLATES: [&str; 2] = ["code-interpreter-v1", "base"];

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/v2/sandboxes", get(list).post(create))
        .route("/sandboxes", get(list))
        .route("/v2/sandboxes/{id}/connect", post(connect))
        .route("/sandboxes/{id}", get(info).delete(kill))
        .route("/sandboxes/{id}/timeout", post(set_timeout))
        .route("/sandboxes/{id}/pause", post(pause))
        .route("/sandboxes/{id}/resume", post(resume))
}

/// The caller named by `X-API-KEY` (or a bearer token): every control-plane
/// handler takes it, and a request without a runbox token gets E2B's 401.
struct ApiKey(Caller);

impl FromRequestParts<AppState> for ApiKey {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let headers = &parts.headers;
        let key = headers.get("x-api-key").and_then(|v| v.to_str().ok()).or_else(|| bearer(headers));
        identify(state, key)
            .map(ApiKey)
            .ok_or_else(|| plain_error(StatusCode::UNAUTHORIZED, "invalid API key: E2B_API_KEY must be a runbox token"))
    }
}

/// A JSON body, or `{}` when there is none.
fn body<T: for<'de> Deserialize<'de> + Default>(bytes: &Bytes) -> Result<T, Box<Response>> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(bytes)
        .map_err(|e| Box::new(plain_error(StatusCode::BAD_REQUEST, &format!("the body is not the JSON expected: {e}"))))
}

fn not_found(id: &str) -> Response {
    plain_error(StatusCode::NOT_FOUND, &format!("sandbox {id} not found"))
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateBody {
    #[serde(rename = "templateID")]
    template_id: Option<String>,
    timeout: Option<u64>,
    metadata: Option<BTreeMap<String, String>>,
    env_vars: Option<BTreeMap<String, String>>,
}

/// `POST /v2/sandboxes`: a sandbox with its default Python context open.
async fn create(State(state): State<AppState>, ApiKey(caller): ApiKey, bytes: Bytes) -> Response {
    let request: CreateBody = match body(&bytes) {
        Ok(request) => request,
        Err(refused) => return *refused,
    };
    let template = request.template_id.unwrap_or_else(|| TEMPLATES[0].to_owned());
    if !TEMPLATES.contains(&template.as_str()) {
        let message = format!(
            "template {template:?} does not exist here: runbox runs the templates {TEMPLATES:?}, one sandbox that \
             runs Python and JavaScript"
        );
        return plain_error(StatusCode::BAD_REQUEST, &message);
    }
    if request.env_vars.is_some_and(|vars| !vars.is_empty()) {
        let message = "envVars are not supported: runbox sandboxes have no environment to set; pass env_vars to \
                       run_code instead";
        return plain_error(StatusCode::BAD_REQUEST, message);
    }
    let timeout = match timeout_s(request.timeout, &state) {
        Ok(timeout) => timeout,
        Err(e) => return api_error(e),
    };
    let mut sandbox = Sandbox {
        id: new_sandbox_id(),
        owner: caller.0.clone(),
        template,
        access_token: new_secret(),
        traffic_token: new_secret(),
        metadata: request.metadata.unwrap_or_default(),
        started_at: now_rfc3339(),
        end_at_ms: now_unix_ms() + timeout * 1000,
        paused: false,
        contexts: Vec::new(),
        version: 0,
    };
    match new_context(&state, &caller, &sandbox, Language::Python, true).await {
        Ok(home) => sandbox.contexts.push(home),
        Err(e) => return api_error(e),
    }
    match save(&state, &sandbox).await {
        Ok(true) => {}
        Ok(false) => {
            let _ = end(&state, &sandbox).await;
            return plain_error(StatusCode::CONFLICT, "a sandbox with this id exists already; try again");
        }
        Err(e) => {
            let _ = end(&state, &sandbox).await;
            return api_error(e);
        }
    }
    tracing::info!(sandbox = %sandbox.id, "e2b sandbox created");
    (StatusCode::CREATED, Json(created_view(&sandbox))).into_response()
}

/// What create and connect answer: the sandbox and its data-plane tokens.
fn created_view(sandbox: &Sandbox) -> Value {
    json!({
        "templateID": sandbox.template,
        "sandboxID": sandbox.id,
        "clientID": "runbox",
        "envdVersion": ENVD_VERSION,
        "envdAccessToken": sandbox.access_token,
        "trafficAccessToken": sandbox.traffic_token,
        "domain": null,
    })
}

/// A sandbox as list and get_info show it.
fn listed_view(sandbox: &Sandbox) -> Value {
    json!({
        "templateID": sandbox.template,
        "sandboxID": sandbox.id,
        "clientID": "runbox",
        "startedAt": sandbox.started_at,
        "endAt": sandbox.end_at(),
        "cpuCount": 1,
        "memoryMB": 0,
        "diskSizeMB": 0,
        "state": if sandbox.paused { "paused" } else { "running" },
        "envdVersion": ENVD_VERSION,
        "metadata": sandbox.metadata,
    })
}

#[derive(Deserialize)]
struct ListQuery {
    state: Option<String>,
    metadata: Option<String>,
}

/// `GET /v2/sandboxes`: the caller's sandboxes, running and paused, or
/// those `state` names; `metadata` (`k=v&...`, URL-encoded) filters them.
async fn list(State(state): State<AppState>, ApiKey(caller): ApiKey, Query(query): Query<ListQuery>) -> Response {
    let ids = match state.queue.owner_e2b_sandboxes(&caller.0).await {
        Ok(ids) => ids,
        Err(e) => return api_error(e.into()),
    };
    let states: Vec<&str> = query.state.as_deref().map_or(vec!["running", "paused"], |s| s.split(',').collect());
    let wanted: Vec<(String, String)> = query.metadata.as_deref().map(form_urlencoded_pairs).unwrap_or_default();
    let mut shown = Vec::new();
    for id in ids {
        // `load` ends one past its time.
        let Ok(Some(sandbox)) = super::load(&state, &id).await else { continue };
        let view = listed_view(&sandbox);
        let matches = wanted.iter().all(|(k, v)| sandbox.metadata.get(k) == Some(v));
        if matches && states.contains(&view["state"].as_str().unwrap_or("")) {
            shown.push(view);
        }
    }
    shown.sort_by(|a, b| a["startedAt"].as_str().cmp(&b["startedAt"].as_str()));
    Json(shown).into_response()
}

/// `k=v&k2=v2`, percent-decoded.
fn form_urlencoded_pairs(text: &str) -> Vec<(String, String)> {
    let decoded = percent_encoding::percent_decode_str(text).decode_utf8_lossy().into_owned();
    decoded.split('&').filter_map(|pair| pair.split_once('=')).map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
}

/// `GET /sandboxes/{id}`.
async fn info(State(state): State<AppState>, ApiKey(caller): ApiKey, Path(id): Path<String>) -> Response {
    match owned(&state, &caller, &id).await {
        Ok(Some(sandbox)) => Json(listed_view(&sandbox)).into_response(),
        Ok(None) => not_found(&id),
        Err(e) => api_error(e),
    }
}

/// `DELETE /sandboxes/{id}`: ends its sessions; 404 if there is none.
async fn kill(State(state): State<AppState>, ApiKey(caller): ApiKey, Path(id): Path<String>) -> Response {
    match owned(&state, &caller, &id).await {
        Ok(Some(sandbox)) => match end(&state, &sandbox).await {
            Ok(_) => StatusCode::NO_CONTENT.into_response(),
            Err(e) => api_error(e),
        },
        Ok(None) => not_found(&id),
        Err(e) => api_error(e),
    }
}

#[derive(Default, Deserialize)]
struct TimeoutBody {
    timeout: Option<u64>,
}

/// `POST /sandboxes/{id}/timeout`: the sandbox ends `timeout` seconds
/// from now.
async fn set_timeout(
    State(state): State<AppState>,
    ApiKey(caller): ApiKey,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Response {
    let request: TimeoutBody = match body(&bytes) {
        Ok(request) => request,
        Err(refused) => return *refused,
    };
    let Some(asked) = request.timeout else {
        return plain_error(StatusCode::BAD_REQUEST, "timeout (seconds) is required");
    };
    let timeout = match timeout_s(Some(asked), &state) {
        Ok(timeout) => timeout,
        Err(e) => return api_error(e),
    };
    let end_at_ms = now_unix_ms() + timeout * 1000;
    match update(&state, &caller, &id, |sandbox| {
        ((), std::mem::replace(&mut sandbox.end_at_ms, end_at_ms) != end_at_ms)
    })
    .await
    {
        Ok(Some(_)) => StatusCode::NO_CONTENT.into_response(),
        Ok(None) => not_found(&id),
        Err(e) => api_error(e),
    }
}

/// `POST /sandboxes/{id}/pause`: every context's session checkpointed and
/// ended, its process freed. 409 if it is paused already.
async fn pause(State(state): State<AppState>, ApiKey(caller): ApiKey, Path(id): Path<String>) -> Response {
    let sandbox = match owned(&state, &caller, &id).await {
        Ok(Some(sandbox)) => sandbox,
        Ok(None) => return not_found(&id),
        Err(e) => return api_error(e),
    };
    if sandbox.paused {
        return already_paused(&id);
    }
    // Every checkpoint first: a sandbox that cannot be saved whole keeps running.
    let mut saved = std::collections::HashMap::new();
    for session in sandbox.contexts.iter().filter_map(|c| c.session.clone()) {
        match sessions::take_checkpoint(&state, &caller, &session).await {
            Ok(info) => saved.insert(session, info.id),
            Err(e) => return api_error(e),
        };
    }
    // Then, on the record as it is now, each context keeps its checkpoint
    // and lets its session go; one made meanwhile starts afresh when used.
    let paused = update(&state, &caller, &id, |sandbox| {
        if sandbox.paused {
            return (None, false);
        }
        let mut ended = Vec::new();
        for context in &mut sandbox.contexts {
            if let Some(session) = context.session.take() {
                context.checkpoint = saved.get(&session).cloned();
                ended.push(session);
            }
        }
        sandbox.paused = true;
        (Some(ended), true)
    });
    match paused.await {
        Ok(Some((_, Some(ended)))) => {
            for session in ended {
                if let Err(e) = sessions::destroy_session(&state, &caller, &session).await {
                    tracing::debug!(%session, error = %e, "ending a paused sandbox's session");
                }
            }
            tracing::info!(sandbox = %id, "e2b sandbox paused");
            StatusCode::NO_CONTENT.into_response()
        }
        // Another request paused it first.
        Ok(Some((_, None))) => already_paused(&id),
        Ok(None) => not_found(&id),
        Err(e) => api_error(e),
    }
}

fn already_paused(id: &str) -> Response {
    plain_error(StatusCode::CONFLICT, &format!("sandbox {id} is already paused"))
}

/// `POST /v2/sandboxes/{id}/connect`: the sandbox, resumed if paused; a
/// `timeout` moves its end later, never earlier.
async fn connect(
    State(state): State<AppState>,
    ApiKey(caller): ApiKey,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Response {
    wake(state, caller, id, bytes, false).await
}

/// `POST /sandboxes/{id}/resume`: as connect, for a paused sandbox only.
async fn resume(
    State(state): State<AppState>,
    ApiKey(caller): ApiKey,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Response {
    wake(state, caller, id, bytes, true).await
}

async fn wake(state: AppState, caller: Caller, id: String, bytes: Bytes, paused_only: bool) -> Response {
    let request: TimeoutBody = match body(&bytes) {
        Ok(request) => request,
        Err(refused) => return *refused,
    };
    let sandbox = match owned(&state, &caller, &id).await {
        Ok(Some(sandbox)) => sandbox,
        Ok(None) => return not_found(&id),
        Err(e) => return api_error(e),
    };
    if paused_only && !sandbox.paused {
        return plain_error(StatusCode::CONFLICT, &format!("sandbox {id} is not paused"));
    }
    let asked = match (request.timeout, sandbox.paused) {
        (None, false) => None,
        (timeout, _) => match timeout_s(timeout, &state) {
            Ok(timeout) => Some(now_unix_ms() + timeout * 1000),
            Err(e) => return api_error(e),
        },
    };
    // A paused sandbox's sessions start again from their checkpoints, then
    // go on the record, unless another request resumed it meanwhile.
    let started = if sandbox.paused {
        match restart(&state, &caller, &sandbox).await {
            Ok(started) => started,
            Err(e) => return api_error(e),
        }
    } else {
        Vec::new()
    };
    let woke = update(&state, &caller, &id, |now| {
        let resumed = now.paused && sandbox.paused;
        if resumed {
            for context in &mut now.contexts {
                context.session = started.iter().find(|(id, _)| *id == context.id).map(|(_, s)| s.clone());
                context.checkpoint = None;
            }
            now.paused = false;
        }
        let later = asked.filter(|&asked| resumed || asked > now.end_at_ms);
        if let Some(end_at_ms) = later {
            now.end_at_ms = end_at_ms;
        }
        (resumed, resumed || later.is_some())
    });
    let woke = woke.await;
    // Sessions started for a resume that did not happen (another request
    // resumed it first, or it went) are ended.
    if !matches!(woke, Ok(Some((_, true)))) {
        for (_, session) in &started {
            let _ = sessions::destroy_session(&state, &caller, session).await;
        }
    }
    match woke {
        Ok(Some((sandbox, resumed))) => {
            let status = if resumed { StatusCode::CREATED } else { StatusCode::OK };
            (status, Json(created_view(&sandbox))).into_response()
        }
        Ok(None) => not_found(&id),
        Err(e) => api_error(e),
    }
}

/// Starts a session for every context of paused `sandbox` from its
/// checkpoint: (context id, session id). All or none: on a failure, what
/// started is ended again, and the sandbox stays paused, whole.
async fn restart(state: &AppState, caller: &Caller, sandbox: &Sandbox) -> Result<Vec<(String, String)>, ApiError> {
    let mut started = Vec::new();
    for context in &sandbox.contexts {
        let Some(checkpoint) = context.checkpoint.clone() else { continue };
        match start_session(state, caller, sandbox, context.language, Some(checkpoint)).await {
            Ok(session) => started.push((context.id.clone(), session)),
            Err(e) => {
                for (_, session) in started {
                    let _ = sessions::destroy_session(state, caller, &session).await;
                }
                return Err(e);
            }
        }
    }
    tracing::info!(sandbox = %sandbox.id, "e2b sandbox resumed");
    Ok(started)
}
