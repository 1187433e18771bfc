//! What the client sends: a job is common's [`JobSpec`] plus the fields
//! that belong to a submission rather than to the program; batches,
//! sessions and execs have small types of their own.

use runbox_common::{Compare, InputFile, JobSpec, Language, ReturnFiles};
use serde::Serialize;

/// One job to submit: the program ([`JobSpec`]) and where its result goes
/// and where it runs. Built with the setters, or from a `JobSpec` made by
/// struct update on [`JobSpec::new`]:
///
/// ```
/// use runbox_client::{JobSpec, Language, NewJob};
/// let job = NewJob::python("print(input()[::-1])").stdin("olleh\n").timeout_ms(2_000);
/// let spec = JobSpec::new(Language::Python, "print(input()[::-1])");
/// let same = NewJob::from(JobSpec { stdin: "olleh\n".into(), timeout_ms: Some(2_000), ..spec });
/// assert_eq!(job, same);
/// ```
///
/// Leave `spec.shared_lane` and `spec.session` unset: the api sets them,
/// and refuses a request that has them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NewJob {
    #[serde(flatten)]
    pub spec: JobSpec,
    /// Where the finished job is POSTed, signed (see the README's Callbacks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callback_url: Option<String>,
    /// Where the job runs: None for the api's default by language, `true`
    /// for the token's long-lived children, `false` for a fresh child.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shared_runtime: Option<bool>,
}

impl From<JobSpec> for NewJob {
    fn from(spec: JobSpec) -> Self {
        NewJob { spec, callback_url: None, shared_runtime: None }
    }
}

impl NewJob {
    pub fn new(language: Language, code: impl Into<String>) -> NewJob {
        JobSpec::new(language, code).into()
    }

    pub fn python(code: impl Into<String>) -> NewJob {
        NewJob::new(Language::Python, code)
    }

    pub fn javascript(code: impl Into<String>) -> NewJob {
        NewJob::new(Language::Javascript, code)
    }

    pub fn typescript(code: impl Into<String>) -> NewJob {
        NewJob::new(Language::Typescript, code)
    }

    /// Fed to the program, then EOF.
    pub fn stdin(mut self, stdin: impl Into<String>) -> NewJob {
        self.spec.stdin = stdin.into();
        self
    }

    /// The wall-clock limit; the api's default when not set.
    pub fn timeout_ms(mut self, ms: u64) -> NewJob {
        self.spec.timeout_ms = Some(ms);
        self
    }

    /// A memory cap below the worker's, in MiB.
    pub fn memory_mb(mut self, mb: u32) -> NewJob {
        self.spec.memory_mb = Some(mb);
        self
    }

    /// `Deno.args`, or `sys.argv[1:]`.
    pub fn args(mut self, args: impl IntoIterator<Item = impl Into<String>>) -> NewJob {
        self.spec.args = args.into_iter().map(Into::into).collect();
        self
    }

    /// What stdout should be: the result then has a verdict.
    pub fn expected_stdout(mut self, expected: impl Into<String>) -> NewJob {
        self.spec.expected_stdout = Some(expected.into());
        self
    }

    pub fn compare(mut self, compare: Compare) -> NewJob {
        self.spec.compare = compare;
        self
    }

    /// A file put in the program's working directory before it starts.
    pub fn file(mut self, file: InputFile) -> NewJob {
        self.spec.files.push(file);
        self
    }

    /// Python only: the files the result carries back.
    pub fn return_files(mut self, files: ReturnFiles) -> NewJob {
        self.spec.return_files = files;
        self
    }

    pub fn callback_url(mut self, url: impl Into<String>) -> NewJob {
        self.callback_url = Some(url.into());
        self
    }

    pub fn shared_runtime(mut self, shared: bool) -> NewJob {
        self.shared_runtime = Some(shared);
        self
    }
}

/// How a job is submitted ([`crate::Client::submit`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubmitOptions {
    /// Seconds (at most [`crate::MAX_WAIT_S`]) to wait for the job to
    /// finish before answering.
    pub wait: Option<u64>,
    /// An `Idempotency-Key`: a submission that reuses it queues nothing
    /// and answers with the job it first queued, so a submission can be
    /// retried safely after a lost answer.
    pub idempotency_key: Option<String>,
}

impl SubmitOptions {
    pub fn new() -> SubmitOptions {
        SubmitOptions::default()
    }

    pub fn wait(mut self, seconds: u64) -> SubmitOptions {
        self.wait = Some(seconds);
        self
    }

    pub fn idempotency_key(mut self, key: impl Into<String>) -> SubmitOptions {
        self.idempotency_key = Some(key.into());
        self
    }
}

/// Many jobs submitted as one ([`crate::Client::submit_batch`]): a list of
/// jobs, or one program run against many test cases. A batch's jobs have
/// no `callback_url` or `shared_runtime` of their own: the batch has them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NewBatch {
    #[serde(skip_serializing_if = "Option::is_none")]
    jobs: Option<Vec<JobSpec>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    program: Option<JobSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cases: Option<Vec<Case>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stop_on_first_failure: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    shared_runtime: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    callback_url: Option<String>,
}

impl NewBatch {
    /// These jobs, in this order (a [`NewJob`]'s `spec` is one).
    pub fn jobs(jobs: impl IntoIterator<Item = JobSpec>) -> NewBatch {
        NewBatch { jobs: Some(jobs.into_iter().collect()), ..NewBatch::empty() }
    }

    /// Test-case mode: `program` once per case, each case's fields in
    /// place of the program's. Its jobs run in the token's long-lived
    /// children unless [`NewBatch::shared_runtime`] says `false`.
    pub fn cases(program: JobSpec, cases: impl IntoIterator<Item = Case>) -> NewBatch {
        NewBatch { program: Some(program), cases: Some(cases.into_iter().collect()), ..NewBatch::empty() }
    }

    fn empty() -> NewBatch {
        NewBatch {
            jobs: None,
            program: None,
            cases: None,
            stop_on_first_failure: None,
            shared_runtime: None,
            callback_url: None,
        }
    }

    /// Cancel the jobs not yet started once one fails.
    pub fn stop_on_first_failure(mut self, stop: bool) -> NewBatch {
        self.stop_on_first_failure = Some(stop);
        self
    }

    /// Where every job runs, as [`NewJob::shared_runtime`] says for one.
    pub fn shared_runtime(mut self, shared: bool) -> NewBatch {
        self.shared_runtime = Some(shared);
        self
    }

    /// Where the finished batch (without its jobs) is POSTed, signed.
    pub fn callback_url(mut self, url: impl Into<String>) -> NewBatch {
        self.callback_url = Some(url.into());
        self
    }
}

/// One test case of a batch in test-case mode: what it changes of the program.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Case {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_stdout: Option<String>,
}

impl Case {
    /// A case with this input and this expected output.
    pub fn new(stdin: impl Into<String>, expected_stdout: impl Into<String>) -> Case {
        Case { stdin: Some(stdin.into()), args: None, expected_stdout: Some(expected_stdout.into()) }
    }
}

/// Which page of a batch's jobs to read, and how long to wait for it to
/// finish ([`crate::Client::get_batch`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchQuery {
    /// Seconds (at most [`crate::MAX_WAIT_S`]) to wait for every job to finish.
    pub wait: Option<u64>,
    /// The first job of the page, from 0.
    pub offset: Option<usize>,
    /// Jobs per page, 1 to 1000 (100 when not set).
    pub limit: Option<usize>,
}

/// A session to start ([`crate::Client::create_session`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NewSession {
    /// Python or JavaScript; may be left out with `from_checkpoint`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub language: Option<Language>,
    /// Seconds without an exec before it expires; the api's default when not set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_timeout_s: Option<u64>,
    /// Start from this checkpoint of one of the token's sessions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_checkpoint: Option<String>,
}

impl NewSession {
    pub fn new(language: Language) -> NewSession {
        NewSession { language: Some(language), idle_timeout_s: None, from_checkpoint: None }
    }

    pub fn from_checkpoint(checkpoint: impl Into<String>) -> NewSession {
        NewSession { language: None, idle_timeout_s: None, from_checkpoint: Some(checkpoint.into()) }
    }

    pub fn idle_timeout_s(mut self, seconds: u64) -> NewSession {
        self.idle_timeout_s = Some(seconds);
        self
    }
}

/// Code to run in a session ([`crate::Client::exec`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Exec {
    pub code: String,
    /// Python sessions only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Written under the session's home before the code runs, as a job's
    /// files; they stay in the session.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<InputFile>,
    /// The files the result carries back, as a job's.
    #[serde(skip_serializing_if = "ReturnFiles::is_none")]
    pub return_files: ReturnFiles,
}

impl Exec {
    pub fn new(code: impl Into<String>) -> Exec {
        Exec { code: code.into(), stdin: None, timeout_ms: None, files: Vec::new(), return_files: ReturnFiles::None }
    }

    /// A file put under the session's home before the code runs.
    pub fn file(mut self, file: InputFile) -> Exec {
        self.files.push(file);
        self
    }

    /// The files the result carries back: every file the exec created or
    /// changed ([`ReturnFiles::All`]), or these paths.
    pub fn return_files(mut self, files: ReturnFiles) -> Exec {
        self.return_files = files;
        self
    }

    pub fn stdin(mut self, stdin: impl Into<String>) -> Exec {
        self.stdin = Some(stdin.into());
        self
    }

    pub fn timeout_ms(mut self, ms: u64) -> Exec {
        self.timeout_ms = Some(ms);
        self
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_job_is_its_spec_plus_the_submission_fields() {
        let job = NewJob::javascript("console.log(1)").args(["a"]).shared_runtime(false);
        let body = serde_json::to_value(&job).expect("serializes");
        assert_eq!(
            body,
            json!({"language": "javascript", "code": "console.log(1)", "stdin": "", "args": ["a"], "shared_runtime": false})
        );
    }

    #[test]
    fn a_batch_is_jobs_or_a_program_and_cases() {
        let jobs = NewBatch::jobs([NewJob::python("print(1)").spec]).stop_on_first_failure(true);
        assert_eq!(
            serde_json::to_value(&jobs).expect("serializes"),
            json!({"jobs": [{"language": "python", "code": "print(1)", "stdin": ""}], "stop_on_first_failure": true})
        );
        let cases = NewBatch::cases(NewJob::python("print(input())").spec, [Case::new("1\n", "1\n")]);
        assert_eq!(
            serde_json::to_value(&cases).expect("serializes"),
            json!({"program": {"language": "python", "code": "print(input())", "stdin": ""},
                   "cases": [{"stdin": "1\n", "expected_stdout": "1\n"}]})
        );
    }
}
