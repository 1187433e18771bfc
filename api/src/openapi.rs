//! `GET /openapi.json`: the native API described from the code itself.
//!
//! Responses are the types the handlers serialize (`JobView`,
//! `SessionView`, ...), and request bodies the types that parse them
//! (`requests`), each deriving its schema. Bounds come from the constants
//! the validators enforce, and the limits a deployment configures
//! (timeouts, idle timeouts) are written into the document when it is
//! served, so it describes the api answering it.
//!
//! Left out: `/mcp` (described by MCP itself), the Judge0- and
//! Piston-compatible APIs (described by those projects), and `/`, the
//! page for people (HTML, which calls the routes described here).

use axum::Json;
use axum::extract::State;
use runbox_common::{
    CheckpointInfo, Compare, EgressGrant, FileEncoding, HostTraffic, Language, OutputFile, RuntimeLimits, Runtimes,
    SecretGrant, SessionStatus, Status, Timings, Verdict, WorkerInfo,
};
use serde_json::{Value, json};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::state::AppState;

use crate::config::{ApiLimits, SessionLimits};
use crate::error::BatchItemError;

use crate::requests::{
    self, BatchRequest, CaseRequest, CasesBatch, ExecRequest, FilePath, FileRequest, JobRequest, JobsBatch,
    LanguageName, Program, ReturnFilesRequest, SessionLanguage, SessionRequest,
};
use crate::views::{
    Accepted, BatchAccepted, BatchStatus, BatchView, ErrorBody, ErrorDetail, ExecSession, ExecView, Health, JobView,
    LiveEvent, LiveEventName, SessionList, SessionView,
};

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
        crate::files::put,
        crate::files::get,
        crate::files::delete,
        crate::files::list,
        crate::system::runtimes,
        crate::system::metrics,
        crate::system::healthz,
        crate::system::readyz,
        serve,
    ),
    components(schemas(
        JobRequest, Program, FileRequest, FilePath, ReturnFilesRequest, LanguageName, SessionLanguage, BatchRequest,
        JobsBatch, CasesBatch, CaseRequest, LiveEvent, LiveEventName, SessionRequest, ExecRequest, JobView, Accepted, BatchAccepted, BatchView, BatchStatus, SessionView, SessionList, ExecView,
        ExecSession, Runtimes, RuntimeLimits, Health, ErrorBody, ErrorDetail, BatchItemError, Language, Status,
        Verdict, Compare, FileEncoding, OutputFile, Timings, CheckpointInfo, SessionStatus, WorkerInfo, HostTraffic,
        EgressGrant, SecretGrant, crate::files::FileWritten, crate::files::FileListing, crate::files::FileBytes, runbox_common::FileEntry,
        runbox_common::FileType,
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
    document_for(&state.config.limits, &state.config.sessions)
}

/// The document for an api with these limits.
fn document_for(limits: &ApiLimits, sessions: &SessionLimits) -> Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
    let schemas = &mut doc["components"]["schemas"];
    let max_timeout = limits.timeouts.max_ms();
    for name in ["JobRequest", "BatchJobRequest", "ExecRequest"] {
        schemas[name]["properties"]["timeout_ms"]["maximum"] = json!(max_timeout);
    }
    for name in ["JobRequest", "BatchJobRequest"] {
        let properties = &mut schemas[name]["properties"];
        properties["memory_mb"]["maximum"] = json!(requests::MAX_MEMORY_MB);
        properties["args"]["maxItems"] = json!(requests::MAX_ARGS);
    }
    for name in ["JobRequest", "BatchJobRequest", "ExecRequest"] {
        schemas[name]["properties"]["files"]["maxItems"] = json!(requests::MAX_FILES);
    }
    // The array branch of `return_files` (its other branch is a boolean).
    schemas["ReturnFilesRequest"]["oneOf"][1]["maxItems"] = json!(runbox_common::MAX_RETURN_FILES);
    schemas["CaseRequest"]["properties"]["args"]["maxItems"] = json!(requests::MAX_ARGS);
    schemas["JobsBatch"]["properties"]["jobs"]["maxItems"] = json!(limits.max_batch);
    schemas["CasesBatch"]["properties"]["cases"]["maxItems"] = json!(limits.max_batch);
    schemas["SessionRequest"]["properties"]["idle_timeout_s"]["maximum"] = json!(sessions.max_idle.as_secs());
    add_cross_field_rules(schemas);
    // An upload with no body is an empty file.
    doc["paths"]["/v1/sessions/{id}/files/{path}"]["put"]["requestBody"]["required"] = json!(false);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A body with every property component schema `name` documents, each
    /// null (absent, to the parser).
    fn every_property(doc: &Value, name: &str) -> Vec<u8> {
        let properties = doc["components"]["schemas"][name]["properties"].as_object().expect("properties");
        let body: serde_json::Map<String, Value> = properties.keys().map(|k| (k.clone(), Value::Null)).collect();
        assert!(!body.is_empty(), "{name} documents no properties");
        serde_json::to_vec(&body).expect("serializes")
    }

    #[test]
    fn every_documented_request_field_is_one_the_parser_takes() {
        // The document as served, with the bounds patched in by name: a
        // misspelt name there would document a field nothing accepts.
        let limits = ApiLimits::default();
        let doc = document_for(&limits, &SessionLimits::default());
        requests::parse::<JobRequest>(&every_property(&doc, "JobRequest")).expect("JobRequest");
        requests::parse::<Program>(&every_property(&doc, "BatchJobRequest")).expect("BatchJobRequest");
        requests::parse::<FileRequest>(&every_property(&doc, "FileRequest")).expect("FileRequest");
        requests::parse::<CaseRequest>(&every_property(&doc, "CaseRequest")).expect("CaseRequest");
        requests::parse::<SessionRequest>(&every_property(&doc, "SessionRequest")).expect("SessionRequest");
        requests::parse::<ExecRequest>(&every_property(&doc, "ExecRequest")).expect("ExecRequest");
        let job = &doc["components"]["schemas"]["JobRequest"]["properties"];
        assert_eq!(job["args"]["maxItems"], requests::MAX_ARGS);
        assert_eq!(job["files"]["maxItems"], requests::MAX_FILES);
        assert_eq!(job["memory_mb"]["maximum"], requests::MAX_MEMORY_MB);
        assert_eq!(job["timeout_ms"]["maximum"], limits.timeouts.max_ms());
        // Each patched bound sits on the schema of the value it bounds.
        let schemas = &doc["components"]["schemas"];
        let paths = &schemas["ReturnFilesRequest"]["oneOf"][1];
        assert_eq!((&paths["type"], &paths["maxItems"]), (&json!("array"), &json!(runbox_common::MAX_RETURN_FILES)));
        for (schema, list) in [("JobRequest", "args"), ("JobRequest", "files"), ("CaseRequest", "args")] {
            assert_eq!(schemas[schema]["properties"][list]["type"], json!(["array", "null"]), "{schema}.{list}");
        }
        for (schema, list) in [("JobsBatch", "jobs"), ("CasesBatch", "cases")] {
            let items = &schemas[schema]["properties"][list];
            assert_eq!((&items["type"], &items["maxItems"]), (&json!("array"), &json!(limits.max_batch)), "{schema}");
        }
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
