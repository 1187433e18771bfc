//! A job's body, `POST /v1/jobs`, and the program inside it, which a
//! batch, MCP's `run_code` and the compatible APIs give the same way.

use runbox_common::{Compare, FileEncoding, InputFile, JobSpec, Language, MAX_RETURN_FILES, ReturnFiles};
use serde::Deserialize;
use utoipa::ToSchema;

use super::{FieldError, whole_number};
use crate::config::ApiLimits;

/// Most files a job may have.
pub const MAX_FILES: usize = 64;

/// Largest `memory_mb` a job may ask for. It only ever lowers the worker's
/// cap (`RUNBOX_MEMORY_MB`), which the api does not know.
pub const MAX_MEMORY_MB: u32 = 1 << 20;

/// Most command-line arguments a job may have, and their total size.
pub const MAX_ARGS: usize = 256;
pub const MAX_ARGS_BYTES: usize = 64 * 1024;

/// Declares a body made of a program's fields and `$extra` of its own, so
/// that a job and a batch's job cannot drift apart field by field.
macro_rules! program_body {
    ($(#[$attr:meta])* pub struct $name:ident { $($(#[$extra_attr:meta])* pub $extra:ident: $extra_ty:ty,)* }) => {
        #[derive(Debug, Clone, Default, PartialEq, Deserialize, ToSchema)]
        $(#[$attr])*
        #[serde(deny_unknown_fields)]
        pub struct $name {
            #[schema(required = true, value_type = LanguageName)]
            pub language: Option<Language>,
            /// The program; not empty or only whitespace. At most `max_code_bytes`.
            #[schema(required = true, value_type = String, min_length = 1, pattern = r"\S")]
            pub code: Option<String>,
            /// Fed to stdin, then EOF. At most `max_stdin_bytes`.
            pub stdin: Option<String>,
            /// Wall-clock limit; the configured default when absent.
            #[serde(default, deserialize_with = "whole_number")]
            #[schema(minimum = 1)]
            pub timeout_ms: Option<u64>,
            /// A memory cap in MiB for this job, below the worker's: it lowers the
            /// cap, never raises it.
            #[serde(default, deserialize_with = "whole_number")]
            #[schema(value_type = Option<u32>, minimum = 1)]
            pub memory_mb: Option<u64>,
            /// Command-line arguments: `Deno.args`, or `sys.argv[1:]`; at most 256
            /// strings of 64 KiB in all.
            pub args: Option<Vec<String>>,
            /// What stdout should be; the result then has a `verdict`. At most
            /// `max_stdin_bytes`.
            pub expected_stdout: Option<String>,
            /// How stdout is compared with `expected_stdout`; `trim` needs it.
            pub compare: Option<Compare>,
            /// Files put in the working directory; distinct paths, neither inside
            /// another, at most `max_files_bytes` decoded in all.
            pub files: Option<Vec<FileRequest>>,
            /// Python only: `true` for every file the program created or changed,
            /// or up to 64 distinct paths.
            pub return_files: Option<ReturnFilesRequest>,
            $($(#[$extra_attr])* pub $extra: $extra_ty,)*
        }
    };
}

program_body! {
    /// One job of a batch (or its `program`), and what MCP and the
    /// compatible APIs translate their requests into: a job without
    /// `callback_url` or `shared_runtime`, which belong on the batch.
    #[schema(as = BatchJobRequest)]
    pub struct Program {}
}

program_body! {
    /// The body of `POST /v1/jobs`. Limits on sizes are in bytes and
    /// configurable; `GET /v1/runtimes` lists them.
    pub struct JobRequest {
        /// An http(s) URL to POST the finished job to, signed; its host must
        /// resolve to public addresses (or ones RUNBOX_CALLBACK_ALLOW allows).
        #[schema(format = "uri")]
        pub callback_url: Option<String>,
        /// Where the job runs. Absent: Python and TypeScript in one of the
        /// caller's long-lived children, which other jobs of the caller's ran
        /// in before, each in a fresh interpreter or Worker (never another
        /// token's); JavaScript in a fresh child. `false`: a fresh child of its
        /// own. `true`: the
        /// caller's long-lived children in any language (a JavaScript or
        /// TypeScript job with `stdin`, `files` or `return_files` still gets a
        /// fresh child).
        pub shared_runtime: Option<bool>,
    }
}

impl JobRequest {
    /// The program, and where the job asked to be called back and to run.
    pub fn split(self) -> (Program, Option<String>, Option<bool>) {
        let JobRequest {
            language,
            code,
            stdin,
            timeout_ms,
            memory_mb,
            args,
            expected_stdout,
            compare,
            files,
            return_files,
            callback_url,
            shared_runtime,
        } = self;
        let program = Program {
            language,
            code,
            stdin,
            timeout_ms,
            memory_mb,
            args,
            expected_stdout,
            compare,
            files,
            return_files,
        };
        (program, callback_url, shared_runtime)
    }
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

/// A file given to the program.
#[derive(Debug, Clone, PartialEq, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FileRequest {
    #[schema(required = true, value_type = FilePath)]
    pub path: Option<String>,
    /// The text, or standard base64 of the bytes.
    #[schema(required = true, value_type = String)]
    pub content: Option<String>,
    pub encoding: Option<FileEncoding>,
}

/// A path relative to the working directory: plain names separated by
/// `/`, no `.` or `..` parts, no control characters or `\`; at most 255 bytes.
#[derive(Deserialize, ToSchema)]
#[schema(
    min_length = 1,
    max_length = 255,
    pattern = r"^(?:(?!\.\.?(?:/|$))[^/\\\x00-\x1f\x7f-\x9f]+/)*(?!\.\.?$)[^/\\\x00-\x1f\x7f-\x9f]+$"
)]
#[derive(Debug, Clone, PartialEq)]
pub struct FilePath(pub String);

/// Which written files the result carries back.
#[derive(Debug, Clone, PartialEq, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ReturnFilesRequest {
    /// `true`: every file created or changed; `false`: none.
    All(bool),
    /// These paths, at most 64.
    Paths(Vec<FilePath>),
}

impl Program {
    /// The job this program is, within `limits`, or the field that is
    /// wrong and what to fix.
    pub fn validate(self, limits: &ApiLimits) -> Result<JobSpec, FieldError> {
        let language = self
            .language
            .ok_or_else(|| FieldError::invalid("language", "language is required: python, javascript or typescript"))?;
        let code = self.code.ok_or_else(|| FieldError::invalid("code", "code is required"))?;
        if code.trim().is_empty() {
            return Err(FieldError::invalid("code", "code is empty"));
        }
        if code.len() > limits.max_code_bytes {
            let message = format!("code is {} bytes; the limit is {}", code.len(), limits.max_code_bytes);
            return Err(FieldError::too_large("code", "code_too_large", message));
        }
        let stdin = self.stdin.unwrap_or_default();
        if stdin.len() > limits.max_stdin_bytes {
            let message = format!("stdin is {} bytes; the limit is {}", stdin.len(), limits.max_stdin_bytes);
            return Err(FieldError::too_large("stdin", "stdin_too_large", message));
        }
        let max_ms = limits.timeouts.max_ms();
        if let Some(ms) = self.timeout_ms
            && !(1..=max_ms).contains(&ms)
        {
            let message = format!("timeout_ms must be a whole number of milliseconds from 1 to {max_ms}");
            return Err(FieldError::invalid("timeout_ms", message));
        }
        let memory_mb = match self.memory_mb {
            None => None,
            Some(mb) => match u32::try_from(mb) {
                Ok(mb) if (1..=MAX_MEMORY_MB).contains(&mb) => Some(mb),
                _ => {
                    let message = format!("memory_mb must be a whole number of MiB from 1 to {MAX_MEMORY_MB}");
                    return Err(FieldError::invalid("memory_mb", message));
                }
            },
        };
        let args = self.args.unwrap_or_default();
        if args.len() > MAX_ARGS || args.iter().map(String::len).sum::<usize>() > MAX_ARGS_BYTES {
            let message = format!("args holds at most {MAX_ARGS} strings of {MAX_ARGS_BYTES} bytes in all");
            return Err(FieldError::invalid("args", message));
        }
        let expected_stdout = self.expected_stdout;
        if expected_stdout.as_ref().is_some_and(|e| e.len() > limits.max_stdin_bytes) {
            let message = format!("expected_stdout is larger than the limit of {} bytes", limits.max_stdin_bytes);
            return Err(FieldError::too_large("expected_stdout", "expected_stdout_too_large", message));
        }
        let compare = self.compare.unwrap_or_default();
        if compare != Compare::Exact && expected_stdout.is_none() {
            return Err(FieldError::invalid("compare", "compare needs expected_stdout"));
        }
        let files = files(self.files.unwrap_or_default(), limits)?;
        let return_files = return_files(self.return_files, language)?;
        Ok(JobSpec {
            language,
            code,
            stdin,
            timeout_ms: Some(self.timeout_ms.unwrap_or(limits.timeouts.default_ms())),
            memory_mb,
            args,
            expected_stdout,
            compare,
            files,
            return_files,
            shared_lane: None,
            session: None,
            egress: None,
        })
    }
}

/// Where a job of `owner` runs: in the owner's long-lived children (the
/// lane whose key is the owner, so no two owners ever share a child), or
/// in a fresh child of its own (None).
///
/// Python and TypeScript run in the owner's children unless the client
/// says `shared_runtime: false`: a fresh Pyodide costs about 0.4 CPU-s, a
/// warm child's next interpreter much less; a fresh child transpiling
/// TypeScript cost about three times what a Worker of a warm child does
/// (MBTSP, one request per program). JavaScript runs in a fresh child
/// unless the client asks (`true`): the lane saves about a third there
/// (MBJSP the same way), but a program ends two ways differently in a
/// Worker (a top-level `await` that never settles runs to the timeout, and
/// work started and not awaited, timers aside, is not waited for; see
/// docs/api.md). Jobs with stdin or files stay in a fresh child whatever is
/// asked (see the worker's `SharedLane::takes`). A session's steps never
/// take a lane.
pub fn lane(spec: &JobSpec, asked: Option<bool>, owner: &str) -> Option<String> {
    let shared = asked.unwrap_or(matches!(spec.language, Language::Python | Language::Typescript));
    (shared && spec.session.is_none()).then(|| owner.to_owned())
}

/// Checks `return_files`: at most [`MAX_RETURN_FILES`] distinct, safe
/// paths. Python only: a JS or TS child has no write access, so it has no
/// files to return.
fn return_files(asked: Option<ReturnFilesRequest>, language: Language) -> Result<ReturnFiles, FieldError> {
    let wanted = match asked {
        None | Some(ReturnFilesRequest::All(false)) => return Ok(ReturnFiles::None),
        Some(ReturnFilesRequest::All(true)) => ReturnFiles::All,
        Some(ReturnFilesRequest::Paths(paths)) if paths.len() <= MAX_RETURN_FILES => {
            let paths: Vec<String> = paths.into_iter().map(|p| p.0).collect();
            for (index, path) in paths.iter().enumerate() {
                let field = format!("return_files[{index}]");
                InputFile::check_path(path).map_err(|e| FieldError::invalid(&field, format!("return_files: {e}")))?;
                if paths[..index].contains(path) {
                    return Err(FieldError::invalid(field, format!("return_files names {path:?} twice")));
                }
            }
            ReturnFiles::Paths(paths)
        }
        Some(ReturnFilesRequest::Paths(_)) => {
            let message = format!("return_files names at most {MAX_RETURN_FILES} paths");
            return Err(FieldError::invalid("return_files", message));
        }
    };
    if language != Language::Python {
        return Err(FieldError::invalid(
            "return_files",
            "return_files is for Python jobs: JavaScript and TypeScript programs have no write access",
        ));
    }
    Ok(wanted)
}

/// Checks `files`: at most [`MAX_FILES`], with distinct, safe paths,
/// content that decodes, and `max_files_bytes` in all.
fn files(asked: Vec<FileRequest>, limits: &ApiLimits) -> Result<Vec<InputFile>, FieldError> {
    if asked.len() > MAX_FILES {
        return Err(FieldError::invalid("files", format!("files holds at most {MAX_FILES} files")));
    }
    let mut files: Vec<InputFile> = Vec::with_capacity(asked.len());
    let mut total = 0;
    for (index, file) in asked.into_iter().enumerate() {
        let field = |name: &str| format!("files[{index}].{name}");
        let path = file.path.ok_or_else(|| FieldError::invalid(field("path"), "a file has no path"))?;
        InputFile::check_path(&path).map_err(|e| FieldError::invalid(field("path"), e))?;
        let content = file
            .content
            .ok_or_else(|| FieldError::invalid(field("content"), format!("file {path:?} has no content")))?;
        let file = InputFile { path, content, encoding: file.encoding.unwrap_or_default() };
        total += file.bytes().map_err(|e| FieldError::invalid(field("content"), e))?.len();
        if let Some(other) = files.iter().find(|f| clashes(&f.path, &file.path)) {
            let message = format!("file {:?} clashes with file {:?}", file.path, other.path);
            return Err(FieldError::invalid(field("path"), message));
        }
        files.push(file);
    }
    if total > limits.max_files_bytes {
        let message = format!("files hold {total} bytes; the limit is {}", limits.max_files_bytes);
        return Err(FieldError::too_large("files", "files_too_large", message));
    }
    Ok(files)
}

/// Two paths clash when they are the same, or one is a directory of the other.
fn clashes(a: &str, b: &str) -> bool {
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    long == short || long.strip_prefix(short).is_some_and(|rest| rest.starts_with('/'))
}
