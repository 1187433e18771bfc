//! Request bodies: one type per body, which both parses it and describes it
//! in `/openapi.json`, and the checks serde cannot make.
//!
//! Each body is a `#[derive(Deserialize, ToSchema)]` type that refuses
//! unknown fields. [`parse`] reads one, and when serde cannot, it names the
//! field (`files[2].encoding`) and says what that field must be. Each
//! body's `validate` then checks what a type cannot state (sizes, bounds,
//! one field needing another) and turns it into what the worker runs.
//!
//! - `job`: `POST /v1/jobs`, and a program as batches, MCP and the
//!   compatible APIs give one ([`JobRequest`], [`Program`]).
//! - `batch`: `POST /v1/batches`, jobs one by one or a program and its cases.
//! - `session`: `POST /v1/sessions` and an exec.

mod batch;
mod job;
mod session;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, header};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

pub use batch::{BatchRequest, CaseRequest, CasesBatch, JobsBatch};
pub use job::{
    FilePath, FileRequest, JobRequest, LanguageName, MAX_ARGS, MAX_FILES, MAX_MEMORY_MB, Program, ReturnFilesRequest,
    lane,
};
pub use session::{ExecRequest, SessionLanguage, SessionRequest};

use crate::config::MAX_WAIT_S;
use crate::error::ApiError;
pub use crate::error::FieldError;

/// Reads a JSON request body as `T`, or says what is wrong with it: not
/// JSON, not an object, or which field is not what `T` takes.
pub fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    Ok(from_value(json_object(body)?)?)
}

/// A request body that must be one JSON object.
fn json_object(body: &[u8]) -> Result<serde_json::Value, ApiError> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| ApiError::InvalidJson(format!("body is not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(ApiError::InvalidJson("body must be a JSON object".into()));
    }
    Ok(value)
}

/// Reads an already parsed JSON value as `T` (a batch's job, an MCP
/// tool's arguments), naming the field serde could not read.
pub fn from_value<T: DeserializeOwned>(value: serde_json::Value) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(value).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner().to_string();
        field_error(if path == "." { "" } else { &path }, &inner)
    })
}

/// Turns serde's message about the field at `path` into one that says what
/// the field must be.
fn field_error(path: &str, serde_message: &str) -> FieldError {
    // serde writes "unknown field `x`, expected one of `a`, `b`".
    if let Some(rest) = serde_message.strip_prefix("unknown field `") {
        let (name, expected) = rest.split_once('`').unwrap_or((rest, ""));
        let field = path.to_owned();
        let takes = expected.trim_start_matches(", expected ").trim_start_matches("one of ").replace('`', "");
        let message = if takes.is_empty() {
            format!("unknown field {name:?}")
        } else {
            format!("unknown field {name:?}; this object takes {takes}")
        };
        return FieldError::unknown(field, message);
    }
    if let Some(rest) = serde_message.strip_prefix("missing field `") {
        let name = rest.split('`').next().unwrap_or(rest);
        let field = if path.is_empty() { name.to_owned() } else { format!("{path}.{name}") };
        return FieldError::invalid(field, format!("{name} is required"));
    }
    let leaf = path.rsplit(['.', '[']).next().unwrap_or(path).trim_end_matches(']');
    let leaf = if leaf.chars().all(|c| c.is_ascii_digit()) {
        // An item of a list: the list's name says what it holds.
        path.rsplit_once('[').map_or(leaf, |(list, _)| list.rsplit('.').next().unwrap_or(list))
    } else {
        leaf
    };
    let message = match hint(leaf) {
        Some(hint) => format!("{path} {hint}"),
        None if path.is_empty() => serde_message.to_owned(),
        None => format!("{path}: {serde_message}"),
    };
    FieldError::invalid(path, message)
}

/// What a field of any request body must be, by its name.
fn hint(field: &str) -> Option<&'static str> {
    Some(match field {
        "language" => "must be python, javascript or typescript (or py, js, ts)",
        "code" | "stdin" | "expected_stdout" | "content" | "from_checkpoint" | "callback_url" => "must be a string",
        "timeout_ms" => "must be a whole number of milliseconds (GET /v1/runtimes gives the most)",
        "memory_mb" => "must be a whole number of MiB",
        "idle_timeout_s" => "must be a whole number of seconds",
        "args" => "must be an array of strings",
        "compare" => "must be \"exact\" or \"trim\"",
        "encoding" => "must be \"utf8\" or \"base64\"",
        "files" => "must be an array of {path, content, encoding}",
        "path" => "must be a relative file path",
        "return_files" => "must be true, false or an array of paths",
        "shared_runtime" | "stop_on_first_failure" => "must be true or false",
        "jobs" => "must be an array of jobs",
        "cases" => "must be an array of {stdin, args, expected_stdout}",
        "program" => "must be a job: {language, code, …}",
        _ => return None,
    })
}

/// Deserializes a whole number that JSON may write as `5` or `5.0` (JSON
/// does not tell them apart, and some clients write every number as a
/// float); null is absent.
pub(crate) fn whole_number<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    let Some(number) = Option::<serde_json::Number>::deserialize(deserializer)? else { return Ok(None) };
    whole(&number).map(Some).ok_or_else(|| serde::de::Error::custom(format!("{number} is not a whole number")))
}

/// `number` as a whole number, if it is one.
fn whole(number: &serde_json::Number) -> Option<u64> {
    number.as_u64().or_else(|| {
        number.as_f64().filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= u64::MAX as f64).map(|f| f as u64)
    })
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

/// Longest `Idempotency-Key` accepted.
const MAX_IDEMPOTENCY_KEY: usize = 255;

/// The request's `Idempotency-Key`, if any: 1 to 255 printable ASCII characters.
pub(crate) fn idempotency_key(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    let Some(value) = headers.get("idempotency-key") else { return Ok(None) };
    match value.to_str() {
        Ok(key) if !key.is_empty() && key.len() <= MAX_IDEMPOTENCY_KEY && key.bytes().all(|b| b.is_ascii_graphic()) => {
            Ok(Some(key))
        }
        _ => Err(ApiError::invalid(
            "Idempotency-Key",
            format!("Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} printable ASCII characters without spaces"),
        )),
    }
}

/// The body of a JSON request, or the error that says what is wrong with it.
pub(crate) fn json_body(
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    limit: usize,
) -> Result<Bytes, ApiError> {
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !is_json {
        return Err(ApiError::UnsupportedMediaType);
    }
    body.map_err(|rejection| ApiError::TooLarge {
        code: "payload_too_large",
        message: format!("request body rejected ({rejection}); the limit is {limit} bytes"),
    })
}

#[cfg(test)]
mod tests {
    use runbox_common::{JobSpec, Language};

    use super::*;
    use crate::config::ApiLimits;

    fn job_within(body: &str, limits: &ApiLimits) -> Result<JobSpec, ApiError> {
        let (program, _, _) = parse::<JobRequest>(body.as_bytes())?.split();
        Ok(program.validate(limits)?)
    }

    fn job(body: &str) -> Result<JobSpec, ApiError> {
        job_within(body, &ApiLimits::default())
    }

    /// The field an error names, or "" for one about the whole body.
    fn field_of(error: &ApiError) -> &str {
        match error {
            ApiError::Field(error) => &error.field,
            _ => "",
        }
    }

    #[test]
    fn accepts_a_full_job_and_fills_the_default_timeout() {
        let spec = job(r#"{"language":"py","code":"print(1)","stdin":"x"}"#).expect("valid");
        assert_eq!(spec.language, Language::Python);
        assert_eq!(spec.timeout_ms, Some(ApiLimits::default().timeouts.default_ms()));
        let spec = job(r#"{"language":"typescript","code":"1","timeout_ms":60000}"#).expect("valid");
        assert_eq!(spec.timeout_ms, Some(60_000));
        // JSON has one number type: 2500.0 is the whole number 2500.
        let spec = job(r#"{"language":"js","code":"1","timeout_ms":2500.0}"#).expect("valid");
        assert_eq!(spec.timeout_ms, Some(2500));
        // Null is absent.
        let spec = job(r#"{"language":"js","code":"1","stdin":null,"timeout_ms":null,"files":null}"#).expect("valid");
        assert!(spec.stdin.is_empty() && spec.files.is_empty());
    }

    #[test]
    fn names_the_field_and_what_to_fix() {
        let cases = [
            ("{", "", "body is not valid JSON"),
            ("[]", "", "body must be a JSON object"),
            (r#"{"code":"1"}"#, "language", "language is required"),
            (r#"{"language":"ruby","code":"1"}"#, "language", "language must be python, javascript or typescript"),
            (r#"{"language":5,"code":"1"}"#, "language", "language must be python, javascript or typescript"),
            (r#"{"language":"js"}"#, "code", "code is required"),
            (r#"{"language":"js","code":7}"#, "code", "code must be a string"),
            (r#"{"language":"js","code":"  "}"#, "code", "code is empty"),
            (r#"{"language":"js","code":"1","stdin":[]}"#, "stdin", "stdin must be a string"),
            (r#"{"language":"js","code":"1","timeout_ms":0}"#, "timeout_ms", "timeout_ms must be"),
            (r#"{"language":"js","code":"1","timeout_ms":1.5}"#, "timeout_ms", "timeout_ms must be"),
            (r#"{"language":"js","code":"1","timeout_ms":-1.0}"#, "timeout_ms", "timeout_ms must be"),
            (r#"{"language":"js","code":"1","timeout_ms":1e300}"#, "timeout_ms", "timeout_ms must be"),
            (r#"{"language":"js","code":"1","timeout_ms":"5"}"#, "timeout_ms", "timeout_ms must be"),
            (r#"{"language":"js","code":"1","timeout_ms":600001}"#, "timeout_ms", "from 1 to 60000"),
            (r#"{"language":"js","code":"1","memory_mb":0}"#, "memory_mb", "memory_mb must be"),
            (r#"{"language":"js","code":"1","timeout":5}"#, "timeout", "unknown field \"timeout\""),
            (r#"{"language":"js","code":"1","args":"a b"}"#, "args", "args must be an array of strings"),
            (r#"{"language":"js","code":"1","args":[1]}"#, "args[0]", "args[0] must be an array of strings"),
            (r#"{"language":"js","code":"1","expected_stdout":1}"#, "expected_stdout", "must be a string"),
            (r#"{"language":"js","code":"1","expected_stdout":"1","compare":"fuzzy"}"#, "compare", "compare must be"),
            (r#"{"language":"js","code":"1","compare":"trim"}"#, "compare", "compare needs expected_stdout"),
            (r#"{"language":"py","code":"1","shared_runtime":"no"}"#, "shared_runtime", "must be true or false"),
            (r#"{"language":"py","code":"1","shared_runtime":0}"#, "shared_runtime", "must be true or false"),
            (r#"{"language":"js","code":"1","return_files":true}"#, "return_files", "is for Python jobs"),
            (r#"{"language":"py","code":"1","return_files":"a"}"#, "return_files", "true, false or an array"),
            (r#"{"language":"py","code":"1","return_files":["a","a"]}"#, "return_files[1]", "names \"a\" twice"),
            (r#"{"language":"js","code":"1","files":{}}"#, "files", "files must be an array"),
            (r#"{"language":"js","code":"1","files":[{"content":"x"}]}"#, "files[0].path", "a file has no path"),
            (
                r#"{"language":"js","code":"1","files":[{"path":"../x","content":"x"}]}"#,
                "files[0].path",
                "\"../x\" is not a valid file path",
            ),
            (
                r#"{"language":"js","code":"1","files":[{"path":"/etc/x","content":"x"}]}"#,
                "files[0].path",
                "not a valid file path",
            ),
            (
                r#"{"language":"js","code":"1","files":[{"path":"a","content":"x","mode":1}]}"#,
                "files[0].mode",
                "unknown field \"mode\"",
            ),
            (
                r#"{"language":"js","code":"1","files":[{"path":"a","content":"%","encoding":"base64"}]}"#,
                "files[0].content",
                "not valid base64",
            ),
            (
                r#"{"language":"js","code":"1","files":[{"path":"a","content":"x","encoding":"hex"}]}"#,
                "files[0].encoding",
                "files[0].encoding must be \"utf8\" or \"base64\"",
            ),
            (
                r#"{"language":"js","code":"1","files":[{"path":"a","content":"x"},{"path":"a/b","content":"y"}]}"#,
                "files[1].path",
                "clashes with file \"a\"",
            ),
        ];
        for (body, field, expected) in cases {
            let error = job(body).expect_err(body);
            assert!(error.to_string().contains(expected), "{body}: {error}");
            assert_eq!(field_of(&error), field, "{body}: {error}");
        }
    }

    #[test]
    fn oversized_code_stdin_and_files_are_413_naming_the_field() {
        let limits = ApiLimits { max_code_bytes: 10, max_stdin_bytes: 5, max_files_bytes: 4, ..ApiLimits::default() };
        let too_large = |body: &str| match job_within(body, &limits) {
            Err(ApiError::Field(error)) => (error.code, error.field),
            other => panic!("{body}: {other:?}"),
        };
        assert_eq!(too_large(r#"{"language":"js","code":"12345678901"}"#), ("code_too_large", "code".into()));
        assert_eq!(too_large(r#"{"language":"js","code":"1","stdin":"123456"}"#), ("stdin_too_large", "stdin".into()));
        let files = r#"{"language":"js","code":"1","files":[{"path":"a","content":"aGVsbG8=","encoding":"base64"}]}"#;
        assert_eq!(too_large(files), ("files_too_large", "files".into()));
        let error = job_within(r#"{"language":"js","code":"12345678901"}"#, &limits).expect_err("too large");
        assert_eq!(error.status_and_code().0, axum::http::StatusCode::PAYLOAD_TOO_LARGE);
        let fits = r#"{"language":"js","code":"1","files":[{"path":"a","content":"abcd"},{"path":"ab","content":""}]}"#;
        assert_eq!(job_within(fits, &limits).expect("fits").files.len(), 2);
    }

    #[test]
    fn python_and_typescript_run_in_their_owners_children_unless_they_opt_out() {
        let lane_of = |body: &str| {
            let (program, _, shared_runtime) = parse::<JobRequest>(body.as_bytes()).expect("parses").split();
            lane(&program.validate(&ApiLimits::default()).expect("valid"), shared_runtime, "alice")
        };
        assert_eq!(lane_of(r#"{"language":"py","code":"1"}"#).as_deref(), Some("alice"));
        assert_eq!(lane_of(r#"{"language":"py","code":"1","shared_runtime":null}"#).as_deref(), Some("alice"));
        assert_eq!(lane_of(r#"{"language":"py","code":"1","shared_runtime":true}"#).as_deref(), Some("alice"));
        assert_eq!(lane_of(r#"{"language":"py","code":"1","shared_runtime":false}"#), None);
        assert_eq!(lane_of(r#"{"language":"js","code":"1"}"#), None);
        assert_eq!(lane_of(r#"{"language":"js","code":"1","shared_runtime":true}"#).as_deref(), Some("alice"));
        assert_eq!(lane_of(r#"{"language":"ts","code":"1"}"#).as_deref(), Some("alice"));
        assert_eq!(lane_of(r#"{"language":"ts","code":"1","shared_runtime":false}"#), None);
        assert_eq!(lane_of(r#"{"language":"ts","code":"1","shared_runtime":true}"#).as_deref(), Some("alice"));
        let mut step = job(r#"{"language":"py","code":"1"}"#).expect("valid");
        step.session = Some(runbox_common::SessionTask { id: "s".into(), op: runbox_common::SessionOp::Exec });
        assert_eq!(lane(&step, Some(true), "alice"), None, "a session's steps take no lane");
    }

    #[test]
    fn a_batch_reports_each_bad_job_by_index_and_field() {
        let limits = ApiLimits::default();
        let batch =
            |body: &str| BatchRequest::parse(body.as_bytes(), limits.max_batch).and_then(|b| Ok(b.validate(&limits)?));
        let checked = batch(
            r#"{"jobs":[{"language":"py","code":"1"},{"language":"py","code":1},{"language":"py","code":"1","callback_url":"x"}]}"#,
        )
        .expect("a batch");
        let errors: Vec<(String, &str)> = checked
            .jobs
            .iter()
            .filter_map(|j| j.as_ref().err())
            .map(|e| (e.field.clone(), e.message.as_str()))
            .collect();
        assert!(checked.jobs[0].is_ok());
        assert_eq!(errors[0], ("code".into(), "code must be a string"));
        assert_eq!(errors[1], ("callback_url".into(), "callback_url belongs on the batch, not on its jobs"));

        // A case takes the program's fields it does not set, and is checked with them.
        let checked = batch(
            r#"{"program":{"language":"py","code":"1","compare":"trim"},"cases":[{"expected_stdout":"1"},{"stdin":"x"},{"stdout":"1"}]}"#,
        )
        .expect("a batch");
        assert_eq!(checked.shared_runtime, Some(true), "cases share the owner's children by default");
        assert!(checked.jobs[0].as_ref().is_ok_and(|j| j.expected_stdout.as_deref() == Some("1")));
        assert_eq!(checked.jobs[1].as_ref().expect_err("no expected_stdout").field, "compare");
        assert_eq!(checked.jobs[2].as_ref().expect_err("unknown").code, "unknown_field");

        let checked = batch(r#"{"jobs":[1]}"#).expect("a batch");
        assert_eq!(checked.jobs[0].as_ref().expect_err("not an object").message, "a job must be a JSON object");

        // A null field is an absent one, whichever shape the batch has.
        let checked = batch(r#"{"jobs":null,"program":{"language":"py","code":"1"},"cases":[{}],"callback_url":null}"#);
        assert!(checked.is_ok_and(|b| b.jobs.len() == 1));
        let checked = batch(r#"{"jobs":[{"language":"py","code":"1"}],"program":null,"cases":null}"#);
        assert!(checked.is_ok_and(|b| b.jobs.len() == 1));

        // Too many cases are refused before the program is copied into each.
        let limits = ApiLimits { max_batch: 2, ..ApiLimits::default() };
        let error = BatchRequest::parse(br#"{"program":{"language":"py","code":"1"},"cases":[{},{},{}]}"#, 2)
            .expect_err("refused");
        assert!(error.to_string().contains("a batch holds 1 to 2"), "{error}");
        let fits = BatchRequest::parse(br#"{"program":{"language":"py","code":"1"},"cases":[{},{}]}"#, 2);
        assert_eq!(fits.expect("fits").validate(&limits).expect("valid").jobs.len(), 2);

        for (body, expected) in [
            (r#"{}"#, "jobs is required (or program and cases)"),
            (r#"{"jobs":[],"program":{}}"#, "give either jobs, or program and cases"),
            (r#"{"jobs":[]}"#, "a batch holds 1 to"),
            (r#"{"jobs":{}}"#, "jobs must be an array of jobs"),
            (r#"{"jobs":[{"language":"py","code":"1"}],"stop_on_first_failure":1}"#, "must be true or false"),
            (r#"{"jobs":[{"language":"py","code":"1"}],"typo":1}"#, "unknown field \"typo\""),
            (r#"{"job":[{"language":"py","code":"1"}]}"#, "unknown field \"job\""),
            (r#"{"program":{"language":"py","code":"1","shared_runtime":true},"cases":[{}]}"#, "not on its program"),
        ] {
            let error = batch(body).err().unwrap_or_else(|| panic!("{body} is refused"));
            assert!(error.to_string().contains(expected), "{body}: {error}");
        }
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
