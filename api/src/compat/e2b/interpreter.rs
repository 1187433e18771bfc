//! E2B's code interpreter: `POST /execute`, streamed as E2B's lines, and
//! the code contexts under `/contexts`.
//!
//! A `run_code` is an exec of its context's session. Its output streams
//! from the exec's live output as it is written; what E2B shows besides
//! (the value of the last expression, an exception) is printed by a small
//! program after the code's output, as one line behind a marker made per
//! call (`execute.py`, `execute.js`), which the stream leaves out.
//!
//! The SDKs time `run_code` out themselves and close the connection; the
//! stream writes a keepalive line every second so that the close is seen,
//! and then cancels the exec, which interrupts it (see `SessionChild::exec`
//! in the worker): the context's next `run_code` runs.

use std::pin::Pin;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::{Stream, StreamExt};
use runbox_common::{JobRecord, Language, OutputStream, Status, now_rfc3339};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::{Context, HOME, Sandbox, api_error, data_caller, plain_error, start_session, update};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::events::{Update, updates};
use crate::requests::ExecRequest;
use crate::sessions;
use crate::state::AppState;

/// Defines the helper each `run_code` in a Python context calls.
const EXECUTE_PY: &str = include_str!("execute.py");

/// Defines the helper each `run_code` in a JavaScript context calls.
const EXECUTE_JS: &str = include_str!("execute.js");

/// `run_code`s this process has run.
static CELLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How often an `/execute` stream with nothing to say writes a keepalive.
const KEEPALIVE: Duration = Duration::from_secs(1);

/// How long a `run_code` waits for its context's previous one to end
/// (one the client gave up on is being interrupted).
const BUSY_WAIT: Duration = Duration::from_secs(15);

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/execute", post(execute))
        .route("/contexts", get(list_contexts).post(create_context))
        .route("/contexts/{id}", axum::routing::delete(remove_context))
        .route("/contexts/{id}/restart", post(restart_context))
}

#[derive(Deserialize)]
struct ExecuteBody {
    code: String,
    context_id: Option<String>,
    language: Option<String>,
    env_vars: Option<std::collections::BTreeMap<String, String>>,
}

/// The language a `language` field names, as E2B's server reads it.
fn language_of(name: Option<&str>) -> Result<Language, Box<Response>> {
    match name.map(str::to_ascii_lowercase).as_deref() {
        None | Some("python" | "python3" | "py") => Ok(Language::Python),
        Some("js" | "javascript" | "node" | "nodejs" | "deno") => Ok(Language::Javascript),
        Some(other) => Err(Box::new(plain_error(
            StatusCode::BAD_REQUEST,
            &format!(
                "runbox runs code in Python and JavaScript contexts only, not {other:?}{}",
                if other.starts_with("ts") || other == "typescript" {
                    " (TypeScript runs as runbox jobs, not in contexts)"
                } else {
                    ""
                }
            ),
        ))),
    }
}

/// `POST /execute`.
async fn execute(State(state): State<AppState>, headers: HeaderMap, bytes: Bytes) -> Response {
    let (caller, sandbox) = match data_caller(&state, &headers).await {
        Ok(found) => found,
        Err(refused) => return refused.into_plain(),
    };
    let request: ExecuteBody = match serde_json::from_slice(&bytes) {
        Ok(request) => request,
        Err(e) => return plain_error(StatusCode::BAD_REQUEST, &format!("the body is not the JSON expected: {e}")),
    };
    let context = match (&request.context_id, &request.language) {
        (Some(_), Some(_)) => {
            return plain_error(StatusCode::BAD_REQUEST, "give context_id or language, not both");
        }
        (Some(id), None) => match sandbox.contexts.iter().find(|c| &c.id == id) {
            Some(context) => context.clone(),
            None => return plain_error(StatusCode::NOT_FOUND, &format!("context {id} not found")),
        },
        (None, language) => {
            let language = match language_of(language.as_deref()) {
                Ok(language) => language,
                Err(refused) => return *refused,
            };
            match default_context(&state, &caller, &sandbox, language).await {
                Ok(context) => context,
                Err(e) => return api_error(e),
            }
        }
    };
    let env = request.env_vars.unwrap_or_default();
    if context.language == Language::Javascript && !env.is_empty() {
        let message = "env_vars are not available in a JavaScript context: its code has no environment; pass the \
                       values in the code";
        return plain_error(StatusCode::BAD_REQUEST, message);
    }
    // Names the code in tracebacks (`<cell-N>`); unique in this process,
    // with no write to the sandbox's record, which concurrent calls share.
    let cell = CELLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    let marker = format!("\u{1}runbox-e2b-{}:", uuid::Uuid::new_v4().simple());
    let exec = match context.language {
        Language::Python => ExecRequest {
            code: Some("await __runbox_e2b()".to_owned()),
            stdin: Some(json!({ "source": request.code, "cell": cell, "marker": marker, "env": env }).to_string()),
            ..ExecRequest::default()
        },
        _ => ExecRequest {
            code: Some(format!("__runbox_e2b({}, {cell}, {});", json!(request.code), json!(marker))),
            ..ExecRequest::default()
        },
    };
    let Some(session) = context.session.clone() else {
        return plain_error(StatusCode::BAD_GATEWAY, "the context has no session: connect to the sandbox again");
    };
    let handed = match send_when_free(&state, &caller, &session, exec).await {
        Ok(handed) => handed,
        Err(e) => return api_error(e),
    };
    let deadline = Instant::now() + handed.timeout + sessions::EXEC_MARGIN;
    let run = Run {
        updates: Box::pin(updates(state.clone(), handed.job.clone(), None, Some(deadline))),
        out: Held::new(&marker),
        marker,
        guard: Some(CancelOnDrop { state, job: handed.job }),
    };
    let lines = futures_util::stream::unfold(run, Run::next).map(Ok::<_, std::convert::Infallible>);
    Response::builder()
        .header(header::CONTENT_TYPE, "application/x-ndjson")
        .body(Body::from_stream(lines))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// Hands `exec` to `session`, waiting while it is busy with an earlier one.
async fn send_when_free(
    state: &AppState,
    caller: &Caller,
    session: &str,
    exec: ExecRequest,
) -> Result<sessions::Handed, ApiError> {
    let give_up = Instant::now() + BUSY_WAIT;
    loop {
        let request = ExecRequest {
            code: exec.code.clone(),
            stdin: exec.stdin.clone(),
            timeout_ms: Some(state.config.limits.timeouts.max_ms()),
            ..ExecRequest::default()
        };
        match sessions::send_exec(state, caller, session, request).await {
            Err(ApiError::SessionBusy(_)) if Instant::now() < give_up => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            handed => return handed,
        }
    }
}

/// The default context of `language`, made (and put on the record) if it
/// has none yet. Of two requests that make one at once, the first on the
/// record wins, and the other's session is ended.
async fn default_context(
    state: &AppState,
    caller: &Caller,
    sandbox: &Sandbox,
    language: Language,
) -> Result<Context, ApiError> {
    let default = |sandbox: &Sandbox| sandbox.contexts.iter().find(|c| c.default && c.language == language).cloned();
    if let Some(context) = default(sandbox) {
        return Ok(context);
    }
    let made = new_context(state, caller, sandbox, language, true).await?;
    let added = update(state, caller, &sandbox.id, |now| match default(now) {
        Some(first) => (first, false),
        None => {
            now.contexts.push(made.clone());
            (made.clone(), true)
        }
    });
    match added.await {
        Ok(Some((_, context))) if context.id == made.id => Ok(context),
        kept => {
            end_session_of(state, caller, &made).await;
            Ok(kept?.ok_or_else(|| ApiError::SessionUnavailable("the sandbox ended meanwhile".into()))?.1)
        }
    }
}

/// Ends `context`'s session, which nothing refers to any more.
async fn end_session_of(state: &AppState, caller: &Caller, context: &Context) {
    if let Some(session) = &context.session
        && let Err(e) = sessions::destroy_session(state, caller, session).await
    {
        tracing::debug!(%session, error = %e, "ending a context's session");
    }
}

/// A new context of `language`: its session started, and the helper each
/// `run_code` calls defined in it.
pub(super) async fn new_context(
    state: &AppState,
    caller: &Caller,
    sandbox: &Sandbox,
    language: Language,
    default: bool,
) -> Result<Context, ApiError> {
    let session = start_session(state, caller, sandbox, language, None).await?;
    let helper = if language == Language::Python { EXECUTE_PY } else { EXECUTE_JS };
    let setup = ExecRequest { code: Some(helper.to_owned()), ..ExecRequest::default() };
    let failed = |why: String| ApiError::SessionUnavailable(format!("the {language} context did not start: {why}"));
    let set_up = match sessions::exec_record(state, caller, &session, setup).await {
        Ok(Some(JobRecord { outcome: Some(outcome), .. })) if outcome.exit_code == Some(0) => Ok(()),
        Ok(Some(JobRecord { outcome: Some(outcome), .. })) => Err(failed(outcome.stderr)),
        Ok(_) => Err(failed("it took too long".into())),
        Err(e) => Err(e),
    };
    if let Err(e) = set_up {
        let _ = sessions::destroy_session(state, caller, &session).await;
        return Err(e);
    }
    Ok(Context { id: uuid::Uuid::new_v4().to_string(), language, default, session: Some(session), checkpoint: None })
}

/// One `/execute` stream: the exec's updates as E2B's lines.
struct Run {
    updates: Pin<Box<dyn Stream<Item = Update> + Send>>,
    out: Held,
    marker: String,
    /// Cancels the exec if the stream is dropped before its end.
    guard: Option<CancelOnDrop>,
}

impl Run {
    async fn next(mut self) -> Option<(Bytes, Run)> {
        self.guard.as_ref()?;
        let update = tokio::select! {
            update = self.updates.next() => update,
            () = tokio::time::sleep(KEEPALIVE) => return Some((line(&json!({ "type": "keepalive" })), self)),
        };
        let mut lines = Vec::new();
        match update {
            Some(Update::Chunk { stream: OutputStream::Stdout, text, .. }) => {
                let shown = self.out.feed(&text);
                if !shown.is_empty() {
                    lines.push(output_line("stdout", &shown));
                }
            }
            Some(Update::Chunk { stream: OutputStream::Stderr, text, .. }) => lines.push(output_line("stderr", &text)),
            Some(Update::Restart) => {}
            Some(Update::Result(record)) => {
                let rest = self.out.rest();
                if !rest.is_empty() {
                    lines.push(output_line("stdout", &rest));
                }
                lines.extend(ending(&record, &self.marker).iter().map(line));
                self.finish();
            }
            Some(Update::Broken(message)) => {
                lines.push(line(&error_line("ExecutionError", message, "")));
                self.finish();
            }
            None => self.finish(),
        }
        Some((lines.concat().into(), self))
    }

    /// The exec ended: nothing to cancel, nothing more to send.
    fn finish(&mut self) {
        if let Some(mut guard) = self.guard.take() {
            guard.job.clear();
        }
    }
}

/// What a finished exec shows: its result and its error, from the line
/// behind the marker; an exec that ended without one (killed, out of
/// memory, past a cap) is an error that says why.
fn ending(record: &JobRecord, marker: &str) -> Vec<Value> {
    let mut lines = Vec::new();
    let Some(outcome) = &record.outcome else {
        return vec![error_line("ExecutionError", "the code's result was lost", "")];
    };
    let shown = outcome
        .stdout
        .rfind(marker)
        .and_then(|at| outcome.stdout[at + marker.len()..].lines().next())
        .and_then(|line| serde_json::from_str::<Value>(line).ok());
    match shown {
        Some(shown) => {
            if let Some(text) = shown["text"].as_str() {
                lines.push(json!({ "type": "result", "text": text, "is_main_result": true }));
            }
            if let Some(error) = shown["error"].as_object() {
                let text = |key: &str| error.get(key).and_then(Value::as_str).unwrap_or("").to_owned();
                lines.push(error_line(&text("name"), &text("value"), &text("traceback")));
            }
        }
        None => {
            let why = match outcome.status {
                Status::Timeout => "the code ran past runbox's time limit and was stopped".to_owned(),
                Status::MemoryExceeded => "the code ran out of memory; the context was restored from its last \
                                           checkpoint, or lost"
                    .to_owned(),
                Status::Cancelled => "the code was interrupted".to_owned(),
                status if outcome.stdout_truncated => {
                    format!(
                        "the code's output passed runbox's cap ({status}); its result was cut off",
                        status = status.as_str()
                    )
                }
                status => format!("the code ended without a result ({})", status.as_str()),
            };
            let name = if outcome.status == Status::Timeout { "TimeoutError" } else { "ExecutionError" };
            lines.push(error_line(name, &why, &outcome.stderr));
        }
    }
    lines.push(json!({ "type": "end_of_execution" }));
    lines
}

fn error_line(name: &str, value: &str, traceback: &str) -> Value {
    json!({ "type": "error", "name": name, "value": value, "traceback": traceback })
}

fn output_line(kind: &str, text: &str) -> Bytes {
    line(&json!({ "type": kind, "text": text, "timestamp": now_rfc3339() }))
}

fn line(value: &Value) -> Bytes {
    let mut bytes = serde_json::to_vec(value).unwrap_or_default();
    bytes.push(b'\n');
    bytes.into()
}

/// Stdout as it streams, less the marker line and what follows it: text
/// that may be the start of the marker is held until it is known not to
/// be.
struct Held {
    /// A newline, then the marker: the program that prints it starts it on
    /// a line of its own.
    needle: String,
    pending: String,
    seen: bool,
}

impl Held {
    fn new(marker: &str) -> Held {
        Held { needle: format!("\n{marker}"), pending: String::new(), seen: false }
    }

    /// What of `text` may be shown now.
    fn feed(&mut self, text: &str) -> String {
        if self.seen {
            return String::new();
        }
        self.pending.push_str(text);
        if let Some(at) = self.pending.find(&self.needle) {
            self.seen = true;
            let shown = self.pending[..at].to_owned();
            self.pending.clear();
            return shown;
        }
        // The longest end of what is pending that could begin the needle
        // (it starts with a newline, so it starts on a character).
        let keep = (1..self.needle.len().min(self.pending.len() + 1))
            .rev()
            .find(|&n| self.pending.ends_with(&self.needle[..n]))
            .unwrap_or(0);
        let cut = self.pending.len() - keep;
        let shown = self.pending[..cut].to_owned();
        self.pending.drain(..cut);
        shown
    }

    /// What was held when the exec ended without the marker.
    fn rest(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }
}

/// Cancels job `job` when dropped, unless `job` was cleared: the client
/// left before the exec ended.
struct CancelOnDrop {
    state: AppState,
    job: String,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.job.is_empty() {
            return;
        }
        let (state, job) = (self.state.clone(), std::mem::take(&mut self.job));
        tokio::spawn(async move {
            let ttl = state.config.shared.result_ttl;
            match state.queue.cancel(&job, &now_rfc3339(), ttl).await {
                Ok(_) => tracing::info!(%job, "e2b run_code abandoned by its client: interrupted"),
                Err(e) => tracing::warn!(%job, error = %e, "could not interrupt an abandoned run_code"),
            }
        });
    }
}

#[derive(Default, Deserialize)]
struct ContextBody {
    language: Option<String>,
    cwd: Option<String>,
}

fn context_view(context: &Context) -> Value {
    let language = if context.language == Language::Python { "python" } else { "javascript" };
    json!({ "id": context.id, "language": language, "cwd": HOME })
}

/// `POST /contexts`: a new context, whose state is its own.
async fn create_context(State(state): State<AppState>, headers: HeaderMap, bytes: Bytes) -> Response {
    let (caller, sandbox) = match data_caller(&state, &headers).await {
        Ok(found) => found,
        Err(refused) => return refused.into_plain(),
    };
    let request: ContextBody = if bytes.is_empty() {
        ContextBody::default()
    } else {
        match serde_json::from_slice(&bytes) {
            Ok(request) => request,
            Err(e) => return plain_error(StatusCode::BAD_REQUEST, &format!("the body is not the JSON expected: {e}")),
        }
    };
    if request.cwd.as_deref().is_some_and(|cwd| super::home_path(cwd).map_or(true, |path| !path.is_empty())) {
        return plain_error(StatusCode::BAD_REQUEST, &format!("a context's cwd is the sandbox's home, {HOME}"));
    }
    let language = match language_of(request.language.as_deref()) {
        Ok(language) => language,
        Err(refused) => return *refused,
    };
    let context = match new_context(&state, &caller, &sandbox, language, false).await {
        Ok(context) => context,
        Err(e) => return api_error(e),
    };
    let added = update(&state, &caller, &sandbox.id, |now| {
        now.contexts.push(context.clone());
        ((), true)
    });
    match added.await {
        Ok(Some(_)) => Json(context_view(&context)).into_response(),
        gone => {
            end_session_of(&state, &caller, &context).await;
            match gone {
                Err(e) => api_error(e),
                _ => plain_error(StatusCode::BAD_GATEWAY, "the sandbox ended meanwhile"),
            }
        }
    }
}

/// `GET /contexts`.
async fn list_contexts(State(state): State<AppState>, headers: HeaderMap) -> Response {
    match data_caller(&state, &headers).await {
        Ok((_, sandbox)) => Json(sandbox.contexts.iter().map(context_view).collect::<Vec<_>>()).into_response(),
        Err(refused) => refused.into_plain(),
    }
}

/// `DELETE /contexts/{id}`: its session ended. The default Python
/// context holds the sandbox's files and stays.
async fn remove_context(State(state): State<AppState>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let (caller, sandbox) = match data_caller(&state, &headers).await {
        Ok(found) => found,
        Err(refused) => return refused.into_plain(),
    };
    if sandbox.home_context().is_some_and(|home| home.id == id) {
        let message = "the default Python context holds the sandbox's files and cannot be removed; restart it instead";
        return plain_error(StatusCode::BAD_REQUEST, message);
    }
    let removed = update(&state, &caller, &sandbox.id, |now| match now.contexts.iter().position(|c| c.id == id) {
        Some(at) => (Some(now.contexts.remove(at)), true),
        None => (None, false),
    });
    match removed.await {
        Ok(Some((_, Some(context)))) => {
            end_session_of(&state, &caller, &context).await;
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(_) => plain_error(StatusCode::NOT_FOUND, &format!("context {id} not found")),
        Err(e) => api_error(e),
    }
}

/// `POST /contexts/{id}/restart`: the context's state starts afresh. The
/// default Python context keeps its files: its names are cleared instead.
async fn restart_context(State(state): State<AppState>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let (caller, sandbox) = match data_caller(&state, &headers).await {
        Ok(found) => found,
        Err(refused) => return refused.into_plain(),
    };
    let Some(context) = sandbox.contexts.iter().find(|c| c.id == id).cloned() else {
        return plain_error(StatusCode::NOT_FOUND, &format!("context {id} not found"));
    };
    let session = context.session.clone().unwrap_or_default();
    if sandbox.home_context().is_some_and(|home| home.id == id) {
        let code = "import sys\nmain = sys.modules['__main__'].__dict__\nfor name in [n for n in main if not \
                    n.startswith('__')]:\n    del main[name]\ndel sys, main, name";
        let clear = ExecRequest { code: Some(code.to_owned()), ..ExecRequest::default() };
        return match sessions::exec_in(&state, &caller, &session, clear).await {
            Ok(_) => StatusCode::NO_CONTENT.into_response(),
            Err(e) => api_error(e),
        };
    }
    let fresh = match new_context(&state, &caller, &sandbox, context.language, context.default).await {
        Ok(fresh) => fresh,
        Err(e) => return api_error(e),
    };
    let replaced = update(&state, &caller, &sandbox.id, |now| match now.contexts.iter_mut().find(|c| c.id == id) {
        Some(now) => (Some(std::mem::replace(&mut now.session, fresh.session.clone())), true),
        None => (None, false),
    });
    match replaced.await {
        Ok(Some((_, Some(old)))) => {
            end_session_of(&state, &caller, &Context { session: old, ..context }).await;
            StatusCode::NO_CONTENT.into_response()
        }
        other => {
            end_session_of(&state, &caller, &fresh).await;
            match other {
                Err(e) => api_error(e),
                _ => plain_error(StatusCode::NOT_FOUND, &format!("context {id} not found")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(status: Status, stdout: &str) -> JobRecord {
        let outcome =
            runbox_common::Outcome { status, stdout: stdout.into(), ..runbox_common::Outcome::internal_error("") };
        JobRecord {
            id: "j".into(),
            owner: "o".into(),
            language: Some(Language::Python),
            status,
            created_at: None,
            started_at: None,
            finished_at: None,
            worker: None,
            outcome: Some(outcome),
            timings: Default::default(),
            compat: None,
        }
    }

    #[test]
    fn an_exec_ends_as_its_marker_line_says_or_says_why_it_has_none() {
        let shown = ending(&record(Status::Completed, "out\n\u{1}m:{\"text\": \"4\", \"error\": null}\n"), "\u{1}m:");
        assert_eq!(shown[0], json!({ "type": "result", "text": "4", "is_main_result": true }));
        assert_eq!(shown[1], json!({ "type": "end_of_execution" }));
        let timeout = ending(&record(Status::Timeout, "out"), "\u{1}m:");
        assert_eq!(timeout[0]["name"], "TimeoutError");
        let memory = ending(&record(Status::MemoryExceeded, ""), "\u{1}m:");
        assert!(memory[0]["value"].as_str().unwrap_or("").contains("ran out of memory"), "{memory:?}");
    }

    #[test]
    fn the_marker_line_is_held_back_and_cut() {
        let mut held = Held::new("\u{1}m:");
        let mut shown = String::new();
        for piece in ["a\nb", "\n", "\u{1}", "x\n", "c\n\u{1}", "m", ":{\"text\":1}\n"] {
            shown.push_str(&held.feed(piece));
        }
        assert_eq!(shown, "a\nb\n\u{1}x\nc");
        assert_eq!(held.feed("more"), "");
        let mut cut_short = Held::new("\u{1}m:");
        assert_eq!(cut_short.feed("end\n\u{1}"), "end");
        assert_eq!(cut_short.rest(), "\n\u{1}");
    }
}
