//! A Piston v2-compatible API: `POST /api/v2/execute` and
//! `GET /api/v2/runtimes`, mounted under `/piston/{token}` (or `/piston`
//! with a bearer token).
//!
//! Piston clients send no credentials and take only a server URL, so the
//! token travels in the path. It is compared in constant time like any
//! token, and [`redacted_path`] keeps it out of the request span and of
//! every error message; nothing else logs a path.
//!
//! An execution is a runbox job: the request is translated into native job
//! fields, validated, signed and queued by the same code as `POST /v1/jobs`,
//! and the request is held until the job is final (Piston answers
//! synchronously). The first file is the program, the others become the
//! job's input `files`. Bodies are read as JSON whatever their
//! `Content-Type`: the npm `piston-client` sends `text/plain`.

use std::borrow::Cow;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine;
use runbox_common::{FileEncoding, JobRecord, Language, Status};
use serde_json::{Map, Value, json};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::pipeline::{enqueue, owned, wait_for};
use crate::requests::{FileRequest, Program};
use crate::state::AppState;

/// Where the API is mounted; the segment after it is the token, unless it
/// is `api` (then a bearer header must carry the token).
pub const PREFIX: &str = "/piston/";

/// The versions runbox reports: Deno's for JavaScript and TypeScript (the
/// runtime pinned in `worker/runtime/package-lock.json`), and the CPython
/// that the pinned Pyodide is built from.
const DENO_VERSION: &str = "2.9.6";
const PYTHON_VERSION: &str = "3.13.2";

/// How long past its own timeout an execution may wait for a worker before
/// the request gives up on it.
const QUEUE_GRACE: Duration = Duration::from_secs(60);

/// One runtime as `GET /api/v2/runtimes` lists it.
pub struct Runtime {
    language: &'static str,
    version: &'static str,
    aliases: &'static [&'static str],
    runtime: &'static str,
    runs_as: Language,
}

const RUNTIMES: [Runtime; 3] = [
    Runtime {
        language: "javascript",
        version: DENO_VERSION,
        aliases: &["js", "deno", "deno-js", "node-javascript", "node-js"],
        runtime: "deno",
        runs_as: Language::Javascript,
    },
    Runtime {
        language: "typescript",
        version: DENO_VERSION,
        aliases: &["ts", "deno-ts", "node-ts", "tsc"],
        runtime: "deno",
        runs_as: Language::Typescript,
    },
    Runtime {
        language: "python",
        version: PYTHON_VERSION,
        aliases: &["py", "py3", "python3"],
        runtime: "pyodide",
        runs_as: Language::Python,
    },
];

/// The path as it may be logged or shown: the token segment of a Piston
/// path replaced by `***`.
pub fn redacted_path(path: &str) -> Cow<'_, str> {
    let Some(rest) = path.strip_prefix(PREFIX) else { return Cow::Borrowed(path) };
    let (segment, tail) = rest.split_once('/').map_or((rest, ""), |(s, t)| (s, t));
    if segment.is_empty() || segment == "api" {
        return Cow::Borrowed(path);
    }
    let slash = if rest.contains('/') { "/" } else { "" };
    Cow::Owned(format!("{PREFIX}***{slash}{tail}"))
}

/// Whether `selector` picks `version`: `*` or empty picks any; otherwise
/// each dotted part must match (`x` and `*` match any part), and a
/// selector with fewer parts picks every version that starts with them
/// (`3` and `3.13` pick 3.13.2). A leading `v`, `=`, `^` or `~` is ignored.
pub fn version_matches(selector: &str, version: &str) -> bool {
    let selector = selector.trim().trim_start_matches(['=', '^', '~', 'v']);
    if selector.is_empty() || selector == "*" || selector == "latest" {
        return true;
    }
    let wanted: Vec<&str> = selector.split('.').collect();
    let have: Vec<&str> = version.split('.').collect();
    wanted.len() <= have.len() && wanted.iter().zip(&have).all(|(w, h)| matches!(*w, "x" | "X" | "*") || w == h)
}

/// The runtime named `language` (or one of its aliases) at `version`.
fn runtime(language: &str, version: &str) -> Option<&'static Runtime> {
    RUNTIMES
        .iter()
        .find(|r| (r.language == language || r.aliases.contains(&language)) && version_matches(version, r.version))
}

/// Errors as Piston answers them: `{"message": ...}` with the native
/// status (400 for anything wrong with the request).
#[derive(Debug)]
pub enum PistonError {
    BadRequest(String),
    /// The job did not run to an end (Piston answers its own failures so).
    Failed(StatusCode, String),
    Api(ApiError),
}

impl From<ApiError> for PistonError {
    fn from(e: ApiError) -> Self {
        PistonError::Api(e)
    }
}

impl IntoResponse for PistonError {
    fn into_response(self) -> Response {
        match self {
            PistonError::BadRequest(message) => {
                (StatusCode::BAD_REQUEST, Json(json!({ "message": message }))).into_response()
            }
            PistonError::Failed(status, message) => (status, Json(json!({ "message": message }))).into_response(),
            PistonError::Api(e) => {
                let status = e.status_and_code().0;
                let message = e.to_string();
                let mut response = e.into_response();
                // Piston answers every problem with the request itself (a
                // field, a size) with 400; 401, 429 and 503 keep theirs.
                if status == StatusCode::PAYLOAD_TOO_LARGE {
                    *response.status_mut() = StatusCode::BAD_REQUEST;
                }
                *response.body_mut() = Body::from(json!({ "message": message }).to_string());
                response
            }
        }
    }
}

/// The Piston routes, under `/piston/{token}` and `/piston` (bearer).
pub fn router(state: &AppState) -> Router<AppState> {
    Router::new()
        .route("/piston/{token}/api/v2/runtimes", get(runtimes))
        .route("/piston/{token}/api/v2/execute", post(execute))
        .route("/piston/api/v2/runtimes", get(runtimes))
        .route("/piston/api/v2/execute", post(execute))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token))
}

/// The token comes from a bearer header if there is one, else from the path.
async fn require_token(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let from_path = request
        .uri()
        .path()
        .strip_prefix(PREFIX)
        .and_then(|rest| rest.split('/').next())
        .filter(|segment| *segment != "api")
        .map(str::to_owned);
    super::admit(&state, request, next, from_path, || PistonError::Api(ApiError::Unauthorized).into_response()).await
}

async fn runtimes() -> Json<Value> {
    Json(
        RUNTIMES
            .iter()
            .map(
                |r| json!({ "language": r.language, "version": r.version, "aliases": r.aliases, "runtime": r.runtime }),
            )
            .collect(),
    )
}

/// What an execute request becomes: a native program, and the runtime
/// to name in the answer.
pub fn translate(body: &Map<String, Value>, max_timeout_ms: u64) -> Result<(Program, &'static Runtime), PistonError> {
    let bad = |m: &str| PistonError::BadRequest(m.to_owned());
    let language =
        body.get("language").and_then(Value::as_str).ok_or_else(|| bad("language is required as a string"))?;
    let version = body.get("version").and_then(Value::as_str).ok_or_else(|| bad("version is required as a string"))?;
    let runtime = runtime(language, version)
        .ok_or_else(|| PistonError::BadRequest(format!("{language}-{version} runtime is unknown")))?;
    let files = match body.get("files") {
        Some(Value::Array(files)) if !files.is_empty() => files,
        _ => return Err(bad("files is required as an array")),
    };
    let mut code = None;
    let mut inputs = Vec::new();
    for (index, file) in files.iter().enumerate() {
        let content =
            file.get("content").and_then(Value::as_str).ok_or_else(|| bad("files.content is required as a string"))?;
        let encoding = file.get("encoding").and_then(Value::as_str).unwrap_or("utf8");
        let (content, encoding) = match encoding {
            "utf8" => (content.to_owned(), "utf8"),
            "base64" => (content.to_owned(), "base64"),
            "hex" => {
                let bytes = hex::decode(content).map_err(|_| bad("files.content is not valid hex"))?;
                (base64::engine::general_purpose::STANDARD.encode(bytes), "base64")
            }
            _ => return Err(bad("files.encoding must be one of utf8, base64 or hex")),
        };
        if index == 0 {
            // The entry point is the program itself: it must be text.
            let text = match encoding {
                "utf8" => content,
                _ => base64::engine::general_purpose::STANDARD
                    .decode(&content)
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok())
                    .ok_or_else(|| bad("the first file (the entry point) must decode to UTF-8 text"))?,
            };
            code = Some(text);
            continue;
        }
        let name = match file.get("name").and_then(Value::as_str) {
            Some(name) if !name.is_empty() => name.to_owned(),
            _ => format!("file{index}.code"),
        };
        let encoding = if encoding == "utf8" { FileEncoding::Utf8 } else { FileEncoding::Base64 };
        inputs.push(FileRequest { path: Some(name), content: Some(content), encoding: Some(encoding) });
    }
    let stdin = match body.get("stdin") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(bad("stdin must be a string")),
    };
    let args: Vec<String> = match body.get("args") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|a| match a {
                Value::String(s) => Ok(s.clone()),
                Value::Number(n) => Ok(n.to_string()),
                _ => Err(bad("args must be an array of strings")),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(bad("args must be an array of strings")),
    };
    // -1 (what piston-client sends) or nothing means the default; more than
    // runbox's maximum gets the maximum.
    let timeout_ms = match body.get("run_timeout") {
        None | Some(Value::Null) => None,
        Some(value) => match value.as_f64() {
            Some(ms) if ms < 0.0 => None,
            Some(ms) => Some((ms.round() as u64).clamp(1, max_timeout_ms)),
            None => return Err(bad("run_timeout must be a number")),
        },
    };
    let job = Program {
        language: Some(runtime.runs_as),
        code: Some(code.unwrap_or_default()),
        stdin: Some(stdin),
        args: Some(args),
        timeout_ms,
        files: (!inputs.is_empty()).then_some(inputs),
        ..Program::default()
    };
    Ok((job, runtime))
}

/// The name of signal `n`, as Piston reports it.
pub fn signal_name(n: i32) -> String {
    let name = match n {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        10 => "SIGUSR1",
        11 => "SIGSEGV",
        12 => "SIGUSR2",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        _ => return format!("SIG{n}"),
    };
    name.to_owned()
}

/// The `run` stage of a Piston answer. runbox keeps stdout and stderr
/// apart, so `output` is stdout followed by stderr, not their interleaving.
/// A job runbox killed (timeout, memory) reports SIGKILL, as Piston does.
pub fn run_stage(record: &JobRecord) -> Result<Value, PistonError> {
    let outcome = record.outcome.as_ref();
    let (signal, status, message) = match record.status {
        Status::Completed => match outcome.and_then(|o| o.signal) {
            Some(n) => (Some(signal_name(n)), Some("SG"), None),
            None if outcome.and_then(|o| o.exit_code) != Some(0) => (None, Some("RE"), None),
            None => (None, None, None),
        },
        Status::Timeout => (Some(signal_name(9)), Some("TO"), Some("Timeout: the wall-clock limit passed")),
        Status::MemoryExceeded => {
            (Some(signal_name(9)), Some("SG"), Some("Memory limit exceeded: the program hit the worker's memory cap"))
        }
        // Nothing ran to an end: Piston's own failures are 500s.
        other => {
            let detail = outcome.map(|o| o.stderr.clone()).filter(|s| !s.is_empty());
            let message = detail.unwrap_or_else(|| format!("the job ended as {other}"));
            return Err(PistonError::Failed(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("runbox could not run the program: {message}"),
            ));
        }
    };
    let stdout = outcome.map(|o| o.stdout.clone()).unwrap_or_default();
    let stderr = outcome.map(|o| o.stderr.clone()).unwrap_or_default();
    Ok(json!({
        "stdout": stdout,
        "stderr": stderr,
        "output": format!("{stdout}{stderr}"),
        "code": outcome.and_then(|o| o.exit_code),
        "signal": signal,
        "message": message,
        "status": status,
        "wall_time": outcome.map(|o| o.duration_ms),
        // Piston's run stage reports CPU time in ms and memory in bytes.
        "cpu_time": outcome.and_then(|o| o.cpu_ms),
        "memory": outcome.and_then(|o| o.peak_memory_bytes),
    }))
}

/// `POST /api/v2/execute`.
async fn execute(
    State(state): State<AppState>,
    caller: Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, PistonError> {
    let body = body.map_err(|rejection| {
        PistonError::Api(ApiError::TooLarge {
            code: "payload_too_large",
            message: format!("request body rejected ({rejection})"),
        })
    })?;
    let fields = match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(fields)) => fields,
        _ => return Err(PistonError::BadRequest("the body must be a JSON object".into())),
    };
    let (job, runtime) = translate(&fields, state.config.limits.timeouts.max_ms())?;
    let spec = job.validate(&state.config.limits).map_err(ApiError::Field)?;
    let id = enqueue(&state, &caller, &spec, None, None, None, None).await?.id;
    let timeout = Duration::from_millis(spec.timeout_ms.unwrap_or(state.config.limits.timeouts.default_ms()));
    let record = owned(wait_for(&state, &id, timeout + QUEUE_GRACE).await?, &caller)?;
    if !record.status.is_final() {
        // Piston has no job to come back to: end this one rather than leave
        // it to run for nobody.
        let _ = state.queue.cancel(&id, &runbox_common::now_rfc3339(), state.config.shared.result_ttl).await;
        return Err(PistonError::Failed(
            StatusCode::SERVICE_UNAVAILABLE,
            "the program did not get a worker in time; it was cancelled, retry later".into(),
        ));
    }
    Ok(Json(json!({
        "language": runtime.language,
        "version": runtime.version,
        "run": run_stage(&record)?,
    })))
}

#[cfg(test)]
mod tests {
    use runbox_common::{Outcome, Timings};

    use super::*;

    #[test]
    fn the_token_segment_is_redacted() {
        assert_eq!(redacted_path("/piston/s3cret-token/api/v2/execute"), "/piston/***/api/v2/execute");
        assert_eq!(redacted_path("/piston/s3cret-token"), "/piston/***");
        assert_eq!(redacted_path("/piston/api/v2/runtimes"), "/piston/api/v2/runtimes");
        assert_eq!(redacted_path("/v1/jobs/piston/x"), "/v1/jobs/piston/x");
        assert_eq!(redacted_path("/judge0/submissions"), "/judge0/submissions");
    }

    #[test]
    fn version_selectors_match_like_piston() {
        for (selector, matches) in
            [("*", true), ("", true), ("3.13.2", true), ("3.13", true), ("3", true), ("3.x", true), ("^3.13.2", true)]
        {
            assert_eq!(version_matches(selector, "3.13.2"), matches, "{selector}");
        }
        for selector in ["3.12", "2", "3.13.2.1", "3.13.20", "4.x"] {
            assert!(!version_matches(selector, "3.13.2"), "{selector}");
        }
        assert_eq!(runtime("py", "*").map(|r| r.language), Some("python"));
        assert_eq!(runtime("deno-ts", DENO_VERSION).map(|r| r.language), Some("typescript"));
        assert!(runtime("ruby", "*").is_none());
    }

    #[test]
    fn the_javascript_version_is_the_pinned_deno() {
        let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../worker/runtime/package-lock.json"))
            .expect("the runtime's lock file");
        let lock: Value = serde_json::from_str(&lock).expect("json");
        assert_eq!(lock["packages"]["node_modules/deno"]["version"], json!(DENO_VERSION));
    }

    fn body(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(fields) => fields,
            _ => panic!("an object"),
        }
    }

    #[test]
    fn a_request_becomes_a_job_with_its_other_files() {
        let (job, runtime) = translate(
            &body(json!({"language": "js", "version": "*", "stdin": "in", "args": ["1", 2], "run_timeout": 999_999,
                         "files": [{"name": "main.js", "content": "console.log(1)"},
                                   {"name": "a.bin", "content": "00ff", "encoding": "hex"},
                                   {"content": "text"}]})),
            60_000,
        )
        .expect("valid");
        assert_eq!(runtime.language, "javascript");
        assert_eq!(job.code.as_deref(), Some("console.log(1)"));
        assert_eq!(job.args, Some(vec!["1".to_owned(), "2".to_owned()]));
        assert_eq!(job.timeout_ms, Some(60_000), "clamped to the maximum");
        let file = |path: &str, content: &str, encoding| FileRequest {
            path: Some(path.into()),
            content: Some(content.into()),
            encoding: Some(encoding),
        };
        assert_eq!(
            job.files,
            Some(vec![file("a.bin", "AP8=", FileEncoding::Base64), file("file2.code", "text", FileEncoding::Utf8)])
        );
        let (job, _) = translate(
            &body(json!({"language": "python", "version": "3", "run_timeout": -1, "files": [{"content": "cHJpbnQoMSk=", "encoding": "base64"}]})),
            60_000,
        )
        .expect("valid");
        assert_eq!(job.code.as_deref(), Some("print(1)"));
        assert!(job.timeout_ms.is_none(), "-1 is the default");
    }

    #[test]
    fn bad_requests_get_pistons_messages() {
        let message = |value: Value| match translate(&body(value), 60_000) {
            Err(PistonError::BadRequest(message)) => message,
            other => panic!("{:?}", other.map(|(job, _)| job)),
        };
        assert_eq!(message(json!({"version": "*"})), "language is required as a string");
        assert_eq!(message(json!({"language": "python"})), "version is required as a string");
        assert_eq!(message(json!({"language": "python", "version": "9"})), "python-9 runtime is unknown");
        assert_eq!(
            message(json!({"language": "python", "version": "*", "files": []})),
            "files is required as an array"
        );
        assert_eq!(
            message(json!({"language": "python", "version": "*", "files": [{"content": "x", "encoding": "rot13"}]})),
            "files.encoding must be one of utf8, base64 or hex"
        );
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
            worker: None,
            outcome: Some(Outcome {
                status,
                exit_code,
                signal,
                stdout: "o\n".into(),
                stderr: "e\n".into(),
                ..Outcome::internal_error("")
            }),
            timings: Timings::default(),
            compat: None,
        }
    }

    async fn answer(error: PistonError) -> (StatusCode, Value) {
        let response = error.into_response();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 16).await.expect("body");
        (status, serde_json::from_slice(&bytes).expect("json"))
    }

    #[tokio::test]
    async fn errors_take_pistons_shape_and_keep_auth_and_retry_statuses() {
        let too_large = ApiError::TooLarge { code: "code_too_large", message: "code is too large".into() };
        assert_eq!(answer(too_large.into()).await, (StatusCode::BAD_REQUEST, json!({"message": "code is too large"})));
        let (status, body) = answer(ApiError::Unauthorized.into()).await;
        assert_eq!((status, body["message"].is_string()), (StatusCode::UNAUTHORIZED, true));
        assert_eq!(answer(ApiError::QueueFull.into()).await.0, StatusCode::SERVICE_UNAVAILABLE);
    }

    #[test]
    fn kills_report_sigkill_and_output_is_stdout_then_stderr() {
        let run = |status, code, signal| run_stage(&record(status, code, signal)).expect("ran");
        let ok = run(Status::Completed, Some(0), None);
        assert_eq!(
            (ok["code"].clone(), ok["signal"].clone(), ok["output"].clone()),
            (json!(0), Value::Null, json!("o\ne\n"))
        );
        assert_eq!(run(Status::Timeout, None, None)["signal"], json!("SIGKILL"));
        assert_eq!(run(Status::MemoryExceeded, None, None)["signal"], json!("SIGKILL"));
        assert_eq!(run(Status::Completed, None, Some(11))["signal"], json!("SIGSEGV"));
        assert_eq!(run(Status::Completed, Some(2), None)["status"], json!("RE"));
        assert!(matches!(
            run_stage(&record(Status::WorkerLost, None, None)),
            Err(PistonError::Failed(StatusCode::INTERNAL_SERVER_ERROR, _))
        ));
    }
}
