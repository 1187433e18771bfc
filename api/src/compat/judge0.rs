//! A Judge0 CE 1.13.1-compatible API, under `/judge0`.
//!
//! A Judge0 submission is a runbox job: its token is the job id. A
//! submission is translated into the fields of a native job spec and
//! validated, signed and queued by the same code as `POST /v1/jobs`; what
//! Judge0 reports but a job does not hold (the source, the limits asked
//! for, the language id) is kept with the job as its compat note, and
//! every answer is built from the job record and that note.
//!
//! - Auth: `X-Auth-Token` (Judge0's header) or `Authorization: Bearer`,
//!   either holding a runbox token. A token sees only its own submissions.
//! - Statuses come from the job's status, exit code, signal and verdict
//!   ([`Judge0Status::of`]); `expected_output` is compared as Judge0 does,
//!   ignoring whitespace at line ends and trailing blank lines (runbox's
//!   `compare: trim`).
//! - Limits: the wall-clock timeout is the smaller of `cpu_time_limit` +
//!   `cpu_extra_time` and `wall_time_limit`, clamped to runbox's maximum;
//!   `memory_limit` below the workers' cap becomes the job's `memory_mb`,
//!   and is reported clamped to that cap.
//! - A `callback_url` gets the submission PUT to it, Judge0-shaped, by the
//!   native callback deliverer (`callbacks.rs` asks [`callback_body`]).
//! - Errors take Judge0's shapes: 422 `{field: [message]}` for a bad
//!   submission, `{"error": message}` otherwise ([`Judge0Error`]).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine;
use runbox_common::{Compare, JobRecord, Language, Outcome, Status, Verdict};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::auth::{Caller, bearer, identify};
use crate::callback_urls;
use crate::config::MAX_WAIT_S;
use crate::error::ApiError;
use crate::pipeline::{enqueue, owned, wait_for};
use crate::requests::{FieldError, Program};
use crate::state::AppState;

/// The Judge0 version this API answers as; the SDK picks its language
/// table by it.
pub const VERSION: &str = "1.13.1";

/// Most submissions in one batch, as in Judge0's default configuration.
pub const MAX_BATCH: usize = 20;

/// Judge0's defaults for the CPU time a program may use beyond its limit,
/// and the most it may ask for, in seconds.
const CPU_EXTRA_TIME: f64 = 0.0;
const MAX_CPU_EXTRA_TIME: f64 = 5.0;

/// Judge0's smallest `memory_limit`, in KB.
const MIN_MEMORY_LIMIT_KB: u64 = 2048;

/// The memory cap reported when no worker is live to tell its own: the
/// workers' default `RUNBOX_MEMORY_MB`.
const DEFAULT_MEMORY_KB: u64 = 256 * 1024;

/// Longest `command_line_arguments` (and `compiler_options`), as in Judge0.
const MAX_ARGUMENTS_CHARS: usize = 512;

/// A language Judge0 1.13.1 offers that runbox runs, under Judge0's id and name.
struct Judge0Language {
    id: u64,
    name: &'static str,
    source_file: &'static str,
    language: Language,
}

/// Ordered by name, as Judge0 lists them.
const LANGUAGES: [Judge0Language; 3] = [
    Judge0Language {
        id: 63,
        name: "JavaScript (Node.js 12.14.0)",
        source_file: "script.js",
        language: Language::Javascript,
    },
    Judge0Language { id: 71, name: "Python (3.8.1)", source_file: "script.py", language: Language::Python },
    Judge0Language { id: 74, name: "TypeScript (3.7.4)", source_file: "script.ts", language: Language::Typescript },
];

fn language_by_id(id: u64) -> Option<&'static Judge0Language> {
    LANGUAGES.iter().find(|l| l.id == id)
}

fn language_of(language: Language) -> &'static Judge0Language {
    match language {
        Language::Javascript => &LANGUAGES[0],
        Language::Python => &LANGUAGES[1],
        Language::Typescript => &LANGUAGES[2],
    }
}

impl Judge0Language {
    /// The language object of `GET /languages/{id}`. runbox runs every
    /// language in Deno (Python as Pyodide), so the commands say that
    /// rather than Judge0's.
    fn detail(&self) -> Value {
        json!({
            "id": self.id,
            "name": self.name,
            "is_archived": false,
            "source_file": self.source_file,
            "compile_cmd": null,
            "run_cmd": format!("runbox {} (Deno, every permission denied)", self.language),
        })
    }
}

/// Judge0's statuses, by their ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judge0Status {
    InQueue = 1,
    Processing = 2,
    Accepted = 3,
    WrongAnswer = 4,
    TimeLimitExceeded = 5,
    CompilationError = 6,
    Sigsegv = 7,
    Sigxfsz = 8,
    Sigfpe = 9,
    Sigabrt = 10,
    Nzec = 11,
    Other = 12,
    InternalError = 13,
    ExecFormatError = 14,
}

impl Judge0Status {
    const ALL: [Judge0Status; 14] = [
        Judge0Status::InQueue,
        Judge0Status::Processing,
        Judge0Status::Accepted,
        Judge0Status::WrongAnswer,
        Judge0Status::TimeLimitExceeded,
        Judge0Status::CompilationError,
        Judge0Status::Sigsegv,
        Judge0Status::Sigxfsz,
        Judge0Status::Sigfpe,
        Judge0Status::Sigabrt,
        Judge0Status::Nzec,
        Judge0Status::Other,
        Judge0Status::InternalError,
        Judge0Status::ExecFormatError,
    ];

    pub fn id(self) -> u8 {
        self as u8
    }

    pub fn description(self) -> &'static str {
        match self {
            Judge0Status::InQueue => "In Queue",
            Judge0Status::Processing => "Processing",
            Judge0Status::Accepted => "Accepted",
            Judge0Status::WrongAnswer => "Wrong Answer",
            Judge0Status::TimeLimitExceeded => "Time Limit Exceeded",
            Judge0Status::CompilationError => "Compilation Error",
            Judge0Status::Sigsegv => "Runtime Error (SIGSEGV)",
            Judge0Status::Sigxfsz => "Runtime Error (SIGXFSZ)",
            Judge0Status::Sigfpe => "Runtime Error (SIGFPE)",
            Judge0Status::Sigabrt => "Runtime Error (SIGABRT)",
            Judge0Status::Nzec => "Runtime Error (NZEC)",
            Judge0Status::Other => "Runtime Error (Other)",
            Judge0Status::InternalError => "Internal Error",
            Judge0Status::ExecFormatError => "Exec Format Error",
        }
    }

    fn as_json(self) -> Value {
        json!({ "id": self.id(), "description": self.description() })
    }

    /// The Judge0 status of a job, and the message Judge0 would give with
    /// it. runbox never compiles, so Compilation Error and Exec Format Error
    /// never occur: a syntax error is a program that exits with code 1.
    pub fn of(record: &JobRecord) -> (Judge0Status, Option<String>) {
        let outcome = record.outcome.as_ref();
        match record.status {
            Status::Queued => (Judge0Status::InQueue, None),
            Status::Running => (Judge0Status::Processing, None),
            Status::Completed => match (outcome.and_then(|o| o.signal), outcome.and_then(|o| o.exit_code)) {
                (Some(signal), _) => {
                    // As Judge0 sorts the signal that ended a program.
                    let status = match signal {
                        11 => Judge0Status::Sigsegv,
                        25 => Judge0Status::Sigxfsz,
                        8 => Judge0Status::Sigfpe,
                        6 => Judge0Status::Sigabrt,
                        _ => Judge0Status::Other,
                    };
                    (status, Some(format!("Caught fatal signal {signal}")))
                }
                (None, Some(0)) => match outcome.and_then(|o| o.verdict) {
                    Some(Verdict::WrongAnswer) => (Judge0Status::WrongAnswer, None),
                    _ => (Judge0Status::Accepted, None),
                },
                (None, Some(code)) => (Judge0Status::Nzec, Some(format!("Exited with error status {code}"))),
                (None, None) => (Judge0Status::Other, Some("the program ended without an exit status".into())),
            },
            Status::Timeout => (Judge0Status::TimeLimitExceeded, Some("Time limit exceeded".into())),
            // Judge0 has no status of its own for memory: a program that
            // runs out of it there ends as a runtime error too.
            Status::MemoryExceeded => (
                Judge0Status::Other,
                Some(
                    "Memory limit exceeded: the program hit the worker's memory cap (runbox status memory_exceeded)"
                        .into(),
                ),
            ),
            Status::Rejected => {
                (Judge0Status::InternalError, Some("runbox rejected the job: its signature did not verify".into()))
            }
            Status::Cancelled => {
                (Judge0Status::InternalError, Some("the job was cancelled through runbox's API".into()))
            }
            Status::WorkerLost => {
                (Judge0Status::InternalError, Some("the runbox workers running the job died repeatedly".into()))
            }
            Status::InternalError => (
                Judge0Status::InternalError,
                Some(outcome.map_or_else(|| "runbox failed".to_owned(), |o| o.stderr.clone())),
            ),
        }
    }
}

/// What a Judge0 submission asked for beyond the job spec, kept with the
/// job (as its compat note) so that answers can show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Note {
    /// Always `"judge0"`: tells this note from another surface's.
    api: String,
    language_id: u64,
    source_code: String,
    stdin: Option<String>,
    expected_output: Option<String>,
    command_line_arguments: Option<String>,
    cpu_time_limit: f64,
    cpu_extra_time: f64,
    wall_time_limit: f64,
    memory_limit: u64,
    stack_limit: u64,
    max_processes_and_or_threads: u64,
    enable_per_process_and_thread_time_limit: bool,
    enable_per_process_and_thread_memory_limit: bool,
    max_file_size: u64,
    callback_url: Option<String>,
}

impl Note {
    pub fn parse(text: &str) -> Option<Note> {
        serde_json::from_str::<Note>(text).ok().filter(|n| n.api == "judge0")
    }
}

/// The limits a submission is checked against and filled in from.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Seconds: what a job gets by default and at most (`RUNBOX_DEFAULT_TIMEOUT_MS`, `RUNBOX_MAX_TIMEOUT_MS`).
    pub default_time: f64,
    pub max_time: f64,
    /// KB: the workers' memory cap.
    pub memory_kb: u64,
}

impl Limits {
    async fn of(state: &AppState) -> Result<Limits, ApiError> {
        let timeouts = &state.config.limits.timeouts;
        let workers = crate::system::live_workers(state).await?;
        let memory_kb = workers.iter().map(|w| u64::from(w.memory_mb) * 1024).min().unwrap_or(DEFAULT_MEMORY_KB);
        Ok(Limits {
            default_time: timeouts.default_ms() as f64 / 1000.0,
            max_time: timeouts.max_ms() as f64 / 1000.0,
            memory_kb,
        })
    }
}

/// Errors in Judge0's shapes.
#[derive(Debug)]
pub enum Judge0Error {
    /// 422: each field's problems, as Rails reports a record that does not validate.
    Invalid(BTreeMap<String, Vec<String>>),
    /// 400 `{"error": message}`.
    BadRequest(String),
    /// 404 `{"error": message}`.
    NotFound(&'static str),
    /// Anything the native API would refuse, with its status and headers.
    Api(ApiError),
}

impl From<ApiError> for Judge0Error {
    fn from(e: ApiError) -> Self {
        Judge0Error::Api(e)
    }
}

impl Judge0Error {
    fn field(field: &str, message: impl Into<String>) -> Judge0Error {
        Judge0Error::Invalid(BTreeMap::from([(field.to_owned(), vec![message.into()])]))
    }

    /// A native validation error of the translated spec, charged to the
    /// Judge0 field it came from.
    /// A native field's error as the Judge0 field it came from.
    fn from_spec(e: FieldError) -> Judge0Error {
        let field = match e.field.split(['.', '[']).next().unwrap_or_default() {
            "code" => "source_code",
            "stdin" => "stdin",
            "expected_stdout" => "expected_output",
            "args" => "command_line_arguments",
            "memory_mb" => "memory_limit",
            "timeout_ms" => "wall_time_limit",
            _ => "base",
        };
        Judge0Error::field(field, e.message)
    }
}

impl IntoResponse for Judge0Error {
    fn into_response(self) -> Response {
        match self {
            Judge0Error::Invalid(errors) => (StatusCode::UNPROCESSABLE_ENTITY, Json(errors)).into_response(),
            Judge0Error::BadRequest(message) => {
                (StatusCode::BAD_REQUEST, Json(json!({ "error": message }))).into_response()
            }
            Judge0Error::NotFound(message) => {
                (StatusCode::NOT_FOUND, Json(json!({ "error": message }))).into_response()
            }
            Judge0Error::Api(e) => {
                // The native response keeps its status, its Retry-After and
                // its logging of causes; only the body takes Judge0's shape.
                let message = e.to_string();
                let mut response = e.into_response();
                *response.body_mut() = Body::from(json!({ "error": message }).to_string());
                response
            }
        }
    }
}

/// The `/judge0` routes, each behind the token check.
pub fn router(state: &AppState) -> Router<AppState> {
    Router::new()
        .route("/submissions", post(create))
        .route("/submissions/batch", post(create_batch).get(show_batch))
        .route("/submissions/{token}", get(show))
        .route("/languages", get(languages))
        .route("/languages/all", get(all_languages))
        .route("/languages/{id}", get(language))
        .route("/statuses", get(statuses))
        .route("/about", get(about))
        .route("/version", get(|| async { VERSION }))
        .route("/config_info", get(config_info))
        .route("/system_info", get(system_info))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token))
}

/// Judge0's `X-Auth-Token`, or a bearer token, must be a runbox token.
async fn require_token(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let presented = request.headers().get("x-auth-token").and_then(|v| v.to_str().ok()).map(str::trim);
    let presented = presented.or_else(|| bearer(request.headers()));
    match identify(&state, presented) {
        Some(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        None => Judge0Error::Api(ApiError::Unauthorized).into_response(),
    }
}

/// The query parameters every submission route reads.
struct Options {
    base64: bool,
    fields: Vec<&'static str>,
}

impl Options {
    fn parse(query: &HashMap<String, String>) -> Result<Options, Judge0Error> {
        Ok(Options {
            base64: query.get("base64_encoded").is_some_and(|v| v == "true"),
            fields: requested_fields(query.get("fields").map(String::as_str))?,
        })
    }
}

/// Every field a submission has, in Judge0's order.
pub const FIELDS: [&str; 35] = [
    "source_code",
    "language_id",
    "stdin",
    "expected_output",
    "stdout",
    "status_id",
    "created_at",
    "finished_at",
    "time",
    "memory",
    "stderr",
    "token",
    "number_of_runs",
    "cpu_time_limit",
    "cpu_extra_time",
    "wall_time_limit",
    "memory_limit",
    "stack_limit",
    "max_processes_and_or_threads",
    "enable_per_process_and_thread_time_limit",
    "enable_per_process_and_thread_memory_limit",
    "max_file_size",
    "compile_output",
    "exit_code",
    "exit_signal",
    "message",
    "wall_time",
    "compiler_options",
    "command_line_arguments",
    "redirect_stderr_to_stdout",
    "callback_url",
    "additional_files",
    "enable_network",
    "status",
    "language",
];

/// What a request without `fields` gets, and what a callback carries.
const DEFAULT_FIELDS: [&str; 8] =
    ["token", "time", "memory", "stdout", "stderr", "compile_output", "message", "status"];

/// Parses `fields`: a comma-separated list, `*` for all; none asks for the
/// defaults. Unknown names are a 400 that lists them, as in Judge0.
pub fn requested_fields(raw: Option<&str>) -> Result<Vec<&'static str>, Judge0Error> {
    let names: Vec<&str> = raw.unwrap_or("").split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    let invalid: Vec<&str> = names.iter().copied().filter(|n| *n != "*" && !FIELDS.contains(n)).collect();
    if !invalid.is_empty() {
        return Err(Judge0Error::BadRequest(format!("invalid fields: [{}]", invalid.join(", "))));
    }
    if names.contains(&"*") {
        return Ok(FIELDS.to_vec());
    }
    let chosen: Vec<&'static str> = FIELDS.iter().copied().filter(|f| names.contains(f)).collect();
    Ok(if chosen.is_empty() { DEFAULT_FIELDS.to_vec() } else { chosen })
}

/// Base64 as Ruby's `Base64.encode64` writes it, which Judge0 uses: lines
/// of 60 characters, each ending in a newline.
pub fn encode64(text: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(text);
    let mut out = String::with_capacity(encoded.len() + encoded.len() / 60 + 1);
    for line in encoded.as_bytes().chunks(60) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out
}

/// Decodes base64 leniently, as Judge0 does: line breaks and spaces are
/// ignored, and so is missing padding. The text must be UTF-8.
pub fn decode64(text: &str) -> Result<String, String> {
    let compact: String = text.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    let bytes = engine.decode(compact).map_err(|_| "is not valid base64".to_owned())?;
    String::from_utf8(bytes).map_err(|_| "must be UTF-8 text once decoded".to_owned())
}

/// A submission as Judge0 shows it: every field, before `fields` picks.
fn submission(record: &JobRecord, note: Option<&Note>, base64: bool) -> Map<String, Value> {
    let (status, message) = Judge0Status::of(record);
    let outcome = record.outcome.as_ref();
    let text = |value: Option<&str>| -> Value {
        match value {
            // Judge0 stores empty output as nothing.
            None | Some("") => Value::Null,
            Some(text) if base64 => Value::String(encode64(text)),
            Some(text) => Value::String(text.to_owned()),
        }
    };
    let seconds = |ms: Option<u64>| ms.map_or(Value::Null, |ms| Value::String(format!("{:.3}", ms as f64 / 1000.0)));
    let decimal = |n: f64| Value::String(format!("{n}"));
    let language = note
        .and_then(|n| language_by_id(n.language_id))
        .or_else(|| record.language.map(language_of))
        .map_or(Value::Null, |l| json!({ "id": l.id, "name": l.name }));
    let mut fields = Map::new();
    let mut put = |name: &str, value: Value| {
        fields.insert(name.to_owned(), value);
    };
    put("source_code", text(note.map(|n| n.source_code.as_str())));
    put("language_id", language.get("id").cloned().unwrap_or(Value::Null));
    put("stdin", text(note.and_then(|n| n.stdin.as_deref())));
    put("expected_output", text(note.and_then(|n| n.expected_output.as_deref())));
    put("stdout", text(outcome.map(|o| o.stdout.as_str())));
    put("status_id", json!(status.id()));
    put("created_at", timestamp(record.created_at.as_deref()));
    put("finished_at", timestamp(record.finished_at.as_deref()));
    // Judge0's `time` is CPU time. A job stopped at its time limit gets its
    // wall time, because that is the limit runbox enforces: a client that
    // checks `time` against its limit for a time-limit verdict sees it
    // reached (the job may have been sleeping). A result stored before
    // runbox measured CPU time has only its wall time, too.
    let time = |o: &Outcome| match o.cpu_ms {
        Some(cpu_ms) if o.status != Status::Timeout => cpu_ms,
        _ => o.duration_ms,
    };
    put("time", seconds(outcome.map(time)));
    // KB, as Judge0 reports it: runbox's measured peak (see docs/api.md, What each lane measures).
    put("memory", json!(outcome.and_then(|o| o.peak_memory_bytes).map(|bytes| bytes / 1024)));
    put("stderr", text(outcome.map(|o| o.stderr.as_str())));
    put("token", json!(record.id));
    put("number_of_runs", json!(1));
    put("cpu_time_limit", note.map_or(Value::Null, |n| decimal(n.cpu_time_limit)));
    put("cpu_extra_time", note.map_or(Value::Null, |n| decimal(n.cpu_extra_time)));
    put("wall_time_limit", note.map_or(Value::Null, |n| decimal(n.wall_time_limit)));
    put("memory_limit", note.map_or(Value::Null, |n| json!(n.memory_limit)));
    put("stack_limit", note.map_or(Value::Null, |n| json!(n.stack_limit)));
    put("max_processes_and_or_threads", note.map_or(Value::Null, |n| json!(n.max_processes_and_or_threads)));
    put(
        "enable_per_process_and_thread_time_limit",
        note.map_or(Value::Null, |n| json!(n.enable_per_process_and_thread_time_limit)),
    );
    put(
        "enable_per_process_and_thread_memory_limit",
        note.map_or(Value::Null, |n| json!(n.enable_per_process_and_thread_memory_limit)),
    );
    put("max_file_size", note.map_or(Value::Null, |n| json!(n.max_file_size)));
    put("compile_output", Value::Null);
    let finished = record.status.is_final();
    let exit_code = outcome.and_then(|o| o.exit_code);
    put("exit_code", if finished && record.status == Status::Completed { json!(exit_code) } else { Value::Null });
    put("exit_signal", json!(outcome.and_then(|o| o.signal)));
    put("message", text(message.as_deref()));
    put("wall_time", seconds(outcome.map(|o| o.duration_ms)));
    put("compiler_options", Value::Null);
    put("command_line_arguments", json!(note.and_then(|n| n.command_line_arguments.clone())));
    put("redirect_stderr_to_stdout", json!(false));
    put("callback_url", json!(note.and_then(|n| n.callback_url.clone())));
    put("additional_files", Value::Null);
    put("enable_network", json!(false));
    put("status", status.as_json());
    put("language", language);
    fields
}

/// Keeps the requested fields of a submission, in Judge0's order.
pub fn pick(mut all: Map<String, Value>, fields: &[&str]) -> Value {
    let mut picked = Map::new();
    for field in fields {
        if let Some(value) = all.remove(*field) {
            picked.insert((*field).to_owned(), value);
        }
    }
    Value::Object(picked)
}

/// A stored RFC 3339 time (UTC) as Rails writes one, with milliseconds:
/// the SDK parses `%Y-%m-%dT%H:%M:%S.%fZ`, which takes at most six digits
/// of a fraction and none missing.
pub fn timestamp(stored: Option<&str>) -> Value {
    let Some(time) = stored else { return Value::Null };
    let Some(bare) = time.strip_suffix('Z') else { return Value::String(time.to_owned()) };
    let (seconds, fraction) = bare.split_once('.').unwrap_or((bare, ""));
    let millis: String = fraction.chars().chain(std::iter::repeat('0')).take(3).collect();
    Value::String(format!("{seconds}.{millis}Z"))
}

/// The body a Judge0 `callback_url` gets: the default fields, base64.
pub fn callback_body(record: &JobRecord) -> Option<Vec<u8>> {
    let note = Note::parse(record.compat.as_deref()?)?;
    serde_json::to_vec(&pick(submission(record, Some(&note), true), &DEFAULT_FIELDS)).ok()
}

/// Why a field that should hold a number does not.
#[derive(Debug, PartialEq)]
enum NumberError {
    Blank,
    NotANumber,
}
use NumberError::{Blank, NotANumber};

/// A number, given as a JSON number or a string (Rails casts both).
fn float(value: &Value) -> Result<f64, NumberError> {
    let n = match value {
        Value::Null => return Err(Blank),
        Value::Number(n) => n.as_f64().ok_or(NotANumber)?,
        Value::String(s) if s.trim().is_empty() => return Err(Blank),
        Value::String(s) => s.trim().parse::<f64>().map_err(|_| NotANumber)?,
        _ => return Err(NotANumber),
    };
    if n.is_finite() { Ok(n) } else { Err(NotANumber) }
}

/// A whole, non-negative number.
fn integer(value: &Value) -> Result<u64, NumberError> {
    let n = float(value)?;
    if n >= 0.0 && n.fract() == 0.0 && n <= u32::MAX as f64 { Ok(n as u64) } else { Err(NotANumber) }
}

/// What is wrong with a submission, field by field.
#[derive(Default)]
struct Problems(BTreeMap<String, Vec<String>>);

impl Problems {
    fn add(&mut self, field: &str, message: impl Into<String>) {
        self.0.entry(field.to_owned()).or_default().push(message.into());
    }

    fn has(&self, field: &str) -> bool {
        self.0.contains_key(field)
    }
}

/// A text field, decoded from base64 when the request says so.
fn text_field(fields: &Map<String, Value>, name: &str, base64: bool, problems: &mut Problems) -> Option<String> {
    match fields.get(name) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if base64 => decode64(s).map_err(|e| problems.add(name, e)).ok(),
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            problems.add(name, "must be a string");
            None
        }
    }
}

/// A number field at least `min`; above `max`, `max` applies; absent, `default`.
fn number_field(
    fields: &Map<String, Value>,
    name: &str,
    range: (f64, f64),
    default: f64,
    problems: &mut Problems,
) -> f64 {
    let (min, max) = range;
    match fields.get(name).map(float) {
        None | Some(Err(Blank)) => default,
        Some(Err(NotANumber)) => {
            problems.add(name, "is not a number");
            default
        }
        Some(Ok(n)) if n < min => {
            problems.add(name, format!("must be greater than or equal to {min}"));
            default
        }
        Some(Ok(n)) => n.min(max),
    }
}

/// Whether an option runbox cannot honour was turned on.
fn is_set(fields: &Map<String, Value>, name: &str) -> bool {
    match fields.get(name) {
        None | Some(Value::Null | Value::Bool(false)) => false,
        Some(Value::String(s)) => !s.trim().is_empty() && s != "false",
        Some(_) => true,
    }
}

/// A Judge0 submission turned into native job fields, and the note to keep.
pub fn translate(fields: &Map<String, Value>, base64: bool, limits: Limits) -> Result<(Program, Note), Judge0Error> {
    let mut problems = Problems::default();
    let source_code = text_field(fields, "source_code", base64, &mut problems);
    let stdin = text_field(fields, "stdin", base64, &mut problems);
    let expected_output = text_field(fields, "expected_output", base64, &mut problems);
    // A source that did not decode has its error already.
    if source_code.as_deref().is_none_or(|s| s.trim().is_empty()) && !problems.has("source_code") {
        problems.add("source_code", "can't be blank");
    }
    let language = match fields.get("language_id").map(integer) {
        None | Some(Err(Blank)) => {
            problems.add("language_id", "can't be blank");
            None
        }
        Some(Err(NotANumber)) => {
            problems.add("language_id", "is not a number");
            None
        }
        Some(Ok(id)) => {
            let language = language_by_id(id);
            if language.is_none() {
                problems.add("language_id", format!("language with id {id} doesn't exist"));
            }
            language
        }
    };

    let p = &mut problems;
    let cpu_time_limit = number_field(fields, "cpu_time_limit", (0.0, limits.max_time), limits.default_time, p);
    let cpu_extra_time = number_field(fields, "cpu_extra_time", (0.0, MAX_CPU_EXTRA_TIME), CPU_EXTRA_TIME, p);
    let wall_time_limit = number_field(fields, "wall_time_limit", (1.0, limits.max_time), limits.default_time, p);
    let memory = limits.memory_kb as f64;
    let memory_limit = number_field(fields, "memory_limit", (MIN_MEMORY_LIMIT_KB as f64, memory), memory, p) as u64;
    // Accepted and shown as Judge0 would; runbox's own caps apply instead.
    let stack_limit = number_field(fields, "stack_limit", (0.0, 128_000.0), 64_000.0, p) as u64;
    let max_processes = number_field(fields, "max_processes_and_or_threads", (1.0, 120.0), 60.0, p) as u64;
    let max_file_size = number_field(fields, "max_file_size", (0.0, 4096.0), 1024.0, p) as u64;
    match fields.get("number_of_runs").map(integer) {
        None | Some(Err(Blank) | Ok(1)) => {}
        Some(_) => p.add("number_of_runs", "must be less than or equal to 1: runbox runs a submission once"),
    }
    if is_set(fields, "compiler_options") {
        p.add("compiler_options", "setting compiler options is not allowed");
    }
    if is_set(fields, "additional_files") {
        p.add("additional_files", "setting additional files is not allowed");
    }
    if is_set(fields, "enable_network") {
        p.add("enable_network", "enabling network is not allowed");
    }
    if is_set(fields, "redirect_stderr_to_stdout") {
        p.add("redirect_stderr_to_stdout", "runbox keeps stdout and stderr apart; this cannot be enabled");
    }
    let command_line_arguments = match fields.get("command_line_arguments") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.chars().count() <= MAX_ARGUMENTS_CHARS => Some(s.clone()),
        Some(Value::String(_)) => {
            p.add("command_line_arguments", format!("is too long (maximum is {MAX_ARGUMENTS_CHARS} characters)"));
            None
        }
        Some(_) => {
            p.add("command_line_arguments", "must be a string");
            None
        }
    };
    let callback_url = match fields.get("callback_url") {
        None | Some(Value::Null) => None,
        Some(Value::String(url)) => Some(url.clone()),
        Some(_) => {
            p.add("callback_url", "must be a string");
            None
        }
    };
    let (Some(language), Some(source_code), true) = (language, source_code, problems.0.is_empty()) else {
        return Err(Judge0Error::Invalid(problems.0));
    };

    // runbox has one limit, on wall-clock time: the tighter of Judge0's two.
    let timeout_s = (cpu_time_limit + cpu_extra_time).min(wall_time_limit);
    let max_ms = (limits.max_time * 1000.0) as u64;
    let timeout_ms = ((timeout_s * 1000.0).round() as u64).clamp(1, max_ms.max(1));
    // Judge0 hands the arguments to a shell; runbox splits them on spaces.
    let args: Vec<String> =
        command_line_arguments.as_deref().unwrap_or("").split_whitespace().map(str::to_owned).collect();

    let job = Program {
        language: Some(language.language),
        code: Some(source_code.clone()),
        stdin: stdin.clone(),
        timeout_ms: Some(timeout_ms),
        // A lower memory limit becomes the job's own cap; the workers' holds otherwise.
        memory_mb: (memory_limit < limits.memory_kb).then(|| memory_limit.div_ceil(1024)),
        args: Some(args),
        expected_stdout: expected_output.clone(),
        compare: expected_output.is_some().then_some(Compare::Trim),
        ..Program::default()
    };
    let flag = |name: &str| fields.get(name).and_then(Value::as_bool).unwrap_or(false);
    let note = Note {
        api: "judge0".into(),
        language_id: language.id,
        source_code,
        stdin,
        expected_output,
        command_line_arguments,
        cpu_time_limit,
        cpu_extra_time,
        wall_time_limit,
        memory_limit,
        stack_limit,
        max_processes_and_or_threads: max_processes,
        enable_per_process_and_thread_time_limit: flag("enable_per_process_and_thread_time_limit"),
        enable_per_process_and_thread_memory_limit: flag("enable_per_process_and_thread_memory_limit"),
        max_file_size,
        callback_url,
    };
    Ok((job, note))
}

/// A request body that must be one JSON object. Judge0 reads JSON whatever
/// the `Content-Type`, and so does this.
fn object(body: Result<Bytes, BytesRejection>) -> Result<Map<String, Value>, Judge0Error> {
    let body = body.map_err(|rejection| {
        Judge0Error::Api(ApiError::TooLarge {
            code: "payload_too_large",
            message: format!("request body rejected ({rejection})"),
        })
    })?;
    match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(fields)) => Ok(fields),
        Ok(_) => Err(Judge0Error::BadRequest("the body must be a JSON object".into())),
        Err(e) => Err(Judge0Error::BadRequest(format!("the body is not valid JSON: {e}"))),
    }
}

/// Translates, validates and queues one submission as a job; its token.
async fn submit(
    state: &AppState,
    caller: &Caller,
    fields: &Map<String, Value>,
    base64: bool,
    limits: Limits,
) -> Result<String, Judge0Error> {
    let (job, note) = translate(fields, base64, limits)?;
    let spec = job.validate(&state.config.limits).map_err(Judge0Error::from_spec)?;
    let callback_url = note.callback_url.clone();
    let callback =
        callback_urls::check_url(&state.config.callbacks, &caller.0, callback_url).await.map_err(|e| match e {
            ApiError::Field(error) => Judge0Error::field("callback_url", error.message),
            other => Judge0Error::Api(other),
        })?;
    let note = serde_json::to_string(&note).map_err(|e| ApiError::InvalidJson(e.to_string()))?;
    let token = enqueue(state, caller, &spec, None, None, callback.as_deref(), Some(&note)).await?.id;
    Ok(token)
}

/// A job as a Judge0 submission, with the fields the request asked for.
fn render(record: &JobRecord, options: &Options) -> Value {
    let note = record.compat.as_deref().and_then(Note::parse);
    pick(submission(record, note.as_ref(), options.base64), &options.fields)
}

/// `POST /submissions[?base64_encoded=true&wait=true&fields=...]`.
async fn create(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<HashMap<String, String>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Judge0Error> {
    let options = Options::parse(&query)?;
    let fields = object(body)?;
    let limits = Limits::of(&state).await?;
    let token = submit(&state, &caller, &fields, options.base64, limits).await?;
    if query.get("wait").is_none_or(|w| w != "true") {
        return Ok((StatusCode::CREATED, Json(json!({ "token": token }))).into_response());
    }
    // Judge0 holds the request until the run ends; runbox holds it at most
    // as long as a native long-poll, then shows the submission as it is.
    let record = owned(wait_for(&state, &token, Duration::from_secs(MAX_WAIT_S)).await?, &caller)?;
    Ok((StatusCode::CREATED, Json(render(&record, &options))).into_response())
}

/// `GET /submissions/{token}[?base64_encoded=true&fields=...]`.
async fn show(
    State(state): State<AppState>,
    caller: Caller,
    Path(token): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Value>, Judge0Error> {
    let options = Options::parse(&query)?;
    let record = owned(wait_for(&state, &token, Duration::ZERO).await?, &caller)?;
    Ok(Json(render(&record, &options)))
}

/// `POST /submissions/batch`: `{"submissions": [...]}`, each queued on its
/// own. The answer lists, in order, `{"token"}` or what was wrong with it.
async fn create_batch(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<HashMap<String, String>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Judge0Error> {
    let base64 = query.get("base64_encoded").is_some_and(|v| v == "true");
    let fields = object(body)?;
    let items = match fields.get("submissions") {
        Some(Value::Array(items)) => items.as_slice(),
        _ => &[],
    };
    check_batch_size(items.len())?;
    let limits = Limits::of(&state).await?;
    let mut answers = Vec::with_capacity(items.len());
    for item in items {
        let answer = match item {
            Value::Object(fields) => submit(&state, &caller, fields, base64, limits).await,
            _ => Err(Judge0Error::field("base", "a submission must be a JSON object")),
        };
        answers.push(match answer {
            Ok(token) => json!({ "token": token }),
            Err(Judge0Error::Invalid(errors)) => json!(errors),
            // The ones before were queued, so their tokens must come back.
            Err(Judge0Error::Api(e)) => json!({ "error": e.to_string() }),
            Err(Judge0Error::BadRequest(message)) => json!({ "error": message }),
            Err(Judge0Error::NotFound(message)) => json!({ "error": message }),
        });
    }
    let any_queued = answers.iter().any(|a| a.get("token").is_some());
    let status = if any_queued { StatusCode::CREATED } else { StatusCode::UNPROCESSABLE_ENTITY };
    Ok((status, Json(Value::Array(answers))).into_response())
}

fn check_batch_size(n: usize) -> Result<(), Judge0Error> {
    if n > MAX_BATCH {
        return Err(Judge0Error::BadRequest(format!(
            "number of submissions in a batch should be less than or equal to {MAX_BATCH}"
        )));
    }
    if n == 0 {
        return Err(Judge0Error::BadRequest("there should be at least one submission in a batch".into()));
    }
    Ok(())
}

/// `GET /submissions/batch?tokens=a,b[&base64_encoded=true&fields=...]`: each
/// submission in the order asked, or null for one that is unknown (or
/// another token's).
async fn show_batch(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<HashMap<String, String>>,
    headers: axum::http::HeaderMap,
) -> Result<Json<Value>, Judge0Error> {
    let options = Options::parse(&query)?;
    let raw = headers.get("tokens").and_then(|v| v.to_str().ok()).or(query.get("tokens").map(String::as_str));
    let tokens: Vec<&str> = raw.unwrap_or("").split(',').map(str::trim).filter(|t| !t.is_empty()).collect();
    check_batch_size(tokens.len())?;
    let records =
        futures_util::future::try_join_all(tokens.iter().map(|t| wait_for(&state, t, Duration::ZERO))).await?;
    let submissions: Vec<Value> = records
        .into_iter()
        .map(|record| owned(record, &caller).map_or(Value::Null, |r| render(&r, &options)))
        .collect();
    Ok(Json(json!({ "submissions": submissions })))
}

async fn languages() -> Json<Value> {
    Json(LANGUAGES.iter().map(|l| json!({ "id": l.id, "name": l.name })).collect())
}

async fn all_languages() -> Json<Value> {
    Json(LANGUAGES.iter().map(|l| json!({ "id": l.id, "name": l.name, "is_archived": false })).collect())
}

async fn language(Path(id): Path<String>) -> Result<Json<Value>, Judge0Error> {
    let language = id.parse::<u64>().ok().and_then(language_by_id);
    language.map(|l| Json(l.detail())).ok_or(Judge0Error::NotFound("no language has that id"))
}

async fn statuses() -> Json<Value> {
    Json(Judge0Status::ALL.iter().map(|s| s.as_json()).collect())
}

async fn about() -> Json<Value> {
    Json(json!({
        "version": VERSION,
        "homepage": null,
        "source_code": null,
        "maintainer": "runbox: a Judge0-compatible API over runbox jobs (see its README)",
    }))
}

/// Judge0's configuration keys (every one the SDK's `Config` requires),
/// with what runbox does in their place.
async fn config_info(State(state): State<AppState>) -> Result<Json<Value>, Judge0Error> {
    let limits = Limits::of(&state).await?;
    Ok(Json(json!({
        "maintenance_mode": false,
        "enable_wait_result": true,
        "enable_compiler_options": false,
        "allowed_languages_for_compile_options": [],
        "enable_command_line_arguments": true,
        "enable_submission_delete": false,
        "enable_callbacks": true,
        "callbacks_max_tries": callback_urls::ATTEMPTS,
        "callbacks_timeout": callback_urls::ATTEMPT_TIMEOUT.as_secs_f64(),
        "enable_additional_files": false,
        "max_queue_size": state.config.limits.max_queue,
        "cpu_time_limit": limits.default_time,
        "max_cpu_time_limit": limits.max_time,
        "cpu_extra_time": CPU_EXTRA_TIME,
        "max_cpu_extra_time": MAX_CPU_EXTRA_TIME,
        "wall_time_limit": limits.default_time,
        "max_wall_time_limit": limits.max_time,
        "memory_limit": limits.memory_kb,
        "max_memory_limit": limits.memory_kb,
        "stack_limit": 64_000,
        "max_stack_limit": 128_000,
        "max_processes_and_or_threads": 60,
        "max_max_processes_and_or_threads": 120,
        "enable_per_process_and_thread_time_limit": false,
        "allow_enable_per_process_and_thread_time_limit": true,
        "enable_per_process_and_thread_memory_limit": false,
        "allow_enable_per_process_and_thread_memory_limit": true,
        "max_file_size": 1024,
        "max_max_file_size": 4096,
        "number_of_runs": 1,
        "max_number_of_runs": 1,
        "redirect_stderr_to_stdout": false,
        "max_extract_size": 0,
        "enable_batched_submissions": true,
        "max_submission_batch_size": MAX_BATCH,
        "submission_cache_duration": 0.0,
        "use_docs_as_homepage": false,
        "allow_enable_network": false,
        "enable_network": false,
    })))
}

/// Judge0 shows `lscpu` and `free`; runbox shows the api host's share of
/// them, and how many workers are live.
async fn system_info(State(state): State<AppState>) -> Result<Json<Value>, Judge0Error> {
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let meminfo = tokio::fs::read_to_string("/proc/meminfo").await.unwrap_or_default();
    let total_kb = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kb| kb.parse::<u64>().ok());
    let workers = crate::system::live_workers(&state).await?;
    Ok(Json(json!({
        "Architecture": std::env::consts::ARCH,
        "CPU(s)": cpus.to_string(),
        "Mem": total_kb.map(|kb| format!("{:.1}Gi", kb as f64 / 1024.0 / 1024.0)),
        "runbox workers": workers.len().to_string(),
    })))
}

#[cfg(test)]
mod tests {
    use runbox_common::{Outcome, Timings};

    use super::*;

    fn record(status: Status, exit_code: Option<i32>, signal: Option<i32>, verdict: Option<Verdict>) -> JobRecord {
        let outcome = status.is_final().then(|| Outcome {
            status,
            exit_code,
            signal,
            verdict,
            stdout: "out\n".into(),
            duration_ms: 1234,
            cpu_ms: Some(987),
            peak_memory_bytes: Some(10 * 1024 * 1024),
            ..Outcome::internal_error("")
        });
        JobRecord {
            id: "2be15091-dfcd-44ac-8f1a-96a0833a61e1".into(),
            owner: "alice".into(),
            language: Some(Language::Python),
            status,
            created_at: Some("2026-11-29T14:14:04.49Z".into()),
            started_at: None,
            finished_at: status.is_final().then(|| "2026-11-29T14:14:05Z".into()),
            worker: None,
            outcome,
            timings: Timings::default(),
            compat: None,
        }
    }

    #[test]
    fn every_runbox_status_maps_to_a_judge0_status() {
        let status = |r: JobRecord| Judge0Status::of(&r).0.id();
        assert_eq!(status(record(Status::Queued, None, None, None)), 1);
        assert_eq!(status(record(Status::Running, None, None, None)), 2);
        assert_eq!(status(record(Status::Completed, Some(0), None, None)), 3);
        assert_eq!(status(record(Status::Completed, Some(0), None, Some(Verdict::Accepted))), 3);
        assert_eq!(status(record(Status::Completed, Some(0), None, Some(Verdict::WrongAnswer))), 4);
        assert_eq!(status(record(Status::Timeout, None, None, Some(Verdict::Timeout))), 5);
        for (signal, id) in [(11, 7), (25, 8), (8, 9), (6, 10), (9, 12)] {
            assert_eq!(status(record(Status::Completed, None, Some(signal), None)), id, "signal {signal}");
        }
        assert_eq!(status(record(Status::Completed, Some(3), None, Some(Verdict::RuntimeError))), 11);
        let (memory, message) = Judge0Status::of(&record(Status::MemoryExceeded, None, None, None));
        assert_eq!(memory, Judge0Status::Other);
        assert!(message.is_some_and(|m| m.contains("Memory limit")));
        for status in [Status::Rejected, Status::Cancelled, Status::WorkerLost, Status::InternalError] {
            assert_eq!(Judge0Status::of(&record(status, None, None, None)).0, Judge0Status::InternalError);
        }
        let (_, nzec) = Judge0Status::of(&record(Status::Completed, Some(3), None, None));
        assert_eq!(nzec.as_deref(), Some("Exited with error status 3"));
        let descriptions: Vec<&str> = Judge0Status::ALL.iter().map(|s| s.description()).collect();
        assert_eq!(descriptions[11], "Runtime Error (Other)");
        assert_eq!(Judge0Status::ALL.iter().map(|s| s.id()).collect::<Vec<_>>(), (1..=14).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn errors_take_judge0s_shapes() {
        let response = Judge0Error::Api(ApiError::QueueFull).into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers().get("retry-after").map(|v| v.as_bytes()), Some(&b"1"[..]));
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 16).await.expect("body");
        let body: Value = serde_json::from_slice(&bytes).expect("json");
        assert!(body["error"].as_str().is_some_and(|m| m.contains("queue is full")), "{body}");
        let spec_error = FieldError::too_large("stdin", "stdin_too_large", "stdin is too large");
        match Judge0Error::from_spec(spec_error) {
            Judge0Error::Invalid(errors) => assert_eq!(errors["stdin"], ["stdin is too large"]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn base64_is_written_as_ruby_writes_it_and_read_leniently() {
        assert_eq!(encode64("hello"), "aGVsbG8=\n");
        let long = "x".repeat(100);
        let encoded = encode64(&long);
        assert!(encoded.lines().all(|line| line.len() <= 60));
        assert_eq!(encoded.lines().count(), 3);
        assert_eq!(decode64(&encoded).as_deref(), Ok(long.as_str()));
        assert_eq!(decode64("aGVs\nbG8").as_deref(), Ok("hello"));
        assert!(decode64("not base64!").is_err());
        assert!(decode64("/w==").is_err(), "0xff is not UTF-8");
    }

    #[test]
    fn fields_pick_defaults_all_or_some_and_refuse_unknown_names() {
        assert_eq!(requested_fields(None).ok(), Some(DEFAULT_FIELDS.to_vec()));
        assert_eq!(requested_fields(Some("*")).ok(), Some(FIELDS.to_vec()));
        assert_eq!(requested_fields(Some("status, stdout")).ok(), Some(vec!["stdout", "status"]));
        match requested_fields(Some("stdout,colour,size")) {
            Err(Judge0Error::BadRequest(message)) => assert_eq!(message, "invalid fields: [colour, size]"),
            other => panic!("{other:?}"),
        }
        let all = submission(&record(Status::Completed, Some(0), None, None), None, false);
        assert_eq!(all.len(), FIELDS.len());
        let picked = pick(all, &["stdout", "token", "time"]);
        assert_eq!(
            picked,
            json!({"stdout": "out\n", "token": "2be15091-dfcd-44ac-8f1a-96a0833a61e1", "time": "0.987"})
        );
        let fields = submission(&record(Status::Completed, Some(0), None, None), None, false);
        assert_eq!((&fields["wall_time"], &fields["memory"]), (&json!("1.234"), &json!(10240)));
    }

    #[test]
    fn output_is_base64_on_request_and_empty_output_is_null() {
        let mut r = record(Status::Completed, Some(0), None, None);
        let fields = submission(&r, None, true);
        assert_eq!(fields["stdout"], json!("b3V0Cg==\n"));
        assert_eq!(fields["stderr"], Value::Null);
        assert_eq!(fields["created_at"], json!("2026-11-29T14:14:04.490Z"));
        assert_eq!(fields["finished_at"], json!("2026-11-29T14:14:05.000Z"));
        assert_eq!(fields["status"], json!({"id": 3, "description": "Accepted"}));
        r.status = Status::Queued;
        r.outcome = None;
        assert_eq!(submission(&r, None, true)["time"], Value::Null);
        assert_eq!(timestamp(Some("2026-11-30T03:15:51.632385339Z")), json!("2026-11-30T03:15:51.632Z"));
    }

    fn limits() -> Limits {
        Limits { default_time: 10.0, max_time: 60.0, memory_kb: 262_144 }
    }

    fn translated(body: Value, base64: bool) -> Result<(Program, Note), Judge0Error> {
        let Value::Object(fields) = body else { panic!("an object") };
        translate(&fields, base64, limits())
    }

    #[test]
    fn a_submission_becomes_a_job_with_the_tighter_time_limit() {
        let (job, note) = translated(
            json!({"source_code": "cHJpbnQoMSk=", "language_id": "71", "stdin": "eA==", "expected_output": "MQ==",
                   "cpu_time_limit": 2, "wall_time_limit": 100, "command_line_arguments": " a  b ",
                   "memory_limit": 9_999_999}),
            true,
        )
        .expect("valid");
        assert_eq!(job.language, Some(Language::Python));
        assert_eq!(job.code.as_deref(), Some("print(1)"));
        assert_eq!(job.stdin.as_deref(), Some("x"));
        assert_eq!(job.expected_stdout.as_deref(), Some("1"));
        assert_eq!(job.compare, Some(Compare::Trim));
        assert_eq!(job.timeout_ms, Some(2000));
        assert_eq!(job.args, Some(vec!["a".to_owned(), "b".to_owned()]));
        assert_eq!(note.wall_time_limit, 60.0, "clamped to runbox's maximum");
        assert_eq!(note.memory_limit, 262_144, "clamped to the workers' cap");
        let (job, _) =
            translated(json!({"source_code": "1", "language_id": 63, "wall_time_limit": 1.5}), false).expect("valid");
        assert_eq!(job.timeout_ms, Some(1500));
        assert!(job.expected_stdout.is_none());
    }

    #[test]
    fn a_bad_submission_names_each_field() {
        let Err(Judge0Error::Invalid(errors)) = translated(
            json!({"language_id": 50, "source_code": " ", "cpu_time_limit": -1, "enable_network": true,
                   "number_of_runs": 3, "memory_limit": "lots"}),
            false,
        ) else {
            panic!("invalid")
        };
        let fields: Vec<&str> = errors.keys().map(String::as_str).collect();
        assert_eq!(
            fields,
            ["cpu_time_limit", "enable_network", "language_id", "memory_limit", "number_of_runs", "source_code"]
        );
        assert_eq!(errors["language_id"], ["language with id 50 doesn't exist"]);
        let Err(Judge0Error::Invalid(errors)) = translated(json!({"language_id": 71, "source_code": "%%"}), true)
        else {
            panic!("invalid")
        };
        assert_eq!(errors["source_code"], ["is not valid base64"]);
    }

    #[test]
    fn the_note_round_trips_and_marks_its_api() {
        let (_, note) = translated(json!({"source_code": "1", "language_id": 74}), false).expect("valid");
        let text = serde_json::to_string(&note).expect("serializes");
        assert_eq!(Note::parse(&text), Some(note));
        assert_eq!(Note::parse(r#"{"api":"other"}"#), None);
        let mut r = record(Status::Completed, Some(0), None, None);
        assert_eq!(callback_body(&r), None, "a native job has no Judge0 callback");
        r.compat = Some(text);
        let body: Value = serde_json::from_slice(&callback_body(&r).expect("a Judge0 job")).expect("json");
        let keys: Vec<&str> = body.as_object().expect("object").keys().map(String::as_str).collect();
        assert_eq!(keys.len(), DEFAULT_FIELDS.len());
        assert_eq!(body["stdout"], json!("b3V0Cg==\n"));
    }
}
