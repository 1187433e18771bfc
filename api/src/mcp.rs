//! `/mcp`: runbox as a Model Context Protocol server over Streamable HTTP.
//!
//! rmcp's `StreamableHttpService` speaks the protocol; this module only
//! adapts. A tool reads its arguments as a typed request, checks it as the
//! native route does (`Program::validate`), calls the same functions
//! (`pipeline::enqueue`, `pipeline::wait_for`, `sessions`),
//! and turns the job, or the [`ApiError`], into a tool result. Nothing here
//! runs, signs or queues a job any other way.
//!
//! # Stateless
//!
//! The service keeps no MCP session (`legacy_session_mode` off): every POST
//! is answered on its own. An `initialize` handshake is answered like any
//! request, without an `Mcp-Session-Id`, so clients of the handshake
//! revisions (2024-11-05 to 2025-11-25) work, and so do clients of the
//! 2026-07-28 revision, which has no handshake and carries the protocol
//! version on each request. Sessions would live in one api process's
//! memory, and the api runs as several replicas behind a load balancer; no
//! tool needs them, since every job lives in Redis. Answers are SSE
//! streams, so a long run is kept alive by keep-alive comments instead of
//! looking idle to a proxy.
//!
//! # Adding tools
//!
//! Each group of tools is one `#[tool_router(router = NAME)]` impl block on
//! [`McpServer`]; [`tools`] adds the groups together. A tool takes the
//! caller from the request with [`caller`] and maps errors with
//! [`tool_error`], so every tool reports bad input the same way.

use std::sync::Arc;
use std::time::Duration;

use axum::http::request::Parts;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::{Extension, schema_for_input, schema_for_output};
use rmcp::model::{
    CallToolResult, ContentBlock, JsonObject, ProgressNotificationParam, ProgressToken, RequestMetaObject,
};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, Peer, RoleServer, tool, tool_handler, tool_router};
use runbox_common::{EgressGrant, JobRecord, Status, UnknownLanguage, now_rfc3339};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::auth::Caller;
use crate::config::{ApiLimits, McpHosts};
use crate::error::ApiError;
use crate::files;
use crate::pipeline;
use crate::requests::{self, ExecRequest, FieldError, Program, SessionRequest};
use crate::sessions;
use crate::state::AppState;
use crate::views::SessionView;

/// How long a run may wait in the queue, on top of its own time limit,
/// before `run_code` gives up on it, cancels it and says to retry.
const QUEUE_PATIENCE: Duration = Duration::from_secs(60);

/// The `/mcp` service: stateless Streamable HTTP over the tools.
pub(crate) fn service(state: AppState) -> StreamableHttpService<McpServer, NeverSessionManager> {
    let tools = Arc::new(tools(&state.config.limits));
    let mut config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_max_request_body_bytes(state.config.limits.max_body_bytes());
    config = match &state.config.mcp_hosts {
        McpHosts::Only(hosts) => config.with_allowed_hosts(hosts.clone()),
        McpHosts::Any => config.disable_allowed_hosts(),
    };
    StreamableHttpService::new(
        move || Ok(McpServer { state: state.clone(), tools: tools.clone() }),
        Arc::new(NeverSessionManager::default()),
        config,
    )
}

/// Every tool `/mcp` offers.
fn tools(limits: &ApiLimits) -> ToolRouter<McpServer> {
    // One router per group of tools: one-off jobs, and sessions.
    let mut tools = McpServer::job_tools() + McpServer::session_tools();
    // The description names the limits in force, which are configuration,
    // so it is written here rather than in the `#[tool]` attribute.
    if let Some(route) = tools.map.get_mut("run_code") {
        route.attr.description = Some(run_code_description(limits).into());
    }
    tools
}

/// One MCP request's view of the api. The service makes one per request,
/// so it holds only shared handles.
#[derive(Clone)]
pub(crate) struct McpServer {
    state: AppState,
    tools: Arc<ToolRouter<McpServer>>,
}

#[tool_handler(
    router = self.tools,
    name = "runbox",
    instructions = "runbox runs Python, JavaScript and TypeScript programs in a sandbox without network access. Call run_code with the whole program; nothing persists between its calls. To keep variables, imports and files across calls (load data once, then query it), create_session, then run_in_session as often as needed, and destroy_session when done. upload_file, read_file and list_files move files in and out of a session's working directory."
)]
impl rmcp::ServerHandler for McpServer {
    /// The tools, with `run_code`'s description saying what the calling
    /// token may reach: the operator's egress rules differ per token, so
    /// the list is the caller's own and may be cached only by its client.
    async fn list_tools(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        context: rmcp::service::RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, ErrorData> {
        let supports_cache_hints =
            context.protocol_version().is_some_and(|version| version >= rmcp::model::ProtocolVersion::V_2026_07_28);
        let caller = context.extensions.get::<Parts>().map(caller).transpose()?;
        let grant = caller.and_then(|caller| self.state.config.egress.grant(&caller.0));
        let mut tools = self.tools.list_all();
        for tool in &mut tools {
            if tool.name == "run_code" {
                let description = tool.description.as_deref().unwrap_or_default();
                tool.description = Some(with_egress(description, grant.as_ref()).into());
            }
        }
        Ok(rmcp::model::ListToolsResult {
            result_type: Some(rmcp::model::ResultType::COMPLETE),
            tools,
            meta: None,
            next_cursor: None,
            ttl_ms: supports_cache_hints.then_some(0),
            cache_scope: supports_cache_hints.then_some(rmcp::model::CacheScope::Private),
        })
    }
}

/// `description` with what a token with egress rules may reach (`grant`):
/// the hosts, and the placeholders of its secrets. Unchanged without.
fn with_egress(description: &str, grant: Option<&EgressGrant>) -> String {
    let Some(grant) = grant else { return description.to_owned() };
    let mut network = format!(
        "Network, for this token only, despite the above: fetch (JavaScript) and pyodide.http.pyfetch or \
         js.fetch (Python, with top-level await) reach these hosts and no others, through runbox's proxy: {}. No port means 80 and \
         443. Sockets and DNS stay unavailable. micropip.install works from an index on those hosts.",
        grant.rules.join(", ")
    );
    for secret in &grant.secrets {
        network.push_str(&format!(
            " Secret {}: write {} in a request header to {}; runbox puts the real value there on the way out \
             (you never see it).",
            secret.name, secret.placeholder, secret.host
        ));
    }
    format!("{description}\n\n{network}")
}

/// What `run_code` takes: a job's program, fewer fields. A bad argument
/// gets the same message as on `/v1/jobs`, as a tool error the model can
/// act on rather than as a protocol error.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RunCodeArgs {
    /// The language of `code`.
    #[schemars(extend("enum" = ["python", "javascript", "typescript"]))]
    language: String,
    /// The whole program. Nothing from earlier calls is there: define everything it uses.
    code: String,
    /// Text to feed the program on standard input.
    stdin: Option<String>,
    /// Wall-clock limit for the run, in milliseconds (the tool description gives the default and the maximum).
    #[serde(default, deserialize_with = "requests::whole_number")]
    timeout_ms: Option<u64>,
}

impl RunCodeArgs {
    fn program(self) -> Result<Program, FieldError> {
        let language =
            self.language.parse().map_err(|e: UnknownLanguage| FieldError::invalid("language", e.to_string()))?;
        Ok(Program {
            language: Some(language),
            code: Some(self.code),
            stdin: self.stdin,
            timeout_ms: self.timeout_ms,
            ..Program::default()
        })
    }
}

/// What `run_code` returns as `structuredContent`.
#[derive(Serialize, JsonSchema)]
struct RunResult {
    /// The job's id: `GET /v1/jobs/{id}` reads the same job for as long as results are kept.
    id: String,
    /// `completed` (the program ran to its end: read `exit_code`), `timeout`, `memory_exceeded`,
    /// `cancelled`, `rejected`, `worker_lost` or `internal_error`.
    status: String,
    /// The program's exit code; null when it did not exit by itself (time limit, memory cap).
    exit_code: Option<i32>,
    stdout: String,
    stderr: String,
    /// stdout was longer than the output cap and was cut.
    stdout_truncated: bool,
    /// stderr was longer than the output cap and was cut.
    stderr_truncated: bool,
    /// How long the program ran, in milliseconds.
    duration_ms: u64,
}

#[tool_router(router = job_tools, vis = "pub(crate)")]
impl McpServer {
    #[tool(
        name = "run_code",
        input_schema = schema_for_input::<RunCodeArgs>().unwrap_or_else(|e| panic!("run_code input schema: {e}")),
        output_schema = schema_for_output::<RunResult>(),
        annotations(
            title = "Run code in a sandbox",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn run_code(
        &self,
        Extension(parts): Extension<Parts>,
        abandoned: CancellationToken,
        peer: Peer<RoleServer>,
        meta: RequestMetaObject,
        args: JsonObject,
    ) -> Result<CallToolResult, ErrorData> {
        let progress = meta.get_progress_token().map(|token| Progress { peer, token });
        let caller = caller(&parts)?;
        // rmcp cancels the token when the client disconnects (or cancels the
        // request) but lets the handler run on; stopping here drops the
        // pending run, which cancels the job.
        // rmcp runs the tool in a task of its own, outside the request's span.
        let span = tracing::info_span!("mcp_tool", tool = "run_code", caller = %caller.0);
        let run = tracing::Instrument::instrument(self.run(&caller, args, progress), span);
        tokio::select! {
            result = run => Ok(result.unwrap_or_else(tool_error)),
            () = abandoned.cancelled() => Err(ErrorData::internal_error("the request was abandoned", None)),
        }
    }
}

/// What `create_session` takes: `POST /v1/sessions`' body.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CreateSessionArgs {
    /// The session's language (TypeScript runs only as run_code).
    #[schemars(extend("enum" = ["python", "javascript"]))]
    language: Option<String>,
    /// Seconds without a call after which the session is destroyed.
    #[serde(default, deserialize_with = "requests::whole_number")]
    idle_timeout_s: Option<u64>,
    /// Start from this checkpoint (from checkpoint_session) instead of from nothing.
    from_checkpoint: Option<String>,
}

impl CreateSessionArgs {
    fn request(self) -> Result<SessionRequest, FieldError> {
        let language = self.language.map(|l| l.parse::<runbox_common::Language>()).transpose();
        let language = language.map_err(|e| FieldError::invalid("language", e.to_string()))?;
        Ok(SessionRequest { language, idle_timeout_s: self.idle_timeout_s, from_checkpoint: self.from_checkpoint })
    }
}

/// What `run_in_session` takes: a session's id and an exec's body.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RunInSessionArgs {
    /// The id create_session returned.
    session_id: String,
    /// Code to run in the session: it sees what earlier calls defined.
    code: String,
    /// Text on standard input (Python only).
    stdin: Option<String>,
    /// Wall-clock limit for this call, in milliseconds.
    #[serde(default, deserialize_with = "requests::whole_number")]
    timeout_ms: Option<u64>,
    /// Files written under the session's home (its working directory) before the code runs; they stay there.
    #[schemars(with = "Option<Vec<FileArg>>")]
    files: Option<Vec<requests::FileRequest>>,
    /// true for every file under the home this call created or changed, or a list of up to 64 paths; the
    /// result's files has them, base64.
    #[schemars(with = "Option<ReturnFilesArg>")]
    return_files: Option<requests::ReturnFilesRequest>,
}

/// A file for `run_in_session`'s `files`, as a job's `files` entry: its
/// schema only; [`requests::FileRequest`] reads it.
#[derive(JsonSchema)]
#[allow(dead_code)]
struct FileArg {
    /// Relative to the session's home, such as data/input.csv.
    path: String,
    /// The text, or standard base64 of the bytes with encoding base64.
    content: String,
    /// How content is written: utf8 (the default) or base64.
    #[schemars(extend("enum" = ["utf8", "base64"]))]
    encoding: Option<String>,
}

/// `run_in_session`'s `return_files`: its schema only.
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum ReturnFilesArg {
    All(bool),
    Paths(Vec<String>),
}

/// What `upload_file` takes.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct UploadFileArgs {
    /// The id create_session returned.
    session_id: String,
    /// Where to write, relative to the session's home, such as data/input.csv; directories are made as needed.
    path: String,
    /// The file's text, or standard base64 of its bytes with encoding base64.
    content: String,
    /// How content is written: utf8 (the default) or base64.
    #[schemars(extend("enum" = ["utf8", "base64"]))]
    encoding: Option<String>,
}

impl UploadFileArgs {
    /// The path, checked, and the bytes to write.
    fn file(self) -> Result<(String, String, Vec<u8>), ApiError> {
        files::checked(&self.path)?;
        let bytes = match self.encoding.as_deref() {
            None | Some("utf8") => self.content.into_bytes(),
            Some("base64") => {
                use base64::Engine;
                base64::engine::general_purpose::STANDARD.decode(self.content.trim()).map_err(|e| {
                    FieldError::invalid(
                        "content",
                        format!("content is not standard base64 ({e}); or pass text with encoding utf8"),
                    )
                })?
            }
            Some(other) => {
                return Err(
                    FieldError::invalid("encoding", format!("encoding is utf8 or base64, not {other:?}")).into()
                );
            }
        };
        Ok((self.session_id, self.path, bytes))
    }
}

/// What `read_file` takes.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReadFileArgs {
    /// The id create_session returned.
    session_id: String,
    /// The file, relative to the session's home.
    path: String,
}

/// What `read_file` returns as `structuredContent`.
#[derive(Serialize)]
struct FileRead {
    path: String,
    /// Bytes in the file.
    size: u64,
    /// `utf8` when the file is UTF-8 text and `content` is that text; else `base64`.
    encoding: &'static str,
    content: String,
}

/// What `list_files` takes.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListFilesArgs {
    /// The id create_session returned.
    session_id: String,
    /// The directory, relative to the session's home; the home itself when absent.
    path: Option<String>,
}

/// What the other session tools take.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SessionIdArgs {
    /// The id create_session (or fork_session) returned.
    session_id: String,
}

/// `tool`'s arguments as `T`, or a tool error that names the argument.
fn arguments<T: serde::de::DeserializeOwned>(args: JsonObject, tool: &str) -> Result<T, ApiError> {
    requests::from_value(Value::Object(args)).map_err(|error| {
        // A model reads "argument" and the tool's name better than "field".
        let message = error.message.replacen("unknown field", "unknown argument", 1).replacen(
            "this object takes",
            &format!("{tool} takes"),
            1,
        );
        ApiError::Field(FieldError { message, ..error })
    })
}

#[tool_router(router = session_tools, vis = "pub(crate)")]
impl McpServer {
    #[tool(
        name = "create_session",
        description = "Start a sandbox session whose state lasts across calls: variables, imports and files \
            written by one run_in_session call are there in the next. Same sandbox and limits as run_code \
            (no network, no packages beyond those run_code lists). A session is destroyed after idle_timeout_s \
            without a call, and after a few hours in any case; a token may hold only a few at once, so \
            destroy_session when done. Returns the session, whose id the other session tools take.",
        input_schema = schema_for_input::<CreateSessionArgs>().unwrap_or_else(|e| panic!("create_session schema: {e}")),
        annotations(title = "Create a session", read_only_hint = false, destructive_hint = false, open_world_hint = false)
    )]
    async fn create_session(
        &self,
        Extension(parts): Extension<Parts>,
        args: JsonObject,
    ) -> Result<CallToolResult, ErrorData> {
        let caller = caller(&parts)?;
        let created = async {
            let request = arguments::<CreateSessionArgs>(args, "create_session")?.request()?;
            sessions::create_session(&self.state, &caller, request).await
        };
        Ok(answer(created.await.map(SessionView::from)))
    }

    #[tool(
        name = "run_in_session",
        description = "Run code in a session made by create_session. It sees everything earlier calls in the \
            session defined (Python: globals and imports; JavaScript: top-level let, const, function and class \
            declarations and globalThis), and what it defines stays for the next call. Calls in one session run \
            one at a time. A call past its time limit is interrupted (Python) and the session keeps its state; \
            a call that cannot be interrupted, or runs out of memory, ends the session's process: the session \
            then comes back from its latest checkpoint (what ran after it is gone, and the result says so) or \
            is lost. Returns stdout, stderr, exit code and status, like run_code.",
        input_schema = schema_for_input::<RunInSessionArgs>().unwrap_or_else(|e| panic!("run_in_session schema: {e}")),
        annotations(title = "Run code in a session", read_only_hint = false, destructive_hint = false, open_world_hint = false)
    )]
    async fn run_in_session(
        &self,
        Extension(parts): Extension<Parts>,
        args: JsonObject,
    ) -> Result<CallToolResult, ErrorData> {
        let caller = caller(&parts)?;
        let RunInSessionArgs { session_id, code, stdin, timeout_ms, files, return_files } =
            match arguments(args, "run_in_session") {
                Ok(args) => args,
                Err(e) => return Ok(tool_error(e)),
            };
        let request = ExecRequest { code: Some(code), stdin, timeout_ms, files, return_files };
        let result = match sessions::exec_in(&self.state, &caller, &session_id, request).await {
            Ok(sessions::Executed::Done(view)) => {
                let value = serde_json::to_value(&view).unwrap_or_default();
                let failed = !(value["status"] == "completed" && value["exit_code"] == 0);
                let mut result = structured(&view);
                result.is_error = Some(failed);
                result
            }
            Ok(sessions::Executed::Pending(job)) => text_error(format!(
                "The call is still running; its result will be at GET /v1/jobs/{job}. The session is busy until it ends."
            )),
            Err(e) => tool_error(e),
        };
        Ok(result)
    }

    #[tool(
        name = "upload_file",
        description = "Write a file into a session's home, the working directory its code runs in, so that \
            run_in_session can open it by that relative path. Text as it is, or bytes as base64 with encoding \
            base64; directories are made as needed and a file there is replaced. A file may hold up to 16 MiB, \
            and a session's files 32 MiB in all. Returns the path and size written.",
        input_schema = schema_for_input::<UploadFileArgs>().unwrap_or_else(|e| panic!("upload_file schema: {e}")),
        annotations(title = "Upload a file to a session", read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn upload_file(
        &self,
        Extension(parts): Extension<Parts>,
        args: JsonObject,
    ) -> Result<CallToolResult, ErrorData> {
        let caller = caller(&parts)?;
        let written = async {
            let (id, path, bytes) = arguments::<UploadFileArgs>(args, "upload_file")?.file()?;
            files::put_file(&self.state, &caller, &id, path, bytes).await
        };
        Ok(answer(written.await))
    }

    #[tool(
        name = "read_file",
        description = "Read a file from a session's home (what its code wrote, or what was uploaded), by its \
            path relative to the home. The answer's encoding says how content is given: utf8 when the file is \
            UTF-8 text (content is the text), base64 otherwise. Up to 16 MiB.",
        input_schema = schema_for_input::<ReadFileArgs>().unwrap_or_else(|e| panic!("read_file schema: {e}")),
        annotations(title = "Read a file of a session", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn read_file(
        &self,
        Extension(parts): Extension<Parts>,
        args: JsonObject,
    ) -> Result<CallToolResult, ErrorData> {
        let caller = caller(&parts)?;
        let read = async {
            let ReadFileArgs { session_id, path } = arguments(args, "read_file")?;
            files::checked(&path)?;
            let bytes = files::get_file(&self.state, &caller, &session_id, path.clone()).await?;
            Ok(file_read(path, bytes))
        };
        Ok(read.await.unwrap_or_else(tool_error))
    }

    #[tool(
        name = "list_files",
        description = "List a directory of a session's home (the home itself without path): each entry's name, \
            path, type (file, directory or link), size and modified time. truncated says more than 4096 \
            entries were there and only the first are listed.",
        input_schema = schema_for_input::<ListFilesArgs>().unwrap_or_else(|e| panic!("list_files schema: {e}")),
        annotations(title = "List a session's files", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn list_files(
        &self,
        Extension(parts): Extension<Parts>,
        args: JsonObject,
    ) -> Result<CallToolResult, ErrorData> {
        let caller = caller(&parts)?;
        let listed = async {
            let ListFilesArgs { session_id, path } = arguments(args, "list_files")?;
            let path = files::list_path(path.unwrap_or_default())?;
            files::list_dir(&self.state, &caller, &session_id, path).await
        };
        Ok(answer(listed.await))
    }

    #[tool(
        name = "checkpoint_session",
        description = "Save a session's state (Python: a memory snapshot plus its files; JavaScript: the calls \
            it ran, replayed to restore). Returns the checkpoint's id, for create_session's from_checkpoint. A \
            session that loses its process comes back from its latest checkpoint. Python cannot checkpoint while \
            it holds a JavaScript object (from `import js`).",
        input_schema = schema_for_input::<SessionIdArgs>().unwrap_or_else(|e| panic!("checkpoint_session schema: {e}")),
        annotations(title = "Checkpoint a session", read_only_hint = false, destructive_hint = false, open_world_hint = false)
    )]
    async fn checkpoint_session(
        &self,
        Extension(parts): Extension<Parts>,
        args: JsonObject,
    ) -> Result<CallToolResult, ErrorData> {
        let caller = caller(&parts)?;
        Ok(answer(async { sessions::take_checkpoint(&self.state, &caller, &session_id(args)?).await }.await))
    }

    #[tool(
        name = "fork_session",
        description = "Copy a session: checkpoints it and starts a new, independent session with the same \
            state. Changes in one are not seen by the other. Returns the new session.",
        input_schema = schema_for_input::<SessionIdArgs>().unwrap_or_else(|e| panic!("fork_session schema: {e}")),
        annotations(title = "Fork a session", read_only_hint = false, destructive_hint = false, open_world_hint = false)
    )]
    async fn fork_session(
        &self,
        Extension(parts): Extension<Parts>,
        args: JsonObject,
    ) -> Result<CallToolResult, ErrorData> {
        let caller = caller(&parts)?;
        Ok(answer(
            async { sessions::fork_session(&self.state, &caller, &session_id(args)?).await.map(SessionView::from) }
                .await,
        ))
    }

    #[tool(
        name = "destroy_session",
        description = "End a session and its process; its checkpoints stay until they expire.",
        input_schema = schema_for_input::<SessionIdArgs>().unwrap_or_else(|e| panic!("destroy_session schema: {e}")),
        annotations(title = "Destroy a session", read_only_hint = false, destructive_hint = true, open_world_hint = false)
    )]
    async fn destroy_session(
        &self,
        Extension(parts): Extension<Parts>,
        args: JsonObject,
    ) -> Result<CallToolResult, ErrorData> {
        let caller = caller(&parts)?;
        Ok(answer(
            async { sessions::destroy_session(&self.state, &caller, &session_id(args)?).await.map(SessionView::from) }
                .await,
        ))
    }
}

/// The `session_id` argument, and nothing else.
fn session_id(args: JsonObject) -> Result<String, ApiError> {
    Ok(arguments::<SessionIdArgs>(args, "this tool")?.session_id)
}

/// A file read by `read_file`: as text when it is UTF-8, else as base64;
/// the text block says which, then gives the content as it is.
fn file_read(path: String, bytes: Vec<u8>) -> CallToolResult {
    let size = bytes.len() as u64;
    let (encoding, content) = match String::from_utf8(bytes) {
        Ok(text) => ("utf8", text),
        Err(e) => {
            use base64::Engine;
            ("base64", base64::engine::general_purpose::STANDARD.encode(e.into_bytes()))
        }
    };
    let what = if encoding == "utf8" { "UTF-8 text" } else { "not UTF-8 text, so base64 of its bytes" };
    let text = format!("{path}: {size} bytes, {what}:\n{content}");
    let read = FileRead { path, size, encoding, content };
    let mut answer = CallToolResult::structured(serde_json::to_value(&read).unwrap_or_default());
    answer.content = vec![ContentBlock::text(text)];
    answer
}

/// A session tool's answer: its value as [`structured`], or its error.
fn answer<T: Serialize>(result: Result<T, ApiError>) -> CallToolResult {
    result.map(|value| structured(&value)).unwrap_or_else(tool_error)
}

/// `value` as a tool result: pretty JSON for the model, and the same as
/// `structuredContent`.
fn structured(value: &impl Serialize) -> CallToolResult {
    let json = serde_json::to_value(value).unwrap_or_default();
    let text = serde_json::to_string_pretty(&json).unwrap_or_default();
    let mut answer = CallToolResult::structured(json);
    answer.content = vec![ContentBlock::text(text)];
    answer
}

impl McpServer {
    /// Queues `args` as a job, exactly as `POST /v1/jobs` would, and waits
    /// for its result.
    /// With `progress`, what the program writes goes to the client as
    /// progress notifications while it runs.
    async fn run(
        &self,
        caller: &Caller,
        args: JsonObject,
        progress: Option<Progress>,
    ) -> Result<CallToolResult, ApiError> {
        let limits = &self.state.config.limits;
        let spec = arguments::<RunCodeArgs>(args, "run_code")?.program()?.validate(limits)?;
        let queued = pipeline::enqueue(&self.state, caller, &spec, None, None, None, None).await?;
        // Dropped, and so the job cancelled, when the call is abandoned too.
        let mut pending = CancelOnDrop { state: self.state.clone(), id: Some(queued.id.clone()) };
        let run_for = Duration::from_millis(spec.timeout_ms.unwrap_or(limits.timeouts.default_ms()));
        let waiting = pipeline::wait_for(&self.state, &queued.id, run_for + QUEUE_PATIENCE);
        let record = match progress {
            Some(progress) => tokio::select! {
                record = waiting => record,
                () = progress.report(&self.state, &queued.id) => unreachable!("reports until dropped"),
            },
            None => waiting.await,
        }?;
        let Some(record) = record.filter(|r| r.status.is_final()) else {
            let why = if self.state.stopping.is_cancelled() {
                "the api is restarting".to_owned()
            } else {
                format!("it waited more than {} s for a worker; runbox is busy", QUEUE_PATIENCE.as_secs())
            };
            return Ok(text_error(format!("The program was not run: {why}. Retry in a little while.")));
        };
        pending.id = None;
        Ok(run_result(record, limits))
    }
}

/// Where a `run_code` call that sent a progress token gets its job's output
/// as it is written.
struct Progress {
    peer: Peer<RoleServer>,
    token: ProgressToken,
}

impl Progress {
    /// Sends job `id`'s live output as progress notifications, each with
    /// the bytes written so far as its progress and the chunk as its
    /// message, until dropped. Best effort: the result carries all of it.
    async fn report(self, state: &AppState, id: &str) {
        let output = state.watchers.register(id);
        let (mut after, mut bytes) = ("0".to_owned(), 0u64);
        loop {
            let grew = output.notify.notified();
            tokio::pin!(grew);
            grew.as_mut().enable();
            for entry in state.queue.read_output(id, &after).await.unwrap_or_default() {
                after = entry.id;
                bytes += entry.chunk.data.len() as u64;
                let text = String::from_utf8_lossy(&entry.chunk.data);
                let message = format!("{}: {text}", entry.chunk.stream.as_str());
                let note = ProgressNotificationParam::new(self.token.clone(), bytes as f64).with_message(message);
                if self.peer.notify_progress(note).await.is_err() {
                    return std::future::pending().await;
                }
            }
            tokio::select! {
                () = grew => {}
                () = tokio::time::sleep(pipeline::RECHECK_EVERY) => {}
            }
        }
    }
}

/// Cancels a job that no one is waiting for any more, so it does not take
/// a worker's time.
struct CancelOnDrop {
    state: AppState,
    id: Option<String>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        let state = self.state.clone();
        tokio::spawn(async move {
            let ttl = state.config.shared.result_ttl;
            match state.queue.cancel(&id, &now_rfc3339(), ttl).await {
                Ok(cancelled) => tracing::info!(%id, ?cancelled, "mcp: run abandoned; cancelled"),
                Err(e) => tracing::warn!(%id, error = %e, "mcp: could not cancel an abandoned run"),
            }
        });
    }
}

/// A finished job as a tool result: readable text for the model, the same
/// fields as `structuredContent` for programs, and `isError` unless the
/// program ran to its end and exited 0.
fn run_result(record: JobRecord, limits: &ApiLimits) -> CallToolResult {
    // A job cancelled before it started has a final status and no outcome.
    let outcome = record.outcome;
    let result = RunResult {
        id: record.id,
        status: record.status.as_str().to_owned(),
        exit_code: outcome.as_ref().and_then(|o| o.exit_code),
        stdout: outcome.as_ref().map(|o| o.stdout.clone()).unwrap_or_default(),
        stderr: outcome.as_ref().map(|o| o.stderr.clone()).unwrap_or_default(),
        stdout_truncated: outcome.as_ref().is_some_and(|o| o.stdout_truncated),
        stderr_truncated: outcome.as_ref().is_some_and(|o| o.stderr_truncated),
        duration_ms: outcome.as_ref().map_or(0, |o| o.duration_ms),
    };
    let failed = !(record.status == Status::Completed && result.exit_code == Some(0));
    // The text is for a model to read, so output is shown as it was rather
    // than as an escaped JSON string; `structuredContent` has the JSON.
    let text = summary(&result, record.status, limits);
    let mut answer = CallToolResult::structured(serde_json::to_value(&result).unwrap_or_default());
    answer.content = vec![ContentBlock::text(text)];
    answer.is_error = Some(failed);
    answer
}

/// The result as text: what happened, then stdout and stderr.
fn summary(result: &RunResult, status: Status, limits: &ApiLimits) -> String {
    let what = match status {
        Status::Completed => match result.exit_code {
            Some(code) => format!("The program exited with code {code}"),
            None => "The program ended without an exit code".to_owned(),
        },
        Status::Timeout => format!(
            "The program was killed at its time limit; make it faster, or pass a larger timeout_ms (at most {})",
            limits.timeouts.max_ms()
        ),
        Status::MemoryExceeded => "The program was killed at the memory cap; use less memory".to_owned(),
        Status::Cancelled => "The run was cancelled".to_owned(),
        other => format!("The program did not run to an end (status {}); retry", other.as_str()),
    };
    let mut text = format!("{what} after {} ms (status {}).\n", result.duration_ms, result.status);
    for (name, output, truncated) in
        [("stdout", &result.stdout, result.stdout_truncated), ("stderr", &result.stderr, result.stderr_truncated)]
    {
        if output.is_empty() {
            text.push_str(&format!("{name}: (empty)\n"));
            continue;
        }
        text.push_str(&format!("--- {name}{} ---\n{output}", if truncated { " (cut at the output cap)" } else { "" }));
        if !output.ends_with('\n') {
            text.push('\n');
        }
    }
    text
}

/// The caller the bearer-token middleware found for this request.
pub(crate) fn caller(parts: &Parts) -> Result<Caller, ErrorData> {
    // `/mcp` is routed behind `auth::require_token`, so this is always
    // there; its absence would be a routing mistake, not a client's.
    parts.extensions.get::<Caller>().cloned().ok_or_else(|| {
        tracing::error!("mcp: no caller on the request; is /mcp outside the auth middleware?");
        ErrorData::internal_error("internal error", None)
    })
}

/// An [`ApiError`] as a tool error, which MCP clients show to the model:
/// the same message as the JSON error of `/v1`, under the same code.
pub(crate) fn tool_error(error: ApiError) -> CallToolResult {
    let message = match &error {
        ApiError::QueueFull => "runbox's queue is full; nothing was run. Retry in a second or two.".to_owned(),
        ApiError::Unavailable(cause) => {
            tracing::error!(error = %cause, "redis unavailable");
            "runbox is unavailable right now; nothing was run. Retry shortly.".to_owned()
        }
        // A tool result has no Retry-After header to point at.
        ApiError::QuotaExceeded { message, .. } => message.replace("after the Retry-After delay", "in a second"),
        other => other.to_string(),
    };
    text_error(format!("{}: {message}", error.code()))
}

fn text_error(message: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message)])
}

/// What `run_code` tells a model about itself: what the sandbox has, what
/// it lacks, and the limits in force.
fn run_code_description(limits: &ApiLimits) -> String {
    format!(
        "Run a Python, JavaScript or TypeScript program in a fresh sandbox and get back its stdout, stderr, \
         exit code, status and duration.\n\
         \n\
         The program may read stdin, print to stdout and stderr, and use its language's standard library. \
         Python is CPython 3.13 (Pyodide); beyond the standard library it can import only these pure-Python \
         packages: pytest, hypothesis, python-dateutil, tabulate, more-itertools, attrs and typing-extensions \
         (with iniconfig, packaging, pluggy, pygments, sortedcontainers and tzdata). No NumPy, pandas or other \
         compiled packages. JavaScript and TypeScript run in Deno with its built-in APIs only; there are no npm \
         packages.\n\
         \n\
         It cannot: reach the network (fetch, sockets and imports from URLs fail), install packages (pip, \
         micropip and npm reach nothing), start subprocesses, read environment variables or the host's files. Nothing persists \
         between run_code calls: each call starts from nothing, so send the whole program, with every \
         definition and import it needs, each time. State lasts only inside a session (create_session).\n\
         \n\
         Limits: {default} ms of wall-clock time unless timeout_ms says otherwise, at most {max} ms; code up to \
         {code} bytes and stdin up to {stdin} bytes; memory is capped per run (256 MiB unless the operator \
         changed it); stdout and stderr are each kept up to 1 MiB by default, and what is cut is flagged in \
         stdout_truncated and stderr_truncated.\n\
         \n\
         status is completed when the program ran to its end (read exit_code), timeout when the time limit \
         killed it, memory_exceeded when it hit the memory cap. isError is true unless it completed with exit \
         code 0.",
        default = limits.timeouts.default_ms(),
        max = limits.timeouts.max_ms(),
        code = limits.max_code_bytes,
        stdin = limits.max_stdin_bytes,
    )
}

#[cfg(test)]
mod tests {
    use runbox_common::{Outcome, Timings};

    use super::*;

    fn record(status: Status, exit_code: Option<i32>) -> JobRecord {
        JobRecord {
            id: "00000000-0000-4000-8000-000000000000".into(),
            owner: "agent".into(),
            language: Some(runbox_common::Language::Python),
            status,
            created_at: None,
            started_at: None,
            finished_at: None,
            worker: None,
            compat: None,
            outcome: Some(Outcome {
                status,
                exit_code,
                signal: None,
                stdout: "out\n".into(),
                stderr: "err".into(),
                stdout_truncated: false,
                stderr_truncated: true,
                duration_ms: 12,
                verdict: None,
                files: Vec::new(),
                files_truncated: false,
                warm: false,
                cpu_ms: None,
                peak_memory_bytes: None,
                step: None,
                network: Vec::new(),
            }),
            timings: Timings::default(),
        }
    }

    #[test]
    fn run_code_is_described_with_the_limits_in_force() {
        let timeouts =
            runbox_common::Timeouts { default: Duration::from_millis(2_500), max: Duration::from_millis(30_000) };
        let limits = ApiLimits { timeouts, ..ApiLimits::default() };
        let tools = tools(&limits).list_all();
        let run_code = tools.iter().find(|t| t.name == "run_code").expect("run_code listed");
        let description = run_code.description.as_deref().unwrap_or_default();
        for needle in ["2500 ms", "at most 30000 ms", "reach the network", "Nothing persists", "pytest"] {
            assert!(description.contains(needle), "{needle:?} missing from {description}");
        }
        let input = serde_json::Value::Object((*run_code.input_schema).clone());
        assert_eq!(input["required"], serde_json::json!(["language", "code"]));
        assert_eq!(input["additionalProperties"], serde_json::json!(false));
        let output = run_code.output_schema.as_ref().expect("output schema");
        assert!(output["properties"]["exit_code"].is_object());
    }

    #[test]
    fn only_a_clean_exit_is_not_an_error() {
        let limits = ApiLimits::default();
        let ok = run_result(record(Status::Completed, Some(0)), &limits);
        assert_eq!(ok.is_error, Some(false));
        let structured = ok.structured_content.expect("structured");
        assert_eq!(structured["stdout"], "out\n");
        assert_eq!(structured["exit_code"], 0);
        assert_eq!(structured["stderr_truncated"], true);

        let failed = run_result(record(Status::Completed, Some(2)), &limits);
        assert_eq!(failed.is_error, Some(true));
        assert!(text_of(&failed).contains("exited with code 2"));
        assert!(text_of(&failed).contains("--- stderr (cut at the output cap) ---\nerr\n"));

        let timeout = run_result(record(Status::Timeout, None), &limits);
        assert_eq!(timeout.is_error, Some(true));
        assert!(text_of(&timeout).contains("timeout_ms"), "{}", text_of(&timeout));

        let mut cancelled = record(Status::Cancelled, None);
        cancelled.outcome = None;
        let cancelled = run_result(cancelled, &limits);
        assert_eq!(cancelled.is_error, Some(true));
        assert_eq!(cancelled.structured_content.expect("structured")["status"], "cancelled");
    }

    #[test]
    fn errors_keep_their_code_and_say_what_to_do() {
        let full = tool_error(ApiError::QueueFull);
        assert_eq!(full.is_error, Some(true));
        assert!(text_of(&full).starts_with("queue_full: "));
        assert!(text_of(&full).contains("Retry"));
        let quota = runbox_common::Quota { max_active: 0, per_second: 5 };
        let rate = tool_error(ApiError::over_quota(runbox_common::OverQuota::Rate, quota));
        assert_eq!(text_of(&rate), "quota_exceeded: this token may submit 5 times per second; retry in a second");
        let bad = tool_error(ApiError::invalid("code", "code is required"));
        assert_eq!(text_of(&bad), "invalid_field: code is required");
    }

    fn text_of(result: &CallToolResult) -> String {
        result.content.iter().filter_map(|c| c.as_text()).map(|t| t.text.as_str()).collect()
    }
}
