//! A batch's body, `POST /v1/batches`: jobs one by one, or one program and
//! its test cases. Every job is checked, and each bad one is reported with
//! its index, before anything is queued.

use runbox_common::JobSpec;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use utoipa::{PartialSchema, ToSchema};

use super::{FieldError, Program, from_value};
use crate::config::ApiLimits;
use crate::error::ApiError;

/// The body of `POST /v1/batches`: `jobs`, or one `program` and its
/// `cases`. Each job is validated as `POST /v1/jobs` validates it; if any is
/// invalid, nothing is queued.
#[derive(Debug)]
pub enum BatchRequest {
    Jobs(JobsBatch),
    Cases(CasesBatch),
}

/// Described as one of its two shapes (written out: the parser below picks
/// the shape by its fields, which a derived schema cannot know).
impl utoipa::PartialSchema for BatchRequest {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::Schema> {
        use utoipa::openapi::schema::OneOfBuilder;
        OneOfBuilder::new()
            .description(Some(
                "The body of `POST /v1/batches`: `jobs`, or one `program` and its\n`cases`. Each job is validated \
                 as `POST /v1/jobs` validates it; if any is\ninvalid, nothing is queued.",
            ))
            .item(utoipa::openapi::Ref::from_schema_name("JobsBatch"))
            .item(utoipa::openapi::Ref::from_schema_name("CasesBatch"))
            .into()
    }
}

impl ToSchema for BatchRequest {
    fn schemas(schemas: &mut Vec<(String, utoipa::openapi::RefOr<utoipa::openapi::Schema>)>) {
        schemas.push((JobsBatch::name().into(), JobsBatch::schema()));
        schemas.push((CasesBatch::name().into(), CasesBatch::schema()));
    }
}

/// A batch of jobs given one by one.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobsBatch {
    /// 1 to `max_batch` jobs.
    #[schema(value_type = Vec<Program>, min_items = 1)]
    jobs: Vec<Item<Program>>,
    /// Cancel the jobs still queued once one fails.
    stop_on_first_failure: Option<bool>,
    /// Where the jobs run, as a job's `shared_runtime` says: absent, Python
    /// and TypeScript jobs in the caller's long-lived children and
    /// JavaScript jobs in fresh children; `true`, every job in the caller's
    /// long-lived children;
    /// `false`, every job in a fresh child of its own.
    shared_runtime: Option<bool>,
    /// Where to POST the finished batch, signed; as a job's `callback_url`.
    #[schema(format = "uri")]
    callback_url: Option<String>,
}

/// A batch of test cases: one program run once per case.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CasesBatch {
    /// The job every case runs; each case replaces its stdin, args and
    /// expected_stdout.
    program: Program,
    /// 1 to `max_batch` cases.
    #[schema(value_type = Vec<CaseRequest>, min_items = 1)]
    cases: Vec<Item<CaseRequest>>,
    stop_on_first_failure: Option<bool>,
    /// The caller's long-lived children for every case, in any language:
    /// the default here (`true`). `false`: a fresh child per case.
    shared_runtime: Option<bool>,
    #[schema(format = "uri")]
    callback_url: Option<String>,
}

/// One test case: the program's input and what it should print. A field
/// left out (or null) is the program's.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CaseRequest {
    stdin: Option<String>,
    args: Option<Vec<String>>,
    expected_stdout: Option<String>,
}

/// One element of a list that is read on its own, so that one bad job is
/// reported with its index while the others are still checked.
#[derive(Debug)]
struct Item<T>(Result<T, FieldError>);

impl<'de, T: DeserializeOwned> Deserialize<'de> for Item<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        Ok(Item(from_value(value)))
    }
}

impl BatchRequest {
    /// Reads a batch's body: `jobs` makes it a batch of jobs, `program` or
    /// `cases` one of cases, and each is then read as its own type, so that
    /// an error names its field.
    pub fn parse(body: &[u8], max_batch: usize) -> Result<BatchRequest, ApiError> {
        let serde_json::Value::Object(mut fields) = super::json_object(body)? else { unreachable!("an object") };
        // A null field is an absent one, as in a job.
        fields.retain(|_, value| !value.is_null());
        let (jobs, cases) =
            (fields.contains_key("jobs"), fields.contains_key("program") || fields.contains_key("cases"));
        if jobs && cases {
            return Err(FieldError::invalid("jobs", "give either jobs, or program and cases").into());
        }
        // Counted before any job is read or a program copied per case, so
        // a body of millions of `{}` costs no more than its JSON.
        for list in ["jobs", "cases"] {
            if let Some(items) = fields.get(list).and_then(serde_json::Value::as_array)
                && items.len() > max_batch
            {
                let message = format!("the batch holds {} jobs; a batch holds 1 to {max_batch}", items.len());
                return Err(FieldError::invalid(list, message).into());
            }
        }
        let value = serde_json::Value::Object(fields);
        Ok(match (jobs, cases) {
            (true, false) => BatchRequest::Jobs(from_value(value)?),
            (false, true) => BatchRequest::Cases(from_value(value).map_err(|e| item_error(e, "program"))?),
            (false, false) => match from_value::<JobsBatch>(value) {
                // A misspelt field is named as such.
                Err(error) if error.code == "unknown_field" => return Err(error.into()),
                _ => return Err(FieldError::invalid("jobs", "jobs is required (or program and cases)").into()),
            },
            (true, true) => unreachable!("refused above"),
        })
    }
}

/// A batch as checked: its jobs, or each bad one with its index.
pub struct BatchJobs {
    pub jobs: Vec<Result<JobSpec, FieldError>>,
    pub stop_on_first_failure: bool,
    pub shared_runtime: Option<bool>,
    pub callback_url: Option<String>,
}

impl BatchRequest {
    /// Checks the batch's size and each of its jobs within `limits`.
    pub fn validate(self, limits: &ApiLimits) -> Result<BatchJobs, FieldError> {
        let (items, stop, shared_runtime, callback_url): (Vec<Result<Program, FieldError>>, _, _, _) = match self {
            BatchRequest::Jobs(batch) => {
                let jobs = batch.jobs.into_iter().map(|Item(job)| job.map_err(|e| item_error(e, "job"))).collect();
                (jobs, batch.stop_on_first_failure, batch.shared_runtime, batch.callback_url)
            }
            // Test cases are one program run many times: the owner's
            // long-lived children by default, in every language.
            BatchRequest::Cases(batch) => {
                let program = batch.program;
                let jobs = batch
                    .cases
                    .into_iter()
                    .map(|Item(case)| case.map(|case| program.with(case)).map_err(|e| item_error(e, "case")))
                    .collect();
                (jobs, batch.stop_on_first_failure, Some(batch.shared_runtime.unwrap_or(true)), batch.callback_url)
            }
        };
        if items.is_empty() || items.len() > limits.max_batch {
            let message = format!("the batch holds {} jobs; a batch holds 1 to {}", items.len(), limits.max_batch);
            return Err(FieldError::invalid("jobs", message));
        }
        let jobs = items.into_iter().map(|item| item.and_then(|program| program.validate(limits))).collect();
        Ok(BatchJobs { jobs, stop_on_first_failure: stop.unwrap_or(false), shared_runtime, callback_url })
    }
}

impl Program {
    /// This program with a case's input and expected output.
    fn with(&self, case: CaseRequest) -> Program {
        Program {
            stdin: case.stdin.or_else(|| self.stdin.clone()),
            args: case.args.or_else(|| self.args.clone()),
            expected_stdout: case.expected_stdout.or_else(|| self.expected_stdout.clone()),
            ..self.clone()
        }
    }
}

/// What is wrong with one item of a batch (`item`: "job", "case", or
/// "program"), said in a batch's terms.
fn item_error(error: FieldError, item: &str) -> FieldError {
    match error.field.as_str() {
        // Not an object at all: serde would name the Rust type it expected.
        "" => FieldError::invalid("", format!("a {item} must be a JSON object")),
        field @ ("callback_url" | "shared_runtime" | "program.callback_url" | "program.shared_runtime")
            if error.code == "unknown_field" =>
        {
            let name = field.trim_start_matches("program.");
            let on = if item == "program" { "its program" } else { "its jobs" };
            FieldError::invalid(field, format!("{name} belongs on the batch, not on {on}"))
        }
        _ => error,
    }
}
