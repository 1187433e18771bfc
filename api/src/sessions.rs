//! The `/v1/sessions` handlers: sessions whose state lasts across execs.
//!
//! A session is admitted only within the fleet's session places (the sum
//! of what live workers offer, `RUNBOX_WORKER_SESSIONS` each) and its
//! token's fair share of them (`SessionLimits::fair_share`); past either
//! it is refused at once, 429 or 503, never queued.
//!
//! Every step is a signed job (see `runbox_common::session`): a session
//! starts through a stream workers read into their session places, apart
//! from their job slots, and its execs, checkpoints and
//! destroys go to the one worker that holds it. An exec on a busy session
//! is refused with 409 rather than queued: an agent that sends two at once
//! has a bug, and waiting would hide it.
//!
//! When the worker holding a session has stopped answering, the next call
//! starts the session again on another worker from its latest checkpoint
//! (the response says so), or ends it as lost (410 `session_lost`).

use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use runbox_common::{
    Admission, CheckpointInfo, JobRecord, JobSpec, Language, Outcome, Recovery, Sent, SessionOp, SessionRecord,
    SessionStatus, SessionTask, Status, StepResult, now_rfc3339, now_unix_ms,
};
use serde_json::Value;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::pipeline::{self, Signed, wait_for};
use crate::requests::json_body;
use crate::requests::{self, ExecRequest, SessionRequest};
use crate::state::AppState;
use crate::views::{ExecSession, ExecView, JobView, SessionView};

/// How long creating a session waits for a worker to open it before
/// answering 202 with the session still `starting`.
const START_WAIT: Duration = Duration::from_secs(60);

/// How long an exec may take beyond its own timeout before the api answers
/// 202 and leaves the client to poll `GET /v1/jobs/{id}`.
pub(crate) const EXEC_MARGIN: Duration = Duration::from_secs(30);

/// How often a waiting exec checks that its worker is still alive.
const LIVENESS_EVERY: Duration = Duration::from_secs(2);

/// How long taking a checkpoint may take before the api gives up waiting.
const CHECKPOINT_WAIT: Duration = Duration::from_secs(120);

/// Starts a session and waits for a worker to open it.
#[utoipa::path(
    post,
    path = "/v1/sessions",
    tag = "sessions",
    request_body(content = SessionRequest, content_type = "application/json"),
    responses(
        (status = 201, description = "Open and idle.", body = SessionView),
        (status = 202, description = "Still `starting`; poll `GET /v1/sessions/{id}`.", body = SessionView),
        (status = 400, description = "`invalid_json`, `invalid_field` or `unknown_field`.", body = crate::views::ErrorBody),
        (status = 404, description = "`no_checkpoint`: `from_checkpoint` names no checkpoint of the caller's.", body = crate::views::ErrorBody),
        (status = 413, description = "`payload_too_large`.", body = crate::views::ErrorBody),
        (status = 415, description = "`unsupported_media_type`.", body = crate::views::ErrorBody),
        (status = 429, description = "`too_many_sessions`: the token holds its share of the fleet's session places; or `quota_exceeded`.", body = crate::views::ErrorBody),
        (status = 401, description = "`unauthorized`.", body = crate::views::ErrorBody),
        (status = 503, description = "`sessions_full`: every session place of the workers is taken (answered at once, with `Retry-After`); `unavailable`; or `session_unavailable`: no worker could open it.", body = crate::views::ErrorBody),
    ),
)]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = json_body(&headers, body, state.config.limits.max_body_bytes())?;
    let request = requests::parse::<SessionRequest>(&body)?;
    Ok(created(create_session(&state, &caller, request).await?))
}

/// Lists the caller's live sessions.
#[utoipa::path(
    get,
    path = "/v1/sessions",
    tag = "sessions",
    responses(
        (status = 200, description = "The caller's live sessions.", body = crate::views::SessionList),
        (status = 401, description = "`unauthorized`.", body = crate::views::ErrorBody),
        (status = 503, description = "`unavailable`.", body = crate::views::ErrorBody),
    ),
)]
pub async fn list(State(state): State<AppState>, caller: Caller) -> Result<Json<Value>, ApiError> {
    let sessions = state.queue.owner_sessions(&caller.0).await?;
    let views: Vec<SessionView> = sessions.into_iter().map(SessionView::from).collect();
    Ok(Json(serde_json::json!({ "sessions": views })))
}

/// Reads a session, ended or not.
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}",
    tag = "sessions",
    params(SessionId),
    responses(
        (status = 200, description = "The session.", body = SessionView),
        (status = 401, description = "`unauthorized`.", body = crate::views::ErrorBody),
        (status = 404, description = "`no_session`.", body = crate::views::ErrorBody),
        (status = 503, description = "`unavailable`.", body = crate::views::ErrorBody),
    ),
)]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<SessionView>, ApiError> {
    Ok(Json(owned(&state, &caller, &id).await?.into()))
}

/// Ends a session and its process.
#[utoipa::path(
    delete,
    path = "/v1/sessions/{id}",
    tag = "sessions",
    params(SessionId),
    responses(
        (status = 200, description = "The session, now `closed`.", body = SessionView),
        (status = 409, description = "`session_busy`: it moved to another worker meanwhile.", body = crate::views::ErrorBody),
        (status = 404, description = "`no_session`: no such session, or another token's.", body = crate::views::ErrorBody),
        (status = 410, description = "`session_closed`, `session_expired` or `session_lost`: it has ended.", body = crate::views::ErrorBody),
        (status = 401, description = "`unauthorized`.", body = crate::views::ErrorBody),
        (status = 503, description = "`unavailable`, or `session_unavailable`: no worker could open or reach it.", body = crate::views::ErrorBody),
    ),
)]
pub async fn destroy(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<SessionView>, ApiError> {
    Ok(Json(destroy_session(&state, &caller, &id).await?.into()))
}

/// Runs code in the session, whose globals and imports last from one exec
/// to the next.
#[utoipa::path(
    post,
    path = "/v1/sessions/{id}/exec",
    tag = "sessions",
    params(SessionId),
    request_body(content = ExecRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The exec's job, and the session after it. With `Accept: text/event-stream`: the exec's output as it is written, then its job object, as `GET /v1/jobs/{id}/events` streams them.", body = ExecView),
        (status = 202, description = "Still running after its timeout plus a margin; poll `GET /v1/jobs/{id}`.", body = crate::views::Accepted),
        (status = 400, description = "`invalid_json`, `invalid_field` or `unknown_field`.", body = crate::views::ErrorBody),
        (status = 409, description = "`session_busy`: another exec or a checkpoint is running, or it is starting.", body = crate::views::ErrorBody),
        (status = 413, description = "`payload_too_large`, `code_too_large` or `stdin_too_large`.", body = crate::views::ErrorBody),
        (status = 415, description = "`unsupported_media_type`.", body = crate::views::ErrorBody),
        (status = 429, description = "`quota_exceeded`.", body = crate::views::ErrorBody),
        (status = 404, description = "`no_session`: no such session, or another token's.", body = crate::views::ErrorBody),
        (status = 410, description = "`session_closed`, `session_expired` or `session_lost`: it has ended.", body = crate::views::ErrorBody),
        (status = 401, description = "`unauthorized`.", body = crate::views::ErrorBody),
        (status = 503, description = "`unavailable`, or `session_unavailable`: no worker could open or reach it.", body = crate::views::ErrorBody),
    ),
)]
pub async fn exec(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = json_body(&headers, body, state.config.limits.max_body_bytes())?;
    let request = requests::parse::<ExecRequest>(&body)?;
    if wants_events(&headers) {
        let Handed { job, timeout, .. } = send_exec(&state, &caller, &id, request).await?;
        let deadline = tokio::time::Instant::now() + timeout + EXEC_MARGIN;
        return Ok(crate::events::events(state, job, None, Some(deadline)).into_response());
    }
    match exec_in(&state, &caller, &id, request).await? {
        Executed::Done(view) => Ok(Json(view).into_response()),
        Executed::Pending(job) => {
            let body = serde_json::json!({ "id": job, "status": Status::Running });
            Ok((StatusCode::ACCEPTED, Json(body)).into_response())
        }
    }
}

/// Saves the session's state as a checkpoint.
#[utoipa::path(
    post,
    path = "/v1/sessions/{id}/checkpoints",
    tag = "sessions",
    params(SessionId),
    responses(
        (status = 201, description = "The checkpoint stored.", body = CheckpointInfo),
        (status = 409, description = "`session_busy`.", body = crate::views::ErrorBody),
        (status = 422, description = "`checkpoint_failed`: the session's state could not be saved.", body = crate::views::ErrorBody),
        (status = 404, description = "`no_session`: no such session, or another token's.", body = crate::views::ErrorBody),
        (status = 410, description = "`session_closed`, `session_expired` or `session_lost`: it has ended.", body = crate::views::ErrorBody),
        (status = 401, description = "`unauthorized`.", body = crate::views::ErrorBody),
        (status = 503, description = "`unavailable`, or `session_unavailable`: no worker could open or reach it.", body = crate::views::ErrorBody),
    ),
)]
pub async fn checkpoint(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let info = take_checkpoint(&state, &caller, &id).await?;
    Ok((StatusCode::CREATED, Json(info)).into_response())
}

/// Checkpoints the session and starts a new one from the checkpoint.
#[utoipa::path(
    post,
    path = "/v1/sessions/{id}/fork",
    tag = "sessions",
    params(SessionId),
    responses(
        (status = 201, description = "The new session, open and idle.", body = SessionView),
        (status = 202, description = "The new session, still `starting`.", body = SessionView),
        (status = 409, description = "`session_busy`.", body = crate::views::ErrorBody),
        (status = 422, description = "`checkpoint_failed`.", body = crate::views::ErrorBody),
        (status = 429, description = "`too_many_sessions`: the token holds its share of the fleet's session places; or `quota_exceeded`.", body = crate::views::ErrorBody),
        (status = 404, description = "`no_session`: no such session, or another token's.", body = crate::views::ErrorBody),
        (status = 410, description = "`session_closed`, `session_expired` or `session_lost`: it has ended.", body = crate::views::ErrorBody),
        (status = 401, description = "`unauthorized`.", body = crate::views::ErrorBody),
        (status = 503, description = "`sessions_full`: every session place of the workers is taken; `unavailable`; or `session_unavailable`: no worker could open or reach it.", body = crate::views::ErrorBody),
    ),
)]
pub async fn fork(State(state): State<AppState>, caller: Caller, Path(id): Path<String>) -> Result<Response, ApiError> {
    Ok(created(fork_session(&state, &caller, &id).await?))
}

/// A session's id, as `POST /v1/sessions` returned it.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub(crate) struct SessionId {
    id: String,
}

/// 201 with a session a worker has opened; 202 while it is still starting.
fn created(record: SessionRecord) -> Response {
    let code = if record.status == SessionStatus::Starting { StatusCode::ACCEPTED } else { StatusCode::CREATED };
    (code, Json(SessionView::from(record))).into_response()
}

/// Creates the session `request` asks for and waits for a worker to open it.
pub(crate) async fn create_session(
    state: &AppState,
    caller: &Caller,
    request: SessionRequest,
) -> Result<SessionRecord, ApiError> {
    create_session_as(state, caller, request, new_session_id()).await
}

/// A new session's id, for [`create_session_as`].
pub(crate) fn new_session_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// [`create_session`] under an id the caller chose beforehand: an adapter
/// that must end the session however its request ends (`run_jupyter`)
/// holds the id before the session exists, so that a request dropped while
/// the session starts ends it too.
pub(crate) async fn create_session_as(
    state: &AppState,
    caller: &Caller,
    request: SessionRequest,
    id: String,
) -> Result<SessionRecord, ApiError> {
    let (asked, idle) = request.validate(&state.config.sessions)?;
    let language = match &request.from_checkpoint {
        Some(id) => {
            let stored = owned_checkpoint(state, caller, id).await?;
            match asked {
                Some(asked) if asked != stored => {
                    let message = format!("checkpoint {id} is a {stored} session, not {asked}");
                    return Err(ApiError::invalid("language", message));
                }
                _ => stored,
            }
        }
        None => asked.ok_or_else(|| ApiError::invalid("language", "language is required: python or javascript"))?,
    };
    new_session(state, caller, id, language, idle, request.from_checkpoint).await
}

/// Checkpoints session `id` and starts a new session from the checkpoint.
pub(crate) async fn fork_session(state: &AppState, caller: &Caller, id: &str) -> Result<SessionRecord, ApiError> {
    let info = take_checkpoint(state, caller, id).await?;
    let parent = owned(state, caller, id).await?;
    let idle = Duration::from_secs(parent.idle_timeout_s);
    let fork = new_session(state, caller, new_session_id(), parent.language, idle, Some(info.id.clone())).await?;
    tracing::info!(session = %id, fork = %fork.id, checkpoint = %info.id, "session forked");
    Ok(fork)
}

/// Creates a session within the caller's cap and has a worker open it,
/// from `checkpoint` if given; one that cannot start ends as lost.
async fn new_session(
    state: &AppState,
    caller: &Caller,
    id: String,
    language: Language,
    idle: Duration,
    checkpoint: Option<String>,
) -> Result<SessionRecord, ApiError> {
    let limits = state.config.sessions;
    let expires_at_ms = now_unix_ms() + millis(limits.lifetime);
    let ttl = state.config.shared.result_ttl;
    let capacity = session_capacity(state).await?;
    let full = || {
        ApiError::SessionsFull(format!(
            "all {capacity} session places of the workers are taken; retry after the Retry-After delay, or destroy \
             a session you no longer need"
        ))
    };
    if capacity == 0 {
        return Err(full());
    }
    let share = limits.fair_share(capacity);
    let admitted = state
        .queue
        .create_session(&id, &caller.0, language, idle, expires_at_ms, &now_rfc3339(), share, capacity, ttl)
        .await?;
    match admitted {
        Admission::Created => {}
        Admission::OverShare => return Err(ApiError::TooManySessions(share)),
        Admission::Full => return Err(full()),
    }
    tracing::info!(session = %id, %language, from_checkpoint = ?checkpoint, "session created");
    match start(state, caller, &id, language, checkpoint, millis(idle), expires_at_ms).await {
        Ok(record) => Ok(record),
        Err(e) => {
            let reason = format!("it could not start: {e}");
            state.queue.end_session(&id, &caller.0, SessionStatus::Lost, &reason, ttl, None).await?;
            Err(e)
        }
    }
}

/// Ends session `id` and its process.
pub(crate) async fn destroy_session(state: &AppState, caller: &Caller, id: &str) -> Result<SessionRecord, ApiError> {
    let session = live(owned(state, caller, id).await?)?;
    if let Some(worker) = &session.worker {
        let spec = step(session.language, id, SessionOp::Destroy);
        send(state, caller, &session, worker, &spec, false).await?;
    }
    let ttl = state.config.shared.result_ttl;
    state.queue.end_session(id, &caller.0, SessionStatus::Closed, "destroyed by its owner", ttl, None).await?;
    tracing::info!(session = %id, "session destroyed");
    owned(state, caller, id).await
}

/// How an exec went: its result, or the id of its job, still running when
/// the wait ran out (`GET /v1/jobs/{id}` has it later).
pub(crate) enum Executed {
    Done(Box<ExecView>),
    Pending(String),
}

/// Runs the exec `request` asks for in session `id`.
pub(crate) async fn exec_in(
    state: &AppState,
    caller: &Caller,
    id: &str,
    request: ExecRequest,
) -> Result<Executed, ApiError> {
    let Ran { job, record, session, restored } = run_exec(state, caller, id, request).await?;
    let Some(record) = record else {
        return Ok(Executed::Pending(job));
    };
    let after = owned(state, caller, id).await?;
    let restored =
        restored.or_else(|| after.restored_from.clone().filter(|r| session.restored_from.as_ref() != Some(r)));
    let session = ExecSession { id: id.to_owned(), status: after.status, restored_from: restored };
    Ok(Executed::Done(Box::new(ExecView { job: JobView::from(record), session })))
}

/// Runs an exec in session `id` as [`exec_in`] does, and answers with its
/// job record, for an adapter that builds its own answer from it
/// (SandboxFusion's `run_jupyter`). None: still running past its timeout
/// plus a margin.
pub(crate) async fn exec_record(
    state: &AppState,
    caller: &Caller,
    id: &str,
    request: ExecRequest,
) -> Result<Option<JobRecord>, ApiError> {
    Ok(run_exec(state, caller, id, request).await?.record)
}

/// An exec sent and waited for: its job, its record unless it is still
/// running, the session as it was before, and the checkpoint it was
/// restored from on the way, if it was.
struct Ran {
    job: String,
    record: Option<JobRecord>,
    session: SessionRecord,
    restored: Option<String>,
}

async fn run_exec(state: &AppState, caller: &Caller, id: &str, request: ExecRequest) -> Result<Ran, ApiError> {
    let Handed { job, timeout, worker, session, restored } = send_exec(state, caller, id, request).await?;
    let record = wait_on_worker(state, &job, &worker, timeout + EXEC_MARGIN).await?;
    Ok(Ran { job, record, session, restored })
}

/// An exec handed to its session's worker.
pub(crate) struct Handed {
    pub job: String,
    pub timeout: Duration,
    worker: String,
    session: SessionRecord,
    restored: Option<String>,
}

/// Whether the request asks for its answer as Server-Sent Events.
fn wants_events(headers: &HeaderMap) -> bool {
    headers
        .get(axum::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("text/event-stream"))
}

/// Checks an exec and hands it to the session's worker.
pub(crate) async fn send_exec(
    state: &AppState,
    caller: &Caller,
    id: &str,
    request: ExecRequest,
) -> Result<Handed, ApiError> {
    let (session, restored) = ready(state, caller, id).await?;
    let mut spec = request.validate(session.language, &state.config.limits)?;
    let timeout = state.config.limits.timeouts.for_job(spec.timeout_ms);
    spec.timeout_ms = Some(millis(timeout));
    spec.session = Some(SessionTask { id: id.to_owned(), op: SessionOp::Exec });
    let worker = session.worker.clone().unwrap_or_default();
    let job = send(state, caller, &session, &worker, &spec, true).await?;
    Ok(Handed { job, timeout, worker, session, restored })
}

/// Takes a checkpoint of session `id` and returns what was stored.
pub(crate) async fn take_checkpoint(state: &AppState, caller: &Caller, id: &str) -> Result<CheckpointInfo, ApiError> {
    let (session, _) = ready(state, caller, id).await?;
    let checkpoint = uuid::Uuid::new_v4().to_string();
    let spec = step(session.language, id, SessionOp::Checkpoint { checkpoint });
    let worker = session.worker.clone().unwrap_or_default();
    let job = send(state, caller, &session, &worker, &spec, true).await?;
    let record = wait_on_worker(state, &job, &worker, CHECKPOINT_WAIT).await?;
    let outcome = record.and_then(|r| r.outcome.filter(|_| r.status.is_final()));
    match outcome {
        Some(Outcome { step: Some(StepResult::Checkpointed { checkpoint }), .. }) => Ok(checkpoint),
        Some(Outcome { step: Some(StepResult::Failed { reason }), .. }) => Err(ApiError::CheckpointFailed(reason)),
        Some(outcome) => Err(ApiError::SessionUnavailable(format!(
            "the checkpoint did not finish ({}); the session's worker may have stopped",
            outcome.status.as_str()
        ))),
        None => Err(ApiError::SessionUnavailable("the checkpoint is taking too long; try again".into())),
    }
}

/// Enqueues the start job of session `id` and waits for a worker to open it.
async fn start(
    state: &AppState,
    caller: &Caller,
    id: &str,
    language: Language,
    checkpoint: Option<String>,
    idle_timeout_ms: u64,
    expires_at_ms: u64,
) -> Result<SessionRecord, ApiError> {
    let op = SessionOp::Start { owner: caller.0.clone(), checkpoint, idle_timeout_ms, expires_at_ms };
    let job = pipeline::enqueue_session_start(state, caller, &step(language, id, op)).await?;
    let record = wait_for(state, &job, START_WAIT).await?;
    match record.and_then(|r| r.outcome.filter(|_| r.status.is_final())) {
        None | Some(Outcome { step: Some(StepResult::Done), .. }) => {}
        Some(Outcome { step: Some(StepResult::Failed { reason }), .. }) => {
            return Err(ApiError::SessionUnavailable(format!("no worker could open the session: {reason}")));
        }
        Some(outcome) => {
            let why = if outcome.stderr.is_empty() { outcome.status.as_str().to_owned() } else { outcome.stderr };
            return Err(ApiError::SessionUnavailable(format!("no worker could open the session: {why}")));
        }
    }
    state.queue.get_session(id).await?.ok_or(ApiError::NoSession)
}

/// Session `id`, live and on a live worker, ready for a task: a session
/// whose worker has stopped answering is first brought back elsewhere from
/// its latest checkpoint (whose id is returned), or ends as lost.
pub(crate) async fn ready(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<(SessionRecord, Option<String>), ApiError> {
    let session = live(owned(state, caller, id).await?)?;
    match session.status {
        SessionStatus::Starting | SessionStatus::Restoring => {
            return Err(ApiError::SessionBusy("the session is still starting; try again shortly".into()));
        }
        SessionStatus::Busy => return Err(busy()),
        _ => {}
    }
    let worker = session.worker.clone().unwrap_or_default();
    if worker_alive(state, &worker).await? {
        return Ok((session, None));
    }
    let ttl = state.config.shared.result_ttl;
    match state.queue.recover_session(id, &caller.0, &worker, ttl).await? {
        Recovery::Restore(checkpoint) => {
            tracing::warn!(session = %id, %worker, %checkpoint, "session's worker stopped answering: restoring it elsewhere");
            let started = start(
                state,
                caller,
                id,
                session.language,
                Some(checkpoint.clone()),
                session.idle_timeout_s * 1000,
                session.expires_at_ms,
            )
            .await;
            if let Err(e) = started {
                let reason = format!("its worker stopped and it could not be restored: {e}");
                state.queue.end_session(id, &caller.0, SessionStatus::Lost, &reason, ttl, None).await?;
                return Err(e);
            }
            let session = live(owned(state, caller, id).await?)?;
            if session.status != SessionStatus::Idle {
                return Err(ApiError::SessionBusy("the session is still being restored; try again shortly".into()));
            }
            Ok((session, Some(checkpoint)))
        }
        Recovery::Lost => {
            tracing::warn!(session = %id, %worker, "session's worker stopped answering and it had no checkpoint");
            Err(live(owned(state, caller, id).await?).err().unwrap_or(ApiError::NoSession))
        }
        Recovery::Changed => Ok((live(owned(state, caller, id).await?)?, None)),
    }
}

/// Signs `spec` as a new job and hands it to `worker`, which holds `session`.
pub(crate) async fn send(
    state: &AppState,
    caller: &Caller,
    session: &SessionRecord,
    worker: &str,
    spec: &JobSpec,
    needs_idle: bool,
) -> Result<String, ApiError> {
    let Signed { id: job, payload, signature } = pipeline::sign(state, caller, spec)?;
    let sent = state
        .queue
        .send_to_session(
            &session.id,
            worker,
            &job,
            &caller.0,
            session.language,
            &payload,
            &signature,
            &now_rfc3339(),
            needs_idle,
        )
        .await?;
    match sent {
        Sent::Sent => Ok(job),
        Sent::Busy => Err(busy()),
        Sent::Moved => Err(ApiError::SessionBusy("the session moved to another worker meanwhile; try again".into())),
        Sent::Gone => Err(live(owned(state, caller, &session.id).await?).err().unwrap_or(ApiError::NoSession)),
    }
}

/// Waits up to `wait` for job `id`, which `worker` runs; if the worker
/// stops answering meanwhile, the job ends as `worker_lost`.
pub(crate) async fn wait_on_worker(
    state: &AppState,
    id: &str,
    worker: &str,
    wait: Duration,
) -> Result<Option<JobRecord>, ApiError> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let record = wait_for(state, id, left.min(LIVENESS_EVERY)).await?;
        if record.as_ref().is_some_and(|r| r.status.is_final()) {
            return Ok(record);
        }
        if left.is_zero() || state.stopping.is_cancelled() {
            return Ok(None);
        }
        if !worker_alive(state, worker).await?
            && let Some(claimed) = state.queue.claim_session_task(id).await?
        {
            let lost = Outcome {
                status: Status::WorkerLost,
                ..Outcome::internal_error("the session's worker stopped answering; the next call restores the session")
            };
            let now = now_unix_ms();
            let ttl = state.config.shared.result_ttl;
            state.queue.finish(&claimed, &lost, &now_rfc3339(), ttl, Duration::ZERO, now).await?;
            return wait_for(state, id, Duration::ZERO).await;
        }
    }
}

/// The fleet's session places: the sum of what each live worker offers.
async fn session_capacity(state: &AppState) -> Result<u64, ApiError> {
    let now = now_unix_ms();
    let workers = state.queue.workers().await?;
    let places = workers.iter().filter(|w| w.is_live(now)).map(|w| w.session_capacity as u64).sum();
    Ok(places)
}

async fn worker_alive(state: &AppState, name: &str) -> Result<bool, ApiError> {
    let now = now_unix_ms();
    let workers = state.queue.workers().await?;
    Ok(workers.iter().any(|w| w.name == name && w.is_live(now)))
}

/// Session `id` if the caller owns it: another token's is as good as absent.
async fn owned(state: &AppState, caller: &Caller, id: &str) -> Result<SessionRecord, ApiError> {
    if uuid::Uuid::parse_str(id).is_err() {
        return Err(ApiError::NoSession);
    }
    state.queue.get_session(id).await?.filter(|s| s.owner == caller.0).ok_or(ApiError::NoSession)
}

/// The language of checkpoint `id` if the caller owns it.
async fn owned_checkpoint(state: &AppState, caller: &Caller, id: &str) -> Result<Language, ApiError> {
    if uuid::Uuid::parse_str(id).is_err() {
        return Err(ApiError::NoCheckpoint);
    }
    let stored = state.queue.load_checkpoint(id).await?.filter(|c| c.owner == caller.0);
    stored.and_then(|c| c.language).ok_or(ApiError::NoCheckpoint)
}

/// `session` unless it has ended, in which case the 410 that says how.
fn live(session: SessionRecord) -> Result<SessionRecord, ApiError> {
    if session.status.is_final() {
        let reason = session.ended_reason.clone().unwrap_or_else(|| session.status.as_str().to_owned());
        return Err(ApiError::SessionEnded { status: session.status, reason });
    }
    Ok(session)
}

fn busy() -> ApiError {
    ApiError::SessionBusy(
        "the session is running another exec or taking a checkpoint; execs in one session run one at a time".into(),
    )
}

/// A session step of `language` for session `id`.
pub(crate) fn step(language: Language, id: &str, op: SessionOp) -> JobSpec {
    JobSpec { session: Some(SessionTask { id: id.to_owned(), op }), ..JobSpec::new(language, "") }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
