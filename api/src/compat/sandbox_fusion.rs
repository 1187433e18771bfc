//! A SandboxFusion-compatible API: `POST /run_code` and `POST /run_jupyter`,
//! mounted under `/sandbox-fusion/{token}` (or `/sandbox-fusion` with a
//! bearer token), answering as SandboxFusion's server does for its PyPI
//! client (`sandbox-fusion` 0.3.7) and for the RL frameworks that post to
//! it directly.
//!
//! SandboxFusion's client sends no credentials and takes only an endpoint
//! URL, so the token travels in the path, compared in constant time, and
//! [`redacted_path`] keeps it out of the request span and of every error
//! message, as for Piston.
//!
//! - `run_code` is one runbox job, translated into native job fields and
//!   validated, signed and queued by the same code as `POST /v1/jobs`, so
//!   Python runs in the caller's long-lived children as it does there. The
//!   request is held until the job is final. `pytest` runs the code as a
//!   test file with the runtime's pytest; `files` become the job's input
//!   files and `fetch_files` its `return_files`.
//! - `run_jupyter` is one fresh Python session: the request's files are
//!   written, each cell is an exec (`sandbox_fusion_jupyter.py` runs it as a
//!   notebook cell and reports its display and error), the files asked for
//!   are read back, and the session is destroyed however the request
//!   ends, the client gone included (a guard that runs on drop).
//!
//! The top-level `status` is SandboxFusion's: `Success` when the program
//! ran and exited 0, `Failed` when it ran and failed (non-zero exit, time
//! limit, a cell's exception), `SandboxError` when runbox could not run it
//! at all, including a language runbox does not run. SandboxFusion's client
//! raises (and retries) on `SandboxError`, so a caller can always tell
//! "the program failed" from "this sandbox cannot run that". A request that
//! is malformed is a 422 naming the field, FastAPI-shaped, as
//! SandboxFusion's own server answers it.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use base64::Engine;
use runbox_common::{FileEncoding, InputFile, JobRecord, Language, Outcome, Status, now_rfc3339};
use serde::Serialize;
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::pipeline::{enqueue, owned, wait_for};
use crate::requests::{ExecRequest, FilePath, FileRequest, MAX_MEMORY_MB, Program, ReturnFilesRequest, SessionRequest};
use crate::sessions;
use crate::state::AppState;

/// Where the API is mounted; the segment after it is the token, unless it
/// is the route itself (then a bearer header must carry the token).
pub const PREFIX: &str = "/sandbox-fusion/";

/// The routes under [`PREFIX`] (or under the token after it).
const ROUTES: [&str; 2] = ["run_code", "run_jupyter"];

/// SandboxFusion's defaults, in seconds: `run_timeout` for `run_code`, and
/// `total_timeout` for `run_jupyter`.
const DEFAULT_RUN_TIMEOUT_S: f64 = 10.0;
const DEFAULT_TOTAL_TIMEOUT_S: f64 = 45.0;

/// How long past its own timeout a program may wait for a worker before
/// the request gives up on it.
const QUEUE_GRACE: Duration = Duration::from_secs(60);

/// The file a `pytest` request's code is written to, and the program that
/// runs it.
const PYTEST_FILE: &str = "test_solution.py";
const PYTEST_PROGRAM: &str = include_str!("sandbox_fusion_pytest.py");

/// What a `nodejs` program gets before its first line: SandboxFusion runs
/// it with Node, where `require`, `module` and `exports` exist; Deno runs
/// it as an ES module, where they do not. Deno's `node:module` supplies a
/// `require` for Node's built-in modules (`fs`, `readline`, ...). The
/// names are set on `globalThis`, so a program that declares its own
/// shadows them rather than clashing. It is one line, written on the
/// program's first, so every other line keeps its number in a stack trace.
const NODE_PRELUDE: &str = "import { createRequire as __runboxCreateRequire } from \"node:module\"; \
    globalThis.require ??= __runboxCreateRequire(\"file:///main.js\"); \
    globalThis.module ??= { exports: {} }; globalThis.exports ??= globalThis.module.exports; ";

/// The exec code of every step of a `run_jupyter` session, and what a
/// step's JSON adds to the files it carries.
const JUPYTER_STEP: &str = include_str!("sandbox_fusion_jupyter.py");
const STEP_OVERHEAD_BYTES: usize = 64 * 1024;

/// The languages, by SandboxFusion's names, that runbox runs. Every other
/// name SandboxFusion knows (cpp, go, java, ...) is answered `SandboxError`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Python,
    /// The code is a pytest file.
    Pytest,
    /// Run by Deno, as an ES module: `process` is there, `require` is not.
    Nodejs,
    Typescript,
}

/// What a refusal of another language names.
const LANGUAGES: &str = "python, pytest, nodejs and typescript";

impl Mode {
    fn parse(name: &str) -> Option<Mode> {
        Some(match name {
            "python" => Mode::Python,
            "pytest" => Mode::Pytest,
            "nodejs" => Mode::Nodejs,
            "typescript" => Mode::Typescript,
            _ => return None,
        })
    }

    fn language(self) -> Language {
        match self {
            Mode::Python | Mode::Pytest => Language::Python,
            Mode::Nodejs => Language::Javascript,
            Mode::Typescript => Language::Typescript,
        }
    }
}

/// The path as it may be logged or shown: the token segment of a
/// SandboxFusion path replaced by `***`.
pub fn redacted_path(path: &str) -> Cow<'_, str> {
    let Some(rest) = path.strip_prefix(PREFIX) else { return Cow::Borrowed(path) };
    let (segment, tail) = rest.split_once('/').map_or((rest, None), |(s, t)| (s, Some(t)));
    if segment.is_empty() || (tail.is_none() && ROUTES.contains(&segment)) {
        return Cow::Borrowed(path);
    }
    Cow::Owned(match tail {
        Some(tail) => format!("{PREFIX}***/{tail}"),
        None => format!("{PREFIX}***"),
    })
}

/// Errors as SandboxFusion's server (FastAPI) answers them: a malformed
/// request is 422 `{"detail": [{"loc": ["body", field], "msg", "type"}]}`;
/// anything else `{"detail": message}` with the native status.
#[derive(Debug)]
pub enum FusionError {
    Field { field: String, message: String },
    Api(ApiError),
}

impl From<ApiError> for FusionError {
    fn from(e: ApiError) -> Self {
        FusionError::Api(e)
    }
}

fn field_error(field: &str, message: impl Into<String>) -> FusionError {
    FusionError::Field { field: field.to_owned(), message: message.into() }
}

impl IntoResponse for FusionError {
    fn into_response(self) -> Response {
        match self {
            FusionError::Field { field, message } => {
                let detail = json!([{ "loc": ["body", field], "msg": message, "type": "value_error" }]);
                (StatusCode::UNPROCESSABLE_ENTITY, Json(json!({ "detail": detail }))).into_response()
            }
            FusionError::Api(e) => {
                let status = e.status_and_code().0;
                let message = e.to_string();
                let mut response = e.into_response();
                // A field the native checks refused is a malformed request
                // to FastAPI; 401, 413, 429 and 503 keep theirs (and
                // Retry-After).
                if status == StatusCode::BAD_REQUEST {
                    *response.status_mut() = StatusCode::UNPROCESSABLE_ENTITY;
                }
                *response.body_mut() = Body::from(json!({ "detail": message }).to_string());
                response
            }
        }
    }
}

/// The SandboxFusion routes, under `/sandbox-fusion/{token}` and
/// `/sandbox-fusion` (bearer).
pub fn router(state: &AppState) -> Router<AppState> {
    Router::new()
        .route("/sandbox-fusion/{token}/run_code", post(run_code))
        .route("/sandbox-fusion/{token}/run_jupyter", post(run_jupyter))
        .route("/sandbox-fusion/run_code", post(run_code))
        .route("/sandbox-fusion/run_jupyter", post(run_jupyter))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token))
}

/// The token comes from a bearer header if there is one, else from the path.
async fn require_token(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let from_path = request
        .uri()
        .path()
        .strip_prefix(PREFIX)
        .and_then(|rest| rest.split_once('/'))
        .map(|(segment, _)| segment.to_owned());
    super::admit(&state, request, next, from_path, || FusionError::Api(ApiError::Unauthorized).into_response()).await
}

/// SandboxFusion's `RunStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum RunStatus {
    Success,
    Failed,
    SandboxError,
}

/// SandboxFusion's `CommandRunStatus`: how the command itself ended. Its
/// third value, `Error` (the command could not be run), is never sent: a
/// program runbox could not run has no run result, and the answer is
/// `SandboxError`, as SandboxFusion's server turns a command `Error` into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CommandStatus {
    /// It exited, with whatever code.
    Finished,
    TimeLimitExceeded,
}

/// SandboxFusion's `CommandRunResult`. Times are in seconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommandResult {
    pub status: CommandStatus,
    pub execution_time: Option<f64>,
    pub cpu_time: Option<f64>,
    /// The exit code; minus the signal's number when a signal ended it, as
    /// Python's `subprocess` reports (and so SandboxFusion); none on a
    /// timeout.
    pub return_code: Option<i32>,
    pub stdout: Option<String>,
    pub stderr: Option<String>,
}

/// SandboxFusion's `RunCodeResponse`.
#[derive(Debug, Serialize)]
pub struct RunCodeResponse {
    pub status: RunStatus,
    pub message: String,
    /// Always null: nothing runbox runs has a compile step (Deno strips
    /// TypeScript's types as it loads it).
    pub compile_result: Option<CommandResult>,
    pub run_result: Option<CommandResult>,
    /// The runbox worker that ran the program.
    pub executor_pod_name: Option<String>,
    /// The fetched files: path to base64.
    pub files: BTreeMap<String, String>,
}

impl RunCodeResponse {
    fn sandbox_error(message: String) -> RunCodeResponse {
        RunCodeResponse {
            status: RunStatus::SandboxError,
            message,
            compile_result: None,
            run_result: None,
            executor_pod_name: None,
            files: BTreeMap::new(),
        }
    }
}

/// What a `run_code` request becomes: the native program, or the
/// refusal of a language runbox does not run.
#[derive(Debug)]
pub enum Translated {
    Job(Box<Program>),
    Unsupported(String),
}

/// Translates a `run_code` body into a native program. Fields runbox has
/// no use for (`compile_timeout`, and any SandboxFusion adds) are accepted
/// and ignored, as SandboxFusion's server ignores fields it does not know.
pub fn translate(body: &Map<String, Value>, max_timeout_ms: u64) -> Result<Translated, FusionError> {
    let code = match body.get("code") {
        Some(Value::String(code)) => code.clone(),
        None | Some(Value::Null) => return Err(field_error("code", "field required")),
        Some(_) => return Err(field_error("code", "code must be a string")),
    };
    let language = match body.get("language") {
        Some(Value::String(language)) => language.as_str(),
        None | Some(Value::Null) => return Err(field_error("language", "field required")),
        Some(_) => return Err(field_error("language", "language must be a string")),
    };
    let stdin = match body.get("stdin") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(stdin)) => stdin.clone(),
        Some(_) => return Err(field_error("stdin", "stdin must be a string or null")),
    };
    let timeout_ms = seconds_to_ms(body.get("run_timeout"), "run_timeout", DEFAULT_RUN_TIMEOUT_S, max_timeout_ms)?;
    let memory_mb = memory_limit_mb(body.get("memory_limit_MB"))?;
    let files = files(body.get("files"))?;
    let fetch_files = fetch_files(body.get("fetch_files"))?;
    let Some(mode) = Mode::parse(language) else {
        return Ok(Translated::Unsupported(format!(
            "runbox runs {LANGUAGES}; it cannot run {language:?} (this sandbox refused the request, the program \
             did not fail)"
        )));
    };

    let file = |path: String, content: String, encoding| FileRequest {
        path: Some(path),
        content: Some(content),
        encoding: Some(encoding),
    };
    let mut inputs: Vec<FileRequest> =
        files.into_iter().map(|(path, content)| file(path, content, FileEncoding::Base64)).collect();
    let code = match mode {
        Mode::Pytest => {
            inputs.push(file(PYTEST_FILE.to_owned(), code, FileEncoding::Utf8));
            PYTEST_PROGRAM.to_owned()
        }
        Mode::Nodejs => with_node_prelude(&code),
        // SandboxFusion runs an empty program (and it succeeds); runbox
        // refuses empty code, so it gets a comment, which runs the same.
        Mode::Python if code.trim().is_empty() => "# the request's code was empty\n".to_owned(),
        Mode::Typescript if code.trim().is_empty() => "// the request's code was empty\n".to_owned(),
        _ => code,
    };
    // A JavaScript or TypeScript program cannot write files, so there is
    // nothing for it to fetch: its answer has no files.
    let return_files = (mode.language() == Language::Python && !fetch_files.is_empty())
        .then(|| ReturnFilesRequest::Paths(fetch_files.into_iter().map(FilePath).collect()));
    Ok(Translated::Job(Box::new(Program {
        language: Some(mode.language()),
        code: Some(code),
        stdin: Some(stdin),
        timeout_ms: Some(timeout_ms),
        memory_mb,
        files: (!inputs.is_empty()).then_some(inputs),
        return_files,
        ..Program::default()
    })))
}

/// `code` with [`NODE_PRELUDE`] on its first line, or on its second when
/// the first is a `#!` line, which must stay first.
fn with_node_prelude(code: &str) -> String {
    match code.strip_prefix("#!").and_then(|_| code.split_once('\n')) {
        Some((shebang, rest)) => format!("{shebang}\n{NODE_PRELUDE}{rest}"),
        None if code.starts_with("#!") => code.to_owned(),
        None => format!("{NODE_PRELUDE}{code}"),
    }
}

/// A timeout in seconds (a JSON number, whole or not) as milliseconds
/// from 1 to runbox's maximum; absent or null is `default_s`.
fn seconds_to_ms(value: Option<&Value>, field: &str, default_s: f64, max_ms: u64) -> Result<u64, FusionError> {
    let seconds = match value {
        None | Some(Value::Null) => default_s,
        Some(value) => match value.as_f64() {
            Some(s) if s > 0.0 && s.is_finite() => s,
            _ => return Err(field_error(field, format!("{field} must be a positive number of seconds"))),
        },
    };
    Ok(((seconds * 1000.0).round() as u64).clamp(1, max_ms))
}

/// `memory_limit_MB`, which RL frameworks send with every sample, as the
/// job's own memory cap in MiB: the worker holds the job to it where it is
/// below the workers' cap (`RUNBOX_MEMORY_MB`), and to that cap otherwise.
/// Zero or less means none asked.
fn memory_limit_mb(value: Option<&Value>) -> Result<Option<u64>, FusionError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(value) => match value.as_f64() {
            Some(mb) if mb.is_finite() && mb >= 1.0 => Ok(Some((mb.floor() as u64).min(u64::from(MAX_MEMORY_MB)))),
            Some(mb) if mb.is_finite() => Ok(None),
            _ => Err(field_error("memory_limit_MB", "memory_limit_MB must be a number of megabytes")),
        },
    }
}

/// `files`: path to base64 content; a null content is no file.
fn files(value: Option<&Value>) -> Result<Vec<(String, String)>, FusionError> {
    let entries = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(entries)) => entries,
        Some(_) => return Err(field_error("files", "files must be an object of path to base64 content")),
    };
    let mut files = Vec::with_capacity(entries.len());
    for (path, content) in entries {
        match content {
            Value::Null => {}
            Value::String(content) => {
                InputFile::check_path(path).map_err(|e| field_error("files", e))?;
                base64::engine::general_purpose::STANDARD
                    .decode(content)
                    .map_err(|_| field_error("files", format!("files[{path:?}] is not valid base64")))?;
                files.push((path.clone(), content.clone()));
            }
            _ => return Err(field_error("files", format!("files[{path:?}] must be base64 content or null"))),
        }
    }
    Ok(files)
}

/// `fetch_files`: the paths whose files the answer carries back.
fn fetch_files(value: Option<&Value>) -> Result<Vec<String>, FusionError> {
    let items = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(field_error("fetch_files", "fetch_files must be an array of paths")),
    };
    let mut paths: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let Some(path) = item.as_str() else {
            return Err(field_error("fetch_files", "fetch_files must be an array of paths"));
        };
        InputFile::check_path(path).map_err(|e| field_error("fetch_files", e))?;
        // SandboxFusion answers with a map, so a path asked twice is one file.
        if !paths.iter().any(|p| p == path) {
            paths.push(path.to_owned());
        }
    }
    Ok(paths)
}

/// CPU seconds (user + system) the program used, as SandboxFusion's
/// `cpu_time` reports them: runbox's own measurement, None where it has
/// none.
fn cpu_time(outcome: &Outcome) -> Option<f64> {
    outcome.cpu_ms.map(seconds)
}

fn seconds(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

/// How a program ended, as SandboxFusion reports a command: None when it
/// did not run to an end (lost, rejected, cancelled), with the reason.
fn command_result(record: &JobRecord) -> Result<CommandResult, String> {
    let Some(outcome) = record.outcome.as_ref().filter(|_| record.status.is_final()) else {
        return Err("the program did not get a worker in time; it was cancelled, retry later".into());
    };
    let (status, return_code) = match record.status {
        Status::Completed => {
            (CommandStatus::Finished, outcome.signal.map(|signal| -signal).or(outcome.exit_code).or(Some(-1)))
        }
        Status::Timeout => (CommandStatus::TimeLimitExceeded, None),
        // Killed at the cap, as a sandbox's OOM kill ends a process: SIGKILL.
        Status::MemoryExceeded => (CommandStatus::Finished, Some(outcome.exit_code.unwrap_or(-9))),
        other => {
            let detail = Some(outcome.stderr.trim()).filter(|s| !s.is_empty());
            return Err(format!(
                "runbox could not run the program: the job ended as {other}{}",
                detail.map(|d| format!(": {d}")).unwrap_or_default()
            ));
        }
    };
    Ok(CommandResult {
        status,
        execution_time: Some(seconds(outcome.duration_ms)),
        cpu_time: cpu_time(outcome),
        return_code,
        stdout: Some(outcome.stdout.clone()),
        stderr: Some(outcome.stderr.clone()),
    })
}

/// The whole `run_code` answer for a job's record.
pub fn run_code_answer(record: &JobRecord) -> RunCodeResponse {
    let run = match command_result(record) {
        Ok(run) => run,
        Err(message) => return RunCodeResponse::sandbox_error(message),
    };
    let outcome = record.outcome.as_ref();
    let mut notes = Vec::new();
    if record.status == Status::MemoryExceeded {
        notes
            .push("the program ran out of memory: it hit its memory cap (memory_limit_MB, or the workers')".to_owned());
    }
    if outcome.is_some_and(|o| o.stdout_truncated || o.stderr_truncated) {
        notes.push("output was cut at the output cap".to_owned());
    }
    let mut files = BTreeMap::new();
    for file in outcome.map(|o| o.files.as_slice()).unwrap_or_default() {
        // A file cut short is not the file: it is left out, and said so.
        if file.truncated {
            notes.push(format!("{} ({} bytes) is over the size runbox returns; it was left out", file.path, file.size));
        } else {
            files.insert(file.path.clone(), file.content.clone());
        }
    }
    if outcome.is_some_and(|o| o.files_truncated && !o.files.iter().any(|f| f.truncated)) {
        notes.push("some fetched files were left out: more than runbox returns".to_owned());
    }
    let status = match (run.status, run.return_code) {
        (CommandStatus::Finished, Some(0)) => RunStatus::Success,
        _ => RunStatus::Failed,
    };
    RunCodeResponse {
        status,
        message: notes.join("; "),
        compile_result: None,
        run_result: Some(run),
        executor_pod_name: record.worker.clone(),
        files,
    }
}

/// A request body as a JSON object (whatever its `Content-Type`: RL
/// frameworks send what their HTTP library sends).
fn object(body: Result<Bytes, BytesRejection>) -> Result<Map<String, Value>, FusionError> {
    let body = body.map_err(|rejection| {
        FusionError::Api(ApiError::TooLarge {
            code: "payload_too_large",
            message: format!("request body rejected ({rejection})"),
        })
    })?;
    match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(fields)) => Ok(fields),
        Ok(_) => Err(field_error("__root__", "the body must be a JSON object")),
        Err(e) => Err(field_error("__root__", format!("the body is not valid JSON: {e}"))),
    }
}

/// `POST /run_code`.
async fn run_code(
    State(state): State<AppState>,
    caller: Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<RunCodeResponse>, FusionError> {
    let fields = object(body)?;
    let job = match translate(&fields, state.config.limits.timeouts.max_ms())? {
        Translated::Job(job) => job,
        Translated::Unsupported(message) => return Ok(Json(RunCodeResponse::sandbox_error(message))),
    };
    let spec = job.validate(&state.config.limits).map_err(ApiError::Field)?;
    let id = enqueue(&state, &caller, &spec, None, None, None, None).await?.id;
    let timeout = Duration::from_millis(spec.timeout_ms.unwrap_or(state.config.limits.timeouts.default_ms()));
    let record = owned(wait_for(&state, &id, timeout + QUEUE_GRACE).await?, &caller)?;
    if !record.status.is_final() {
        // Nobody will come back for this job: end it rather than run it for nobody.
        let _ = state.queue.cancel(&id, &now_rfc3339(), state.config.shared.result_ttl).await;
    }
    Ok(Json(run_code_answer(&record)))
}

/// A `run_jupyter` request, checked.
#[derive(Debug)]
pub struct JupyterRequest {
    pub cells: Vec<String>,
    /// Each cell's limit; None (SandboxFusion's 0) leaves cells only the total.
    pub cell_timeout: Option<Duration>,
    pub total_timeout: Duration,
    pub files: Vec<(String, String)>,
    pub fetch_files: Vec<String>,
}

/// Reads a `run_jupyter` body. `kernel` must be `python3`, the only kernel
/// SandboxFusion has.
pub fn jupyter_request(body: &Map<String, Value>, max_timeout_ms: u64) -> Result<JupyterRequest, FusionError> {
    let cells = match body.get("cells") {
        Some(Value::Array(cells)) => cells
            .iter()
            .map(|cell| cell.as_str().map(str::to_owned))
            .collect::<Option<Vec<String>>>()
            .ok_or_else(|| field_error("cells", "cells must be an array of strings"))?,
        None | Some(Value::Null) => return Err(field_error("cells", "field required")),
        Some(_) => return Err(field_error("cells", "cells must be an array of strings")),
    };
    match body.get("kernel") {
        None | Some(Value::Null) => {}
        Some(Value::String(kernel)) if kernel == "python3" => {}
        Some(_) => return Err(field_error("kernel", "kernel must be \"python3\"")),
    }
    let cell_timeout = match body.get("cell_timeout") {
        None | Some(Value::Null) => None,
        Some(value) if value.as_f64() == Some(0.0) => None,
        value => Some(Duration::from_millis(seconds_to_ms(value, "cell_timeout", 0.0, max_timeout_ms)?)),
    };
    let total_timeout = Duration::from_millis(seconds_to_ms(
        body.get("total_timeout"),
        "total_timeout",
        DEFAULT_TOTAL_TIMEOUT_S,
        u64::MAX,
    )?);
    Ok(JupyterRequest {
        cells,
        cell_timeout,
        total_timeout,
        files: files(body.get("files"))?,
        fetch_files: fetch_files(body.get("fetch_files"))?,
    })
}

/// SandboxFusion's `CellRunResult`: what a notebook shows of one cell.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct CellResult {
    pub stdout: String,
    pub stderr: String,
    /// Each a mime bundle, `{"text/plain": repr}` for a last expression.
    pub display: Vec<Map<String, Value>>,
    /// Each `{ename, evalue, traceback}`, as Jupyter reports an exception.
    pub error: Vec<Map<String, Value>>,
}

/// SandboxFusion's `RunJupyterResponse`.
#[derive(Debug, Serialize)]
pub struct RunJupyterResponse {
    pub status: RunStatus,
    pub message: String,
    /// The notebook as one command: finished, or out of time.
    pub driver: Option<CommandResult>,
    pub cells: Vec<CellResult>,
    pub executor_pod_name: Option<String>,
    pub files: BTreeMap<String, String>,
}

/// Splits an exec's stdout at the last `marker`: the program's own output,
/// and the step's report after it (None when there is none, such as when
/// the output cap cut it off).
pub fn split_report<'a>(stdout: &'a str, marker: &str) -> (&'a str, Option<Value>) {
    let cut = format!("\n{marker}");
    match stdout.rfind(&cut) {
        Some(at) => (&stdout[..at], serde_json::from_str(stdout[at + cut.len()..].trim_end()).ok()),
        None => (stdout, None),
    }
}

/// `POST /run_jupyter`.
async fn run_jupyter(
    State(state): State<AppState>,
    caller: Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<RunJupyterResponse>, FusionError> {
    let fields = object(body)?;
    let request = jupyter_request(&fields, state.config.limits.timeouts.max_ms())?;
    // The files reach the session as one exec's stdin, in base64.
    let total: usize = request.files.iter().map(|(path, content)| path.len() + content.len()).sum();
    let room = state.config.limits.max_stdin_bytes.saturating_sub(STEP_OVERHEAD_BYTES);
    if total > room {
        return Err(ApiError::TooLarge {
            code: "files_too_large",
            message: format!("files hold {total} bytes of base64; run_jupyter carries at most {room}"),
        }
        .into());
    }
    let create = SessionRequest {
        language: Some(Language::Python),
        idle_timeout_s: Some(jupyter_idle_s(&state)),
        ..SessionRequest::default()
    };
    // The session is the request's alone: the guard ends it however the
    // request ends, from before it exists (a client gone while it starts).
    let guard = SessionGuard::new(&state, &caller);
    let session = sessions::create_session_as(&state, &caller, create, guard.id.clone()).await?;
    let answer = notebook(&state, &caller, &session.id, &request).await;
    guard.end().await;
    let mut answer = answer?;
    answer.executor_pod_name = session.worker;
    Ok(Json(answer))
}

/// The idle timeout of a `run_jupyter` session, a backstop for its guard
/// (a session created after its request was dropped, or an api process
/// killed mid-request): the longest a cell may run plus a margin, as
/// Redis counts a session idle from its last exec's start, and at most
/// what a session may ask for.
fn jupyter_idle_s(state: &AppState) -> u64 {
    let longest_cell_s = state.config.limits.timeouts.max_ms().div_ceil(1000);
    (longest_cell_s + JUPYTER_IDLE_MARGIN_S).min(state.config.sessions.max_idle.as_secs()).max(1)
}

/// What a `run_jupyter` session may stay idle beyond its longest cell.
const JUPYTER_IDLE_MARGIN_S: u64 = 30;

/// Ends a `run_jupyter` session however its request ends: answered,
/// failed, or dropped, which is what axum does to a handler whose client
/// has gone. [`SessionGuard::end`] destroys it and waits; a guard dropped
/// without it spawns the destroy, as `Drop` cannot wait.
struct SessionGuard {
    state: AppState,
    caller: Caller,
    id: String,
    armed: bool,
}

impl SessionGuard {
    /// A guard on the session about to be created under its `id`.
    fn new(state: &AppState, caller: &Caller) -> SessionGuard {
        SessionGuard { state: state.clone(), caller: caller.clone(), id: sessions::new_session_id(), armed: true }
    }

    /// Destroys the session before the answer goes out.
    async fn end(mut self) {
        self.armed = false;
        destroy_jupyter_session(&self.state, &self.caller, &self.id).await;
    }
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (state, caller, id) = (self.state.clone(), self.caller.clone(), std::mem::take(&mut self.id));
        tracing::info!(session = %id, "run_jupyter request dropped: destroying its session");
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(async move { destroy_jupyter_session(&state, &caller, &id).await })),
            Err(_) => {
                tracing::warn!(session = %id, "no runtime to destroy a run_jupyter session; its idle timeout will")
            }
        }
    }
}

/// Destroys `run_jupyter` session `id`; one that has ended already, or was
/// never created, needs nothing.
async fn destroy_jupyter_session(state: &AppState, caller: &Caller, id: &str) {
    match sessions::destroy_session(state, caller, id).await {
        Ok(_) | Err(ApiError::NoSession | ApiError::SessionEnded { .. }) => {}
        Err(e) => {
            tracing::warn!(session = %id, error = %e, "could not destroy a run_jupyter session; its idle timeout will")
        }
    }
}

/// One step of a notebook's session, run to its end: its record, or the
/// `SandboxError` message that says why there is none.
async fn step(
    state: &AppState,
    caller: &Caller,
    session: &str,
    step: Value,
    timeout: Duration,
) -> Result<Result<JobRecord, String>, ApiError> {
    let exec = ExecRequest {
        code: Some(JUPYTER_STEP.to_owned()),
        stdin: Some(step.to_string()),
        timeout_ms: Some(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX).max(1)),
        ..ExecRequest::default()
    };
    Ok(match sessions::exec_record(state, caller, session, exec).await? {
        Some(record) if record.status.is_final() => Ok(record),
        _ => Err("the notebook's session stopped answering".into()),
    })
}

/// Runs the request's notebook in session `id`.
async fn notebook(
    state: &AppState,
    caller: &Caller,
    id: &str,
    request: &JupyterRequest,
) -> Result<RunJupyterResponse, FusionError> {
    let sandbox_error = |message: String| RunJupyterResponse {
        status: RunStatus::SandboxError,
        message,
        driver: None,
        cells: Vec::new(),
        executor_pod_name: None,
        files: BTreeMap::new(),
    };
    let started = Instant::now();
    let deadline = started + request.total_timeout;
    let max = Duration::from_millis(state.config.limits.timeouts.max_ms());
    let marker = format!("\u{1e}runbox-jupyter-{}\u{1e}", uuid::Uuid::new_v4());

    if !request.files.is_empty() {
        let files: Map<String, Value> = request.files.iter().map(|(p, c)| (p.clone(), json!(c))).collect();
        let put = step(state, caller, id, json!({"op": "put", "files": files}), max).await?;
        match put {
            Ok(record) if record.outcome.as_ref().is_some_and(|o| o.exit_code == Some(0)) => {}
            Ok(record) => {
                let why = record.outcome.map(|o| o.stderr).unwrap_or_default();
                return Ok(sandbox_error(format!("the request's files could not be written: {why}")));
            }
            Err(message) => return Ok(sandbox_error(message)),
        }
    }

    let mut cells = Vec::with_capacity(request.cells.len());
    // The driver's CPU is its cells' (None unless runbox measured every one).
    let mut cpu_ms = Some(0);
    let mut timed_out = false;
    let mut notes = Vec::new();
    for (index, source) in request.cells.iter().enumerate() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            timed_out = true;
            break;
        }
        let timeout = request.cell_timeout.map_or(left, |cell| cell.min(left)).min(max);
        let cell = json!({"op": "cell", "index": index, "source": source, "marker": marker});
        let record = match step(state, caller, id, cell, timeout).await? {
            Ok(record) => record,
            Err(message) => return Ok(sandbox_error(message)),
        };
        let outcome = record.outcome.unwrap_or_else(|| Outcome::internal_error(""));
        cpu_ms = cpu_ms.zip(outcome.cpu_ms).map(|(sum, cell)| sum + cell);
        let (stdout, report) = split_report(&outcome.stdout, &marker);
        let mut cell: CellResult = report.and_then(|r| serde_json::from_value(r).ok()).unwrap_or_default();
        cell.stdout = stdout.to_owned();
        cell.stderr = outcome.stderr.clone();
        let error = |ename: &str, evalue: &str| {
            let mut error = Map::new();
            error.insert("ename".into(), json!(ename));
            error.insert("evalue".into(), json!(evalue));
            error.insert("traceback".into(), json!([]));
            error
        };
        match record.status {
            Status::Completed if cell.error.is_empty() && outcome.exit_code != Some(0) => {
                cell.error.push(error("SystemExit", &format!("the cell ended the kernel ({:?})", outcome.exit_code)));
            }
            Status::Completed => {}
            Status::Timeout => {
                if cell.error.is_empty() {
                    cell.error.push(error("TimeoutError", "the cell ran past its time limit"));
                }
                timed_out = true;
            }
            Status::MemoryExceeded => {
                cell.error.push(error("MemoryError", "the cell hit the workers' memory cap; the kernel died"));
            }
            other => {
                return Ok(sandbox_error(format!("runbox could not run cell {index}: its exec ended as {other}")));
            }
        }
        if outcome.stdout_truncated || outcome.stderr_truncated {
            notes.push(format!("cell {index}'s output was cut at the output cap"));
        }
        let ended = record.status != Status::Completed;
        cells.push(cell);
        // A cell that timed out or died took the kernel's state with it.
        if ended {
            break;
        }
    }

    let mut files = BTreeMap::new();
    if !request.fetch_files.is_empty() && !timed_out {
        let fetch = json!({"op": "fetch", "paths": request.fetch_files, "marker": marker});
        match step(state, caller, id, fetch, max).await? {
            Ok(record) => {
                let outcome = record.outcome.unwrap_or_else(|| Outcome::internal_error(""));
                match split_report(&outcome.stdout, &marker).1 {
                    Some(Value::Object(mut report)) => {
                        if let Some(Value::Object(found)) = report.remove("files") {
                            files.extend(found.into_iter().filter_map(|(p, c)| Some((p, c.as_str()?.to_owned()))));
                        }
                    }
                    _ => notes.push("the fetched files were more than the output cap; none is returned".into()),
                }
            }
            Err(message) => return Ok(sandbox_error(message)),
        }
    }

    let failed = timed_out || cells.iter().any(|c| !c.error.is_empty());
    let driver = CommandResult {
        status: if timed_out { CommandStatus::TimeLimitExceeded } else { CommandStatus::Finished },
        execution_time: Some(started.elapsed().as_secs_f64()),
        cpu_time: cpu_ms.map(seconds),
        return_code: if timed_out { None } else { Some(0) },
        stdout: Some(String::new()),
        stderr: Some(String::new()),
    };
    Ok(RunJupyterResponse {
        status: if failed { RunStatus::Failed } else { RunStatus::Success },
        message: notes.join("; "),
        driver: Some(driver),
        cells,
        executor_pod_name: None,
        files,
    })
}

#[cfg(test)]
mod tests {
    use runbox_common::{OutputFile, Timings};

    use super::*;

    fn body(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(fields) => fields,
            _ => panic!("an object"),
        }
    }

    fn job(value: Value) -> Program {
        match translate(&body(value), 60_000).expect("valid") {
            Translated::Job(job) => *job,
            Translated::Unsupported(message) => panic!("refused: {message}"),
        }
    }

    #[test]
    fn the_token_segment_is_redacted() {
        assert_eq!(redacted_path("/sandbox-fusion/s3cret-token/run_code"), "/sandbox-fusion/***/run_code");
        assert_eq!(redacted_path("/sandbox-fusion/s3cret-token"), "/sandbox-fusion/***");
        assert_eq!(redacted_path("/sandbox-fusion/run_code"), "/sandbox-fusion/run_code");
        assert_eq!(redacted_path("/sandbox-fusion/run_jupyter"), "/sandbox-fusion/run_jupyter");
        assert_eq!(redacted_path("/v1/jobs"), "/v1/jobs");
        assert_eq!(crate::compat::redacted_path("/piston/s3cret-token/api/v2/execute"), "/piston/***/api/v2/execute");
        assert_eq!(
            crate::compat::redacted_path("/sandbox-fusion/s3cret/run_jupyter"),
            "/sandbox-fusion/***/run_jupyter"
        );
    }

    #[test]
    fn a_request_becomes_a_job_with_its_files() {
        let job = job(json!({"code": "print(1)", "language": "python", "stdin": null, "run_timeout": 2.5,
                             "compile_timeout": 10, "memory_limit_MB": 512, "unknown_field": [1],
                             "files": {"a/in.txt": "aGk=", "skipped": null}, "fetch_files": ["out.txt", "out.txt"]}));
        assert_eq!(job.language, Some(Language::Python));
        assert_eq!(job.timeout_ms, Some(2500));
        assert_eq!(job.stdin.as_deref(), Some(""));
        let file = FileRequest {
            path: Some("a/in.txt".into()),
            content: Some("aGk=".into()),
            encoding: Some(FileEncoding::Base64),
        };
        assert_eq!(job.files, Some(vec![file]));
        assert_eq!(job.return_files, Some(ReturnFilesRequest::Paths(vec![FilePath("out.txt".into())])));
        let spec = job.validate(&crate::ApiLimits::default()).expect("a valid job");
        assert_eq!(spec.files.len(), 1);
    }

    #[test]
    fn timeouts_default_and_clamp_like_sandbox_fusion() {
        assert_eq!(job(json!({"code": "1", "language": "nodejs"})).timeout_ms, Some(10_000));
        assert_eq!(job(json!({"code": "1", "language": "nodejs", "run_timeout": 9999})).timeout_ms, Some(60_000));
        assert_eq!(job(json!({"code": "1", "language": "typescript", "run_timeout": 0.0001})).timeout_ms, Some(1));
    }

    #[test]
    fn pytest_runs_the_code_as_a_test_file() {
        let job = job(json!({"code": "def test_x(): pass", "language": "pytest"}));
        assert_eq!(job.language, Some(Language::Python));
        assert_eq!(job.code.as_deref(), Some(PYTEST_PROGRAM));
        let file = FileRequest {
            path: Some(PYTEST_FILE.into()),
            content: Some("def test_x(): pass".into()),
            encoding: Some(FileEncoding::Utf8),
        };
        assert_eq!(job.files, Some(vec![file]));
        assert!(PYTEST_PROGRAM.contains(PYTEST_FILE), "the program runs the file the code is written to");
    }

    #[test]
    fn javascript_fetches_nothing_and_empty_code_still_runs() {
        let js = job(json!({"code": "  ", "language": "nodejs", "fetch_files": ["x"]}));
        assert_eq!(js.language, Some(Language::Javascript));
        assert!(js.code.as_deref().is_some_and(|c| c.starts_with(NODE_PRELUDE)));
        assert!(js.return_files.is_none());
        assert!(js.validate(&crate::ApiLimits::default()).is_ok(), "empty code is a no-op");
    }

    #[test]
    fn node_programs_get_require_on_their_first_line() {
        assert!(!NODE_PRELUDE.contains('\n'), "the prelude must not move the program's lines");
        assert_eq!(with_node_prelude("a\nb"), format!("{NODE_PRELUDE}a\nb"));
        assert_eq!(with_node_prelude("#!/usr/bin/env node\nb"), format!("#!/usr/bin/env node\n{NODE_PRELUDE}b"));
        assert_eq!(with_node_prelude("#!node"), "#!node");
        let ts = job(json!({"code": "let x: number = 1", "language": "typescript"}));
        assert_eq!(ts.code.as_deref(), Some("let x: number = 1"), "TypeScript runs as written");
    }

    #[test]
    fn other_languages_are_a_sandbox_error_naming_runbox_languages() {
        for language in ["cpp", "go", "python2", "whitespace"] {
            match translate(&body(json!({"code": "x", "language": language})), 60_000).expect("well-formed") {
                Translated::Unsupported(message) => {
                    assert!(message.contains(LANGUAGES) && message.contains(language), "{message}");
                }
                Translated::Job(_) => panic!("{language} was run"),
            }
        }
    }

    #[test]
    fn malformed_requests_name_the_field() {
        let field = |value: Value| match translate(&body(value), 60_000) {
            Err(FusionError::Field { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field(json!({"language": "python"})), "code");
        assert_eq!(field(json!({"code": "1"})), "language");
        assert_eq!(field(json!({"code": "1", "language": "python", "stdin": 5})), "stdin");
        assert_eq!(field(json!({"code": "1", "language": "python", "run_timeout": "10"})), "run_timeout");
        assert_eq!(field(json!({"code": "1", "language": "python", "run_timeout": -1})), "run_timeout");
        assert_eq!(field(json!({"code": "1", "language": "python", "memory_limit_MB": "1G"})), "memory_limit_MB");
        assert_eq!(field(json!({"code": "1", "language": "python", "files": {"../x": "aGk="}})), "files");
        assert_eq!(field(json!({"code": "1", "language": "python", "files": {"x": "%%%"}})), "files");
        assert_eq!(field(json!({"code": "1", "language": "python", "files": ["x"]})), "files");
        assert_eq!(field(json!({"code": "1", "language": "python", "fetch_files": [1]})), "fetch_files");
        assert_eq!(field(json!({"code": "1", "language": "python", "fetch_files": ["/etc/passwd"]})), "fetch_files");
    }

    #[test]
    fn jupyter_requests_are_checked() {
        let request = jupyter_request(&body(json!({"cells": ["a = 1", "a"]})), 60_000).expect("valid");
        assert_eq!(request.cells.len(), 2);
        assert_eq!((request.cell_timeout, request.total_timeout), (None, Duration::from_secs(45)));
        let request = jupyter_request(
            &body(json!({"cells": [], "cell_timeout": 2, "total_timeout": 5.5, "kernel": "python3"})),
            60_000,
        )
        .expect("valid");
        assert_eq!(
            (request.cell_timeout, request.total_timeout),
            (Some(Duration::from_secs(2)), Duration::from_millis(5500))
        );
        let field = |value: Value| match jupyter_request(&body(value), 60_000) {
            Err(FusionError::Field { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field(json!({})), "cells");
        assert_eq!(field(json!({"cells": [1]})), "cells");
        assert_eq!(field(json!({"cells": [], "kernel": "ir"})), "kernel");
        assert_eq!(field(json!({"cells": [], "cell_timeout": -2})), "cell_timeout");
    }

    #[test]
    fn a_cells_report_is_cut_from_its_output() {
        let marker = "\u{1e}m\u{1e}";
        let (out, report) = split_report("hi\n\n\u{1e}m\u{1e}{\"display\": []}\n", marker);
        assert_eq!((out, report), ("hi\n", Some(json!({"display": []}))));
        assert_eq!(split_report("no report", marker), ("no report", None));
    }

    fn record(status: Status, exit_code: Option<i32>, signal: Option<i32>) -> JobRecord {
        JobRecord {
            id: "j".into(),
            owner: "alice".into(),
            language: Some(Language::Python),
            status,
            created_at: None,
            started_at: None,
            finished_at: None,
            worker: Some("worker-1".into()),
            outcome: Some(Outcome {
                status,
                exit_code,
                signal,
                stdout: "o\n".into(),
                stderr: "e\n".into(),
                duration_ms: 1500,
                cpu_ms: Some(1200),
                ..Outcome::internal_error("")
            }),
            timings: Timings::default(),
            compat: None,
        }
    }

    #[test]
    fn answers_tell_a_failed_program_from_a_sandbox_that_could_not_run_it() {
        let ok = run_code_answer(&record(Status::Completed, Some(0), None));
        assert_eq!(ok.status, RunStatus::Success);
        let run = ok.run_result.expect("ran");
        assert_eq!((run.status, run.return_code, run.execution_time), (CommandStatus::Finished, Some(0), Some(1.5)));
        assert_eq!(run.cpu_time, Some(1.2), "seconds, from runbox's cpu_ms");
        assert_eq!((run.stdout.as_deref(), ok.executor_pod_name.as_deref()), (Some("o\n"), Some("worker-1")));

        let failed = run_code_answer(&record(Status::Completed, Some(3), None));
        assert_eq!((failed.status, failed.run_result.and_then(|r| r.return_code)), (RunStatus::Failed, Some(3)));
        let signalled = run_code_answer(&record(Status::Completed, None, Some(11)));
        assert_eq!(signalled.run_result.and_then(|r| r.return_code), Some(-11));
        let slow = run_code_answer(&record(Status::Timeout, None, None));
        let run = slow.run_result.expect("ran");
        assert_eq!(
            (slow.status, run.status, run.return_code),
            (RunStatus::Failed, CommandStatus::TimeLimitExceeded, None)
        );
        let big = run_code_answer(&record(Status::MemoryExceeded, None, None));
        assert_eq!((big.status, big.run_result.and_then(|r| r.return_code)), (RunStatus::Failed, Some(-9)));
        assert!(big.message.contains("memory"));

        for status in [Status::WorkerLost, Status::InternalError, Status::Rejected, Status::Cancelled, Status::Queued] {
            let lost = run_code_answer(&record(status, None, None));
            assert_eq!((lost.status, lost.run_result.is_none()), (RunStatus::SandboxError, true), "{status}");
        }
    }

    #[test]
    fn fetched_files_are_whole_or_left_out() {
        let mut done = record(Status::Completed, Some(0), None);
        if let Some(outcome) = done.outcome.as_mut() {
            outcome.files = vec![
                OutputFile { path: "a".into(), content: "aGk=".into(), size: 2, truncated: false },
                OutputFile { path: "b".into(), content: "AAAA".into(), size: 5_000_000, truncated: true },
            ];
        }
        let answer = run_code_answer(&done);
        assert_eq!(answer.files, BTreeMap::from([("a".to_owned(), "aGk=".to_owned())]));
        assert!(answer.message.contains("b (5000000 bytes)"), "{}", answer.message);
    }

    async fn answer(error: FusionError) -> (StatusCode, Value) {
        let response = error.into_response();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 16).await.expect("body");
        (status, serde_json::from_slice(&bytes).expect("json"))
    }

    #[tokio::test]
    async fn errors_take_fastapis_shape() {
        let (status, detail) = answer(field_error("code", "field required")).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(
            detail,
            json!({"detail": [{"loc": ["body", "code"], "msg": "field required", "type": "value_error"}]})
        );
        let (status, detail) = answer(ApiError::invalid("code", "code is too odd").into()).await;
        assert_eq!((status, detail), (StatusCode::UNPROCESSABLE_ENTITY, json!({"detail": "code is too odd"})));
        assert_eq!(answer(ApiError::Unauthorized.into()).await.0, StatusCode::UNAUTHORIZED);
        assert_eq!(answer(ApiError::QueueFull.into()).await.0, StatusCode::SERVICE_UNAVAILABLE);
    }
}
