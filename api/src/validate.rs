//! Turns a request body into a [`JobSpec`], or into an error that names the
//! field and says what to fix. Nothing here panics on input.

use runbox_common::{Compare, FileEncoding, InputFile, JobSpec, Language, MAX_RETURN_FILES, ReturnFiles};
use serde_json::{Map, Value};

use crate::config::{ApiLimits, MAX_WAIT_S};
use crate::error::ApiError;

/// Fields a job may have. Anything else is refused, so a typo such as
/// `timeout` for `timeout_ms` is caught instead of silently ignored.
/// `callback_url` is checked by `callbacks`, and `shared_runtime` read by
/// [`shared_runtime`], since neither is part of the spec the worker runs.
pub(crate) const FIELDS: &[&str] = &[
    "language",
    "code",
    "stdin",
    "timeout_ms",
    "memory_mb",
    "args",
    "expected_stdout",
    "compare",
    "files",
    "return_files",
    "callback_url",
    "shared_runtime",
];

/// Fields a file of `files` may have.
pub(crate) const FILE_FIELDS: &[&str] = &["path", "content", "encoding"];

/// Most files a job may have.
pub const MAX_FILES: usize = 64;

/// Largest `memory_mb` a job may ask for. It only ever lowers the worker's
/// cap (`RUNBOX_MEMORY_MB`), which the api does not know.
pub const MAX_MEMORY_MB: u32 = 1 << 20;

/// Most command-line arguments a job may have, and their total size.
pub const MAX_ARGS: usize = 256;
pub const MAX_ARGS_BYTES: usize = 64 * 1024;

#[cfg(test)]
pub fn job_spec(body: &[u8], limits: &ApiLimits) -> Result<JobSpec, ApiError> {
    job_spec_fields(&json_object(body)?, limits)
}

/// A request body that must be one JSON object, as its fields.
pub fn json_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| ApiError::InvalidJson(format!("body is not valid JSON: {e}")))?;
    let Value::Object(fields) = value else {
        return Err(ApiError::InvalidJson("body must be a JSON object".into()));
    };
    Ok(fields)
}

/// Validates one job given as a JSON object's fields.
pub fn job_spec_fields(fields: &Map<String, Value>, limits: &ApiLimits) -> Result<JobSpec, ApiError> {
    if let Some(unknown) = fields.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(ApiError::UnknownField(format!("unknown field {unknown:?}; a job has {}", FIELDS.join(", "))));
    }

    let language = match fields.get("language") {
        None | Some(Value::Null) => {
            return Err(ApiError::InvalidField("language is required: python, javascript or typescript".into()));
        }
        Some(Value::String(name)) => name.parse::<Language>().map_err(|e| ApiError::InvalidField(e.to_string()))?,
        Some(_) => return Err(ApiError::InvalidField("language must be a string".into())),
    };
    let code = string_field(fields, "code")?.ok_or_else(|| ApiError::InvalidField("code is required".into()))?;
    if code.trim().is_empty() {
        return Err(ApiError::InvalidField("code is empty".into()));
    }
    if code.len() > limits.max_code_bytes {
        return Err(ApiError::TooLarge {
            code: "code_too_large",
            message: format!("code is {} bytes; the limit is {}", code.len(), limits.max_code_bytes),
        });
    }
    let stdin = string_field(fields, "stdin")?.unwrap_or_default();
    if stdin.len() > limits.max_stdin_bytes {
        return Err(ApiError::TooLarge {
            code: "stdin_too_large",
            message: format!("stdin is {} bytes; the limit is {}", stdin.len(), limits.max_stdin_bytes),
        });
    }
    let timeout_ms = match fields.get("timeout_ms") {
        None | Some(Value::Null) => None,
        Some(value) => match whole_number(value) {
            Some(ms) if (1..=limits.timeouts.max_ms()).contains(&ms) => Some(ms),
            _ => {
                return Err(ApiError::InvalidField(format!(
                    "timeout_ms must be a whole number of milliseconds from 1 to {}",
                    limits.timeouts.max_ms()
                )));
            }
        },
    };
    let memory_mb = match fields.get("memory_mb") {
        None | Some(Value::Null) => None,
        Some(value) => match whole_number(value).and_then(|mb| u32::try_from(mb).ok()) {
            Some(mb) if (1..=MAX_MEMORY_MB).contains(&mb) => Some(mb),
            _ => {
                return Err(ApiError::InvalidField(format!(
                    "memory_mb must be a whole number of MiB from 1 to {MAX_MEMORY_MB}"
                )));
            }
        },
    };
    let args = match fields.get("args") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => {
            let args: Option<Vec<String>> = items.iter().map(|a| a.as_str().map(str::to_owned)).collect();
            let args = args.ok_or_else(|| ApiError::InvalidField("args must be an array of strings".into()))?;
            if args.len() > MAX_ARGS || args.iter().map(String::len).sum::<usize>() > MAX_ARGS_BYTES {
                return Err(ApiError::InvalidField(format!(
                    "args holds at most {MAX_ARGS} strings of {MAX_ARGS_BYTES} bytes in all"
                )));
            }
            args
        }
        Some(_) => return Err(ApiError::InvalidField("args must be an array of strings".into())),
    };
    let expected_stdout = string_field(fields, "expected_stdout")?;
    if expected_stdout.as_ref().is_some_and(|e| e.len() > limits.max_stdin_bytes) {
        return Err(ApiError::TooLarge {
            code: "expected_stdout_too_large",
            message: format!("expected_stdout is larger than the limit of {} bytes", limits.max_stdin_bytes),
        });
    }
    let compare = match string_field(fields, "compare")?.as_deref() {
        None | Some("exact") => Compare::Exact,
        Some("trim") => Compare::Trim,
        Some(other) => {
            return Err(ApiError::InvalidField(format!("compare must be \"exact\" or \"trim\", not {other:?}")));
        }
    };
    if compare != Compare::Exact && expected_stdout.is_none() {
        return Err(ApiError::InvalidField("compare needs expected_stdout".into()));
    }
    let files = files(fields.get("files"), limits)?;
    let return_files = return_files(fields.get("return_files"), language)?;
    shared_runtime(fields)?;
    Ok(JobSpec {
        language,
        code,
        stdin,
        timeout_ms: Some(timeout_ms.unwrap_or(limits.timeouts.default_ms())),
        memory_mb,
        args,
        expected_stdout,
        compare,
        files,
        return_files,
        shared_lane: None,
        session: None,
    })
}

/// Parses `shared_runtime`: `true`, `false`, or absent (None: the default
/// of the job's language, see [`lane`]).
pub fn shared_runtime(fields: &Map<String, Value>) -> Result<Option<bool>, ApiError> {
    match fields.get("shared_runtime") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(shared)) => Ok(Some(*shared)),
        Some(_) => Err(ApiError::InvalidField("shared_runtime must be true or false".into())),
    }
}

/// Where a job of `owner` runs: in the owner's long-lived children (the
/// lane whose key is the owner, so no two owners ever share a child), or
/// in a fresh child of its own (None).
///
/// Python runs in the owner's children unless the client says
/// `shared_runtime: false`: a fresh Pyodide costs about 0.4 CPU-s, a warm
/// child's next interpreter much less. JavaScript and TypeScript run in a
/// fresh child unless the client asks (`true`): a fresh JS child costs
/// about 40 ms of CPU, so the lane saves little there, and it changes how a
/// JS program's stdin and files reach it (the worker keeps such jobs in a
/// fresh child whatever is asked). A session's steps never take a lane.
pub fn lane(spec: &JobSpec, asked: Option<bool>, owner: &str) -> Option<String> {
    let shared = asked.unwrap_or(spec.language == Language::Python);
    (shared && spec.session.is_none()).then(|| owner.to_owned())
}

/// Parses `return_files`: `true`, `false`, or a list of up to
/// [`MAX_RETURN_FILES`] distinct, safe paths. Python only: a JS or TS child
/// has no write access, so it has no files to return.
fn return_files(value: Option<&Value>, language: Language) -> Result<ReturnFiles, ApiError> {
    let wanted = match value {
        None | Some(Value::Null | Value::Bool(false)) => return Ok(ReturnFiles::None),
        Some(Value::Bool(true)) => ReturnFiles::All,
        Some(Value::Array(items)) if items.len() <= MAX_RETURN_FILES => {
            let mut paths: Vec<String> = Vec::with_capacity(items.len());
            for item in items {
                let Some(path) = item.as_str() else {
                    return Err(ApiError::InvalidField("return_files must be true, false or an array of paths".into()));
                };
                InputFile::check_path(path).map_err(|e| ApiError::InvalidField(format!("return_files: {e}")))?;
                if paths.iter().any(|p| p == path) {
                    return Err(ApiError::InvalidField(format!("return_files names {path:?} twice")));
                }
                paths.push(path.to_owned());
            }
            ReturnFiles::Paths(paths)
        }
        Some(Value::Array(_)) => {
            return Err(ApiError::InvalidField(format!("return_files names at most {MAX_RETURN_FILES} paths")));
        }
        Some(_) => return Err(ApiError::InvalidField("return_files must be true, false or an array of paths".into())),
    };
    if language != Language::Python {
        return Err(ApiError::InvalidField(
            "return_files is for Python jobs: JavaScript and TypeScript programs have no write access".into(),
        ));
    }
    Ok(wanted)
}

/// Parses `files`: at most [`MAX_FILES`] objects `{path, content,
/// encoding?}` with distinct, safe paths and `max_files_bytes` in all.
fn files(value: Option<&Value>, limits: &ApiLimits) -> Result<Vec<InputFile>, ApiError> {
    let items = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) if items.len() <= MAX_FILES => items,
        Some(Value::Array(_)) => {
            return Err(ApiError::InvalidField(format!("files holds at most {MAX_FILES} files")));
        }
        Some(_) => return Err(ApiError::InvalidField("files must be an array of {path, content, encoding}".into())),
    };
    let mut files = Vec::with_capacity(items.len());
    let mut total = 0;
    for item in items {
        let Value::Object(fields) = item else {
            return Err(ApiError::InvalidField("each file must be an object {path, content, encoding}".into()));
        };
        let path = string_field(fields, "path")?.ok_or_else(|| ApiError::InvalidField("a file has no path".into()))?;
        InputFile::check_path(&path).map_err(ApiError::InvalidField)?;
        if let Some(unknown) = fields.keys().find(|k| !FILE_FIELDS.contains(&k.as_str())) {
            return Err(ApiError::UnknownField(format!("file {path:?}: unknown field {unknown:?}")));
        }
        let content = string_field(fields, "content")?
            .ok_or_else(|| ApiError::InvalidField(format!("file {path:?} has no content")))?;
        let encoding = match string_field(fields, "encoding")?.as_deref() {
            None | Some("utf8") => FileEncoding::Utf8,
            Some("base64") => FileEncoding::Base64,
            Some(other) => {
                return Err(ApiError::InvalidField(format!(
                    "file {path:?}: encoding must be \"utf8\" or \"base64\", not {other:?}"
                )));
            }
        };
        let file = InputFile { path, content, encoding };
        total += file.bytes().map_err(ApiError::InvalidField)?.len();
        if let Some(other) = files.iter().find(|f: &&InputFile| clashes(&f.path, &file.path)) {
            return Err(ApiError::InvalidField(format!("file {:?} clashes with file {:?}", file.path, other.path)));
        }
        files.push(file);
    }
    if total > limits.max_files_bytes {
        return Err(ApiError::TooLarge {
            code: "files_too_large",
            message: format!("files hold {total} bytes; the limit is {}", limits.max_files_bytes),
        });
    }
    Ok(files)
}

/// Two paths clash when they are the same, or one is a directory of the other.
fn clashes(a: &str, b: &str) -> bool {
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    long == short || long.strip_prefix(short).is_some_and(|rest| rest.starts_with('/'))
}

/// A JSON number that is a whole number, such as `5` or `5.0` (JSON does
/// not tell them apart, and some clients write every number as a float).
pub fn whole_number(value: &Value) -> Option<u64> {
    match value.as_u64() {
        Some(n) => Some(n),
        None => value.as_f64().filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= u64::MAX as f64).map(|f| f as u64),
    }
}

fn string_field(fields: &Map<String, Value>, name: &str) -> Result<Option<String>, ApiError> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ApiError::InvalidField(format!("{name} must be a string"))),
    }
}

/// Parses the `wait` query parameter: whole seconds, 0 to [`MAX_WAIT_S`].
pub fn wait_seconds(raw: Option<&str>) -> Result<u64, ApiError> {
    match raw {
        None => Ok(0),
        Some(text) => match text.parse::<u64>() {
            Ok(s) if s <= MAX_WAIT_S => Ok(s),
            _ => Err(ApiError::InvalidWait(MAX_WAIT_S)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> Result<JobSpec, ApiError> {
        job_spec(body.as_bytes(), &ApiLimits::default())
    }

    #[test]
    fn accepts_a_full_job_and_fills_the_default_timeout() {
        let spec = parse(r#"{"language":"py","code":"print(1)","stdin":"x"}"#).expect("valid");
        assert_eq!(spec.language, Language::Python);
        assert_eq!(spec.timeout_ms, Some(ApiLimits::default().timeouts.default_ms()));
        let spec = parse(r#"{"language":"typescript","code":"1","timeout_ms":60000}"#).expect("valid");
        assert_eq!(spec.timeout_ms, Some(60_000));
        // JSON has one number type: 2500.0 is the whole number 2500.
        let spec = parse(r#"{"language":"js","code":"1","timeout_ms":2500.0}"#).expect("valid");
        assert_eq!(spec.timeout_ms, Some(2500));
    }

    #[test]
    fn names_what_is_wrong() {
        let cases = [
            ("{", "body is not valid JSON"),
            ("[]", "body must be a JSON object"),
            (r#"{"code":"1"}"#, "language is required"),
            (r#"{"language":"ruby","code":"1"}"#, "unknown language"),
            (r#"{"language":5,"code":"1"}"#, "language must be a string"),
            (r#"{"language":"js"}"#, "code is required"),
            (r#"{"language":"js","code":7}"#, "code must be a string"),
            (r#"{"language":"js","code":"  "}"#, "code is empty"),
            (r#"{"language":"js","code":"1","stdin":[]}"#, "stdin must be a string"),
            (r#"{"language":"js","code":"1","timeout_ms":0}"#, "timeout_ms must be"),
            (r#"{"language":"js","code":"1","timeout_ms":1.5}"#, "timeout_ms must be"),
            (r#"{"language":"js","code":"1","timeout_ms":-1.0}"#, "timeout_ms must be"),
            (r#"{"language":"js","code":"1","timeout_ms":1e300}"#, "timeout_ms must be"),
            (r#"{"language":"js","code":"1","timeout_ms":600001}"#, "timeout_ms must be"),
            (r#"{"language":"js","code":"1","timeout":5}"#, "unknown field \"timeout\""),
            (r#"{"language":"js","code":"1","args":"a b"}"#, "args must be an array of strings"),
            (r#"{"language":"js","code":"1","args":[1]}"#, "args must be an array of strings"),
            (r#"{"language":"js","code":"1","expected_stdout":1}"#, "expected_stdout must be a string"),
            (r#"{"language":"js","code":"1","expected_stdout":"1","compare":"fuzzy"}"#, "compare must be"),
            (r#"{"language":"js","code":"1","compare":"trim"}"#, "compare needs expected_stdout"),
            (r#"{"language":"py","code":"1","shared_runtime":"no"}"#, "shared_runtime must be true or false"),
            (r#"{"language":"py","code":"1","shared_runtime":0}"#, "shared_runtime must be true or false"),
            (r#"{"language":"js","code":"1","files":{}}"#, "files must be an array"),
            (r#"{"language":"js","code":"1","files":[{"content":"x"}]}"#, "a file has no path"),
            (
                r#"{"language":"js","code":"1","files":[{"path":"../x","content":"x"}]}"#,
                "\"../x\" is not a valid file path",
            ),
            (r#"{"language":"js","code":"1","files":[{"path":"/etc/x","content":"x"}]}"#, "not a valid file path"),
            (r#"{"language":"js","code":"1","files":[{"path":"a","content":"x","mode":1}]}"#, "unknown field \"mode\""),
            (
                r#"{"language":"js","code":"1","files":[{"path":"a","content":"%","encoding":"base64"}]}"#,
                "not valid base64",
            ),
            (
                r#"{"language":"js","code":"1","files":[{"path":"a","content":"x","encoding":"hex"}]}"#,
                "encoding must be",
            ),
            (
                r#"{"language":"js","code":"1","files":[{"path":"a","content":"x"},{"path":"a/b","content":"y"}]}"#,
                "clashes with file \"a\"",
            ),
        ];
        for (body, expected) in cases {
            let error = parse(body).expect_err(body);
            assert!(error.to_string().contains(expected), "{body}: {error}");
        }
    }

    #[test]
    fn oversized_code_and_stdin_are_413() {
        let limits = ApiLimits { max_code_bytes: 10, max_stdin_bytes: 5, ..ApiLimits::default() };
        let error = job_spec(br#"{"language":"js","code":"12345678901"}"#, &limits).expect_err("too large");
        assert!(matches!(error, ApiError::TooLarge { code: "code_too_large", .. }));
        let error = job_spec(br#"{"language":"js","code":"1","stdin":"123456"}"#, &limits).expect_err("too large");
        assert!(matches!(error, ApiError::TooLarge { code: "stdin_too_large", .. }));
    }

    #[test]
    fn files_are_capped_in_total() {
        let limits = ApiLimits { max_files_bytes: 4, ..ApiLimits::default() };
        let body = br#"{"language":"js","code":"1","files":[{"path":"a","content":"aGVsbG8=","encoding":"base64"}]}"#;
        let error = job_spec(body, &limits).expect_err("too large");
        assert!(matches!(error, ApiError::TooLarge { code: "files_too_large", .. }), "{error}");
        let body =
            br#"{"language":"js","code":"1","files":[{"path":"a","content":"abcd"},{"path":"ab","content":""}]}"#;
        assert_eq!(job_spec(body, &limits).expect("fits").files.len(), 2);
    }

    #[test]
    fn python_runs_in_its_owners_children_unless_it_opts_out() {
        let lane_of = |body: &str| {
            let fields = json_object(body.as_bytes()).expect("object");
            let spec = job_spec_fields(&fields, &ApiLimits::default()).expect("valid");
            lane(&spec, shared_runtime(&fields).expect("valid"), "alice")
        };
        assert_eq!(lane_of(r#"{"language":"py","code":"1"}"#).as_deref(), Some("alice"));
        assert_eq!(lane_of(r#"{"language":"py","code":"1","shared_runtime":null}"#).as_deref(), Some("alice"));
        assert_eq!(lane_of(r#"{"language":"py","code":"1","shared_runtime":true}"#).as_deref(), Some("alice"));
        assert_eq!(lane_of(r#"{"language":"py","code":"1","shared_runtime":false}"#), None);
        assert_eq!(lane_of(r#"{"language":"js","code":"1"}"#), None);
        assert_eq!(lane_of(r#"{"language":"ts","code":"1","shared_runtime":false}"#), None);
        assert_eq!(lane_of(r#"{"language":"ts","code":"1","shared_runtime":true}"#).as_deref(), Some("alice"));
        let mut step = parse(r#"{"language":"py","code":"1"}"#).expect("valid");
        step.session = Some(runbox_common::SessionTask { id: "s".into(), op: runbox_common::SessionOp::Exec });
        assert_eq!(lane(&step, Some(true), "alice"), None, "a session's steps take no lane");
    }

    #[test]
    fn wait_is_bounded() {
        assert_eq!(wait_seconds(None).expect("none"), 0);
        assert_eq!(wait_seconds(Some("60")).expect("max"), 60);
        for bad in ["61", "-1", "1.5", "soon"] {
            assert!(wait_seconds(Some(bad)).is_err(), "{bad}");
        }
    }
}
