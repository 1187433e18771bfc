//! `GET /openapi.json`: the native API described from the code itself.
//!
//! Responses are the types the handlers serialize (`JobView`,
//! `SessionView`, ...), deriving their schemas. Request bodies are parsed by
//! hand in `validate` (to name what is wrong), so each has a schema struct
//! here that mirrors what is accepted; a test checks that their fields are
//! exactly the fields the parsers accept. The limits a deployment
//! configures (timeouts, idle timeouts) are written into the document when
//! it is served, so it describes the api answering it.
//!
//! Left out: `/mcp` (described by MCP itself), the Judge0- and
//! Piston-compatible APIs (described by those projects), and `/`, the
//! page for people (HTML, which calls the routes described here).

use axum::Json;
use axum::extract::State;
use runbox_common::{
    CheckpointInfo, Compare, FileEncoding, Language, OutputFile, RuntimeLimits, Runtimes, SessionStatus, Status,
    Timings, Verdict, WorkerInfo,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

use crate::AppState;
use crate::batches::{BatchStatus, BatchView};
use crate::error::BatchItemError;
use crate::jobs::JobView;
use crate::sessions::{ExecSession, ExecView, SessionView};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "runbox",
        description = "Runs untrusted Python, JavaScript and TypeScript in a sandbox. Every route under /v1 \
                       (and /metrics) needs `Authorization: Bearer <token>`. Every error is \
                       `{\"error\": {\"code\", \"message\"}}`.",
    ),
    paths(
        crate::jobs::submit,
        crate::jobs::get,
        crate::jobs::cancel,
        crate::events::stream,
        crate::batches::submit,
        crate::batches::get,
        crate::batches::cancel,
        crate::batches::results,
        crate::sessions::create,
        crate::sessions::list,
        crate::sessions::get,
        crate::sessions::destroy,
        crate::sessions::exec,
        crate::sessions::checkpoint,
        crate::sessions::fork,
        crate::runtimes,
        crate::metrics,
        crate::healthz,
        crate::readyz,
        serve,
    ),
    components(schemas(
        JobRequest, BatchJobRequest, FileRequest, FilePath, ReturnFilesRequest, LanguageName, SessionLanguage, BatchRequest,
        JobsBatch, CasesBatch, CaseRequest, LiveEvent, LiveEventName, SessionRequest, ExecRequest, JobView, Accepted, BatchAccepted, BatchView, BatchStatus, SessionView, SessionList, ExecView,
        ExecSession, Runtimes, RuntimeLimits, Health, ErrorBody, ErrorDetail, BatchItemError, Language, Status,
        Verdict, Compare, FileEncoding, OutputFile, Timings, CheckpointInfo, SessionStatus, WorkerInfo,
    )),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
    tags(
        (name = "jobs", description = "One program, run once."),
        (name = "batches", description = "Many jobs submitted, read and cancelled as one."),
        (name = "sessions", description = "An interpreter whose state lasts across execs."),
        (name = "service", description = "What the service runs, and whether it is up."),
    ),
)]
pub struct ApiDoc;

/// The `bearer` security scheme every `/v1` route names.
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some("One of the tokens in RUNBOX_API_TOKENS."))
            .build();
        components.add_security_scheme("bearer", SecurityScheme::Http(scheme));
    }
}

/// The document as this api serves it: the configured limits filled in,
/// and the rules between fields that the derived schemas cannot state.
pub fn document(state: &AppState) -> Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
    let schemas = &mut doc["components"]["schemas"];
    let max_timeout = state.config.limits.timeouts.max_ms();
    for name in ["JobRequest", "BatchJobRequest", "ExecRequest"] {
        schemas[name]["properties"]["timeout_ms"]["maximum"] = json!(max_timeout);
    }
    for name in ["JobRequest", "BatchJobRequest"] {
        schemas[name]["properties"]["memory_mb"]["maximum"] = json!(crate::validate::MAX_MEMORY_MB);
    }
    schemas["SessionRequest"]["properties"]["idle_timeout_s"]["maximum"] =
        json!(state.config.sessions.max_idle.as_secs());
    add_cross_field_rules(schemas);
    doc
}

/// What `validate` checks across fields, as JSON Schema conditions.
fn add_cross_field_rules(schemas: &mut Value) {
    let job_rules = json!([
        // Only a Python program can write files to return.
        {
            "if": { "properties": { "language": { "enum": ["javascript", "typescript", "js", "ts"] } } },
            "then": { "properties": { "return_files": { "enum": [false, null] } } }
        },
        // `trim` compares with something.
        {
            "if": { "properties": { "compare": { "const": "trim" } }, "required": ["compare"] },
            "then": { "properties": { "expected_stdout": { "type": "string" } }, "required": ["expected_stdout"] }
        }
    ]);
    for name in ["JobRequest", "BatchJobRequest"] {
        schemas[name]["allOf"] = job_rules.clone();
    }
    // Base64 content decodes: whole groups, canonical padding.
    schemas["FileRequest"]["allOf"] = json!([{
        "if": { "properties": { "encoding": { "const": "base64" } }, "required": ["encoding"] },
        "then": { "properties": { "content": { "pattern": BASE64 } } }
    }]);
    // A session names its language, or the checkpoint it starts from.
    schemas["SessionRequest"]["anyOf"] = json!([
        { "properties": { "language": { "type": "string" } }, "required": ["language"] },
        { "properties": { "from_checkpoint": { "type": "string" } }, "required": ["from_checkpoint"] }
    ]);
}

/// Standard base64 as the decoder accepts it: padded, with zero bits after
/// the last symbol.
const BASE64: &str = "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$";

/// The OpenAPI 3.1 document of the native API.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "service",
    security(()),
    responses((status = 200, description = "This document.", content_type = "application/json", body = Object)),
)]
pub async fn serve(State(state): State<AppState>) -> Json<Value> {
    Json(document(&state))
}

/// A language name: the full names, or their aliases py, js, ts.
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum LanguageName {
    Python,
    Javascript,
    Typescript,
    Py,
    Js,
    Ts,
}

/// The languages a session runs (TypeScript runs as jobs only): the full
/// names or their aliases.
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum SessionLanguage {
    Python,
    Javascript,
    Py,
    Js,
}

/// The body of `POST /v1/jobs`, as `validate::job_spec_fields` and
/// `callbacks::check_url` accept it. Limits on sizes are in bytes and
/// configurable; `GET /v1/runtimes` lists them.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct JobRequest {
    language: LanguageName,
    /// The program; not empty or only whitespace. At most `max_code_bytes`.
    #[schema(min_length = 1, pattern = r"\S")]
    code: String,
    /// Fed to stdin, then EOF. At most `max_stdin_bytes`.
    stdin: Option<String>,
    /// Wall-clock limit; the configured default when absent.
    #[schema(minimum = 1)]
    timeout_ms: Option<u64>,
    /// A memory cap in MiB for this job, below the worker's: it lowers the
    /// cap, never raises it.
    #[schema(minimum = 1)]
    memory_mb: Option<u32>,
    /// Command-line arguments: `Deno.args`, or `sys.argv[1:]`; at most 256
    /// strings of 64 KiB in all.
    #[schema(max_items = 256)]
    args: Option<Vec<String>>,
    /// What stdout should be; the result then has a `verdict`. At most
    /// `max_stdin_bytes`.
    expected_stdout: Option<String>,
    /// How stdout is compared with `expected_stdout`; `trim` needs it.
    compare: Option<Compare>,
    /// Files put in the working directory; distinct paths, neither inside
    /// another, at most `max_files_bytes` decoded in all.
    #[schema(max_items = 64)]
    files: Option<Vec<FileRequest>>,
    /// Python only: `true` for every file the program created or changed,
    /// or up to 64 distinct paths.
    return_files: Option<ReturnFilesRequest>,
    /// An http(s) URL to POST the finished job to, signed; its host must
    /// resolve to public addresses (or ones RUNBOX_CALLBACK_ALLOW allows).
    #[schema(format = "uri")]
    callback_url: Option<String>,
    /// Where the job runs. Absent: Python in one of the caller's long-lived
    /// children, which other jobs of the caller's ran in before, each in a
    /// fresh interpreter (never another token's); JavaScript and TypeScript
    /// in a fresh child. `false`: a fresh child of its own. `true`: the
    /// caller's long-lived children in any language (a JavaScript or
    /// TypeScript job with `stdin`, `files` or `return_files` still gets a
    /// fresh child).
    shared_runtime: Option<bool>,
}

/// One job of a batch (or its `program`): a job without `callback_url` or
/// `shared_runtime`, which belong on the batch.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct BatchJobRequest {
    language: LanguageName,
    /// The program; not empty or only whitespace. At most `max_code_bytes`.
    #[schema(min_length = 1, pattern = r"\S")]
    code: String,
    /// Fed to stdin, then EOF. At most `max_stdin_bytes`.
    stdin: Option<String>,
    /// Wall-clock limit; the configured default when absent.
    #[schema(minimum = 1)]
    timeout_ms: Option<u64>,
    /// A memory cap in MiB for this job, below the worker's: it lowers the
    /// cap, never raises it.
    #[schema(minimum = 1)]
    memory_mb: Option<u32>,
    /// Command-line arguments: `Deno.args`, or `sys.argv[1:]`; at most 256
    /// strings of 64 KiB in all.
    #[schema(max_items = 256)]
    args: Option<Vec<String>>,
    /// What stdout should be; the result then has a `verdict`. At most
    /// `max_stdin_bytes`.
    expected_stdout: Option<String>,
    /// How stdout is compared with `expected_stdout`; `trim` needs it.
    compare: Option<Compare>,
    /// Files put in the working directory; distinct paths, neither inside
    /// another, at most `max_files_bytes` decoded in all.
    #[schema(max_items = 64)]
    files: Option<Vec<FileRequest>>,
    /// Python only: `true` for every file the program created or changed,
    /// or up to 64 distinct paths.
    return_files: Option<ReturnFilesRequest>,
}

/// A file given to the program.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct FileRequest {
    path: FilePath,
    /// The text, or standard base64 of the bytes.
    content: String,
    encoding: Option<FileEncoding>,
}

/// A path relative to the working directory: plain names separated by
/// `/`, no `.` or `..` parts, no control characters or `\`; at most 255 bytes.
#[derive(Deserialize, ToSchema)]
#[schema(
    min_length = 1,
    max_length = 255,
    pattern = r"^(?:(?!\.\.?(?:/|$))[^/\\\x00-\x1f\x7f-\x9f]+/)*(?!\.\.?$)[^/\\\x00-\x1f\x7f-\x9f]+$"
)]
#[allow(dead_code)]
pub struct FilePath(String);

/// Which written files the result carries back.
#[derive(Deserialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum ReturnFilesRequest {
    /// `true`: every file created or changed; `false`: none.
    All(bool),
    /// These paths, at most 64.
    Paths(Vec<FilePath>),
}

/// The body of `POST /v1/batches`: `jobs`, or one `program` and its
/// `cases`. Each job is validated as `POST /v1/jobs` validates it; if any is
/// invalid, nothing is queued.
#[derive(Deserialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum BatchRequest {
    Jobs(JobsBatch),
    Cases(CasesBatch),
}

/// A batch of jobs given one by one.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct JobsBatch {
    /// 1 to `max_batch` jobs.
    #[schema(min_items = 1)]
    jobs: Vec<BatchJobRequest>,
    /// Cancel the jobs still queued once one fails.
    stop_on_first_failure: Option<bool>,
    /// Where the jobs run, as a job's `shared_runtime` says: absent, Python
    /// jobs in the caller's long-lived children and the others in fresh
    /// children; `true`, every job in the caller's long-lived children;
    /// `false`, every job in a fresh child of its own.
    shared_runtime: Option<bool>,
    /// Where to POST the finished batch, signed; as a job's `callback_url`.
    #[schema(format = "uri")]
    callback_url: Option<String>,
}

/// A batch of test cases: one program run once per case.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct CasesBatch {
    /// The job every case runs; each case replaces its stdin, args and
    /// expected_stdout.
    program: BatchJobRequest,
    /// 1 to `max_batch` cases.
    #[schema(min_items = 1)]
    cases: Vec<CaseRequest>,
    stop_on_first_failure: Option<bool>,
    /// The caller's long-lived children for every case, in any language:
    /// the default here (`true`). `false`: a fresh child per case.
    shared_runtime: Option<bool>,
    #[schema(format = "uri")]
    callback_url: Option<String>,
}

/// One test case: the program's input and what it should print.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct CaseRequest {
    stdin: Option<String>,
    args: Option<Vec<String>>,
    expected_stdout: Option<String>,
}

/// The body of `POST /v1/sessions`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct SessionRequest {
    /// Required unless `from_checkpoint` is given, and then it must match
    /// the checkpoint's.
    language: Option<SessionLanguage>,
    /// Seconds without an exec before the session expires.
    #[schema(minimum = 1)]
    idle_timeout_s: Option<u64>,
    /// Start from this checkpoint of one of the caller's sessions.
    from_checkpoint: Option<String>,
}

/// The body of `POST /v1/sessions/{id}/exec`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct ExecRequest {
    #[schema(min_length = 1, pattern = r"\S")]
    code: String,
    /// Python sessions only.
    stdin: Option<String>,
    #[schema(minimum = 1)]
    timeout_ms: Option<u64>,
}

/// One Server-Sent Event of `GET /v1/jobs/{id}/events` (and of a session
/// exec asked for with `Accept: text/event-stream`): its name and its data.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct LiveEvent {
    event: LiveEventName,
    /// JSON: `{"offset", "data"}` for a chunk of `stdout` or `stderr`, `{}`
    /// for `restart`, the job object for `result`, `{"error", "message"}`
    /// for `error`.
    data: String,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum LiveEventName {
    Stdout,
    Stderr,
    Restart,
    Result,
    Error,
}

/// A job (or session exec) still running: poll `GET /v1/jobs/{id}`.
#[derive(Serialize, ToSchema)]
pub struct Accepted {
    pub id: String,
    pub status: Status,
}

/// A queued batch and its jobs, in order.
#[derive(Serialize, ToSchema)]
pub struct BatchAccepted {
    pub id: String,
    pub job_ids: Vec<String>,
}

/// The caller's live sessions.
#[derive(Serialize, ToSchema)]
pub struct SessionList {
    pub sessions: Vec<SessionView>,
}

/// `/healthz` and `/readyz`.
#[derive(Serialize, ToSchema)]
pub struct Health {
    /// `ok`, `ready`, or why not ready.
    pub status: String,
}

/// Every error: what went wrong, and what to do about it.
#[derive(Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Serialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable snake_case code, e.g. `invalid_field`, `not_found`, `queue_full`.
    pub code: String,
    /// What to fix, for a person.
    pub message: String,
    /// With `invalid_batch`: each invalid job, by index.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jobs: Option<Vec<BatchItemError>>,
}

#[cfg(test)]
mod tests {
    use utoipa::openapi::{RefOr, Schema};

    use super::*;

    /// The property names of component schema `name`.
    fn properties(name: &str) -> Vec<String> {
        let doc = ApiDoc::openapi();
        let schemas = doc.components.expect("components").schemas;
        let Some(RefOr::T(Schema::Object(object))) = schemas.get(name) else {
            panic!("{name} is not an object schema");
        };
        let mut names: Vec<String> = object.properties.keys().cloned().collect();
        names.sort();
        names
    }

    fn sorted(fields: &[&str]) -> Vec<String> {
        let mut names: Vec<String> = fields.iter().map(|f| (*f).to_owned()).collect();
        names.sort();
        names
    }

    #[test]
    fn documented_request_fields_are_the_accepted_ones() {
        assert_eq!(properties("JobRequest"), sorted(crate::validate::FIELDS));
        assert_eq!(properties("FileRequest"), sorted(crate::validate::FILE_FIELDS));
        let in_batch: Vec<&str> =
            crate::validate::FIELDS.iter().copied().filter(|f| !crate::batches::BATCH_ONLY.contains(f)).collect();
        assert_eq!(properties("BatchJobRequest"), sorted(&in_batch));
        let mut batch = properties("JobsBatch");
        batch.extend(properties("CasesBatch"));
        batch.sort();
        batch.dedup();
        assert_eq!(batch, sorted(crate::batches::FIELDS));
        assert_eq!(properties("CaseRequest"), sorted(crate::batches::CASE_FIELDS));
        assert_eq!(properties("SessionRequest"), sorted(crate::sessions::CREATE_FIELDS));
        assert_eq!(properties("ExecRequest"), sorted(crate::sessions::EXEC_FIELDS));
    }

    #[test]
    fn documented_limits_are_the_enforced_ones() {
        let doc = serde_json::to_value(ApiDoc::openapi()).expect("serializes");
        let wait = &doc["paths"]["/v1/jobs/{id}"]["get"]["parameters"][1];
        assert_eq!(wait["name"], "wait");
        assert_eq!(wait["schema"]["maximum"], crate::config::MAX_WAIT_S);
        let limit = &doc["paths"]["/v1/batches/{id}"]["get"]["parameters"];
        let limit = limit.as_array().expect("parameters").iter().find(|p| p["name"] == "limit").expect("limit");
        assert_eq!(limit["schema"]["maximum"], crate::batches::MAX_PAGE);
        let offset = &doc["paths"]["/v1/batches/{id}"]["get"]["parameters"];
        let offset = offset.as_array().expect("parameters").iter().find(|p| p["name"] == "offset").expect("offset");
        assert_eq!(offset["schema"]["maximum"], crate::batches::MAX_OFFSET);
    }

    #[test]
    fn documented_language_names_are_the_accepted_ones() {
        let doc = serde_json::to_value(ApiDoc::openapi()).expect("serializes");
        let names = doc["components"]["schemas"]["LanguageName"]["enum"].as_array().expect("an enum").clone();
        for name in &names {
            let name = name.as_str().expect("a string");
            assert!(name.parse::<Language>().is_ok(), "{name} is documented but refused");
        }
        for language in Language::ALL {
            assert!(names.iter().any(|n| n == language.as_str()), "{language} is accepted but not documented");
        }
    }

    #[test]
    fn every_route_but_the_open_ones_needs_the_bearer_token() {
        let doc = serde_json::to_value(ApiDoc::openapi()).expect("serializes");
        assert_eq!(doc["components"]["securitySchemes"]["bearer"]["scheme"], "bearer");
        assert_eq!(doc["security"], serde_json::json!([{ "bearer": [] }]));
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for (method, operation) in item.as_object().expect("operations") {
                let open = ["/healthz", "/readyz", "/openapi.json"].contains(&path.as_str());
                assert_eq!(operation.get("security").is_some(), open, "{method} {path}");
            }
        }
    }
}
