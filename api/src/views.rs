//! What the native API answers: the job, batch and session objects, and
//! the small bodies around them. Each is serialized as it is and derives
//! the schema `/openapi.json` gives it; the surfaces that speak other
//! shapes (MCP, the compatible APIs) render their own from the same
//! records.

use std::collections::BTreeMap;

use runbox_common::{
    CheckpointInfo, HostTraffic, JobRecord, Language, OutputFile, SessionRecord, SessionStatus, Status, Timings,
    Verdict, rfc3339_at_unix_ms,
};
use serde::Serialize;
use utoipa::ToSchema;

use crate::error::BatchItemError;

/// The job object every route returns.
#[derive(Serialize, utoipa::ToSchema)]
pub struct JobView {
    id: String,
    status: Status,
    language: Option<Language>,
    stdout: Option<String>,
    stderr: Option<String>,
    exit_code: Option<i32>,
    signal: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    verdict: Option<Verdict>,
    duration_ms: Option<u64>,
    stdout_truncated: bool,
    stderr_truncated: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    files: Vec<OutputFile>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    files_truncated: bool,
    /// The job ran in one of its owner's long-lived children that had
    /// already run another of the owner's jobs (false until it has run).
    warm: bool,
    /// CPU time (user + system) the job used, in milliseconds, measured by
    /// runbox (null until it has run, or where nothing ran).
    cpu_ms: Option<u64>,
    /// The job's peak memory in bytes, measured by runbox; what each lane
    /// counts is in docs/api.md ("What each lane measures").
    peak_memory_bytes: Option<u64>,
    /// What the job sent and received through the egress proxy, per host;
    /// absent for a job that used none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    network: Vec<HostTraffic>,
    created_at: Option<String>,
    started_at: Option<String>,
    finished_at: Option<String>,
    timings: Timings,
}

impl From<JobRecord> for JobView {
    fn from(record: JobRecord) -> Self {
        let outcome = record.outcome;
        JobView {
            id: record.id,
            status: record.status,
            language: record.language,
            stdout: outcome.as_ref().map(|o| o.stdout.clone()),
            stderr: outcome.as_ref().map(|o| o.stderr.clone()),
            exit_code: outcome.as_ref().and_then(|o| o.exit_code),
            signal: outcome.as_ref().and_then(|o| o.signal),
            verdict: outcome.as_ref().and_then(|o| o.verdict),
            duration_ms: outcome.as_ref().map(|o| o.duration_ms),
            stdout_truncated: outcome.as_ref().is_some_and(|o| o.stdout_truncated),
            stderr_truncated: outcome.as_ref().is_some_and(|o| o.stderr_truncated),
            files: outcome.as_ref().map(|o| o.files.clone()).unwrap_or_default(),
            files_truncated: outcome.as_ref().is_some_and(|o| o.files_truncated),
            warm: outcome.as_ref().is_some_and(|o| o.warm),
            cpu_ms: outcome.as_ref().and_then(|o| o.cpu_ms),
            peak_memory_bytes: outcome.as_ref().and_then(|o| o.peak_memory_bytes),
            network: outcome.as_ref().map(|o| o.network.clone()).unwrap_or_default(),
            created_at: record.created_at,
            started_at: record.started_at,
            finished_at: record.finished_at,
            timings: record.timings,
        }
    }
}

/// What every batch route returns: counts, and one page of its jobs.
#[derive(Serialize, utoipa::ToSchema)]
pub struct BatchView {
    pub(crate) id: String,
    pub(crate) status: BatchStatus,
    pub(crate) size: usize,
    /// Jobs with a final status.
    pub(crate) done: u64,
    pub(crate) stop_on_first_failure: bool,
    pub(crate) created_at: Option<String>,
    /// Jobs by status; only statuses that occur.
    pub(crate) counts: BTreeMap<String, usize>,
    /// Jobs by verdict, for jobs that had an `expected_stdout`.
    pub(crate) verdicts: BTreeMap<String, usize>,
    pub(crate) offset: usize,
    pub(crate) limit: usize,
    /// Where the next page starts, if there is one.
    pub(crate) next_offset: Option<usize>,
    pub(crate) jobs: Vec<JobView>,
}

/// Where a batch is: `running` until every job has a final status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BatchStatus {
    Running,
    Finished,
}

/// The session object every route returns.
#[derive(Serialize, utoipa::ToSchema)]
pub struct SessionView {
    id: String,
    language: Language,
    status: SessionStatus,
    /// The worker holding its process.
    worker: Option<String>,
    created_at: String,
    last_used_at: String,
    idle_timeout_s: u64,
    /// When its lifetime ends.
    expires_at: String,
    execs: u64,
    checkpoints: Vec<CheckpointInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ended_reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    restored_from: Option<String>,
}

impl From<SessionRecord> for SessionView {
    fn from(r: SessionRecord) -> Self {
        SessionView {
            id: r.id,
            language: r.language,
            status: r.status,
            worker: r.worker,
            created_at: r.created_at,
            last_used_at: rfc3339_at_unix_ms(r.last_used_ms),
            idle_timeout_s: r.idle_timeout_s,
            expires_at: rfc3339_at_unix_ms(r.expires_at_ms),
            execs: r.execs,
            checkpoints: r.checkpoints,
            ended_reason: r.ended_reason,
            restored_from: r.restored_from,
        }
    }
}

/// An exec's answer: the job object, plus what happened to the session.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ExecView {
    #[serde(flatten)]
    pub(crate) job: JobView,
    pub(crate) session: ExecSession,
}

/// The session an exec ran in, as it is after the exec.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ExecSession {
    pub(crate) id: String,
    pub(crate) status: SessionStatus,
    /// Set when the session was brought back from this checkpoint during
    /// the call: what ran after the checkpoint is gone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) restored_from: Option<String>,
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
    /// With `invalid_field`, `unknown_field` and a field's `…_too_large`:
    /// the field, as a path into the body (`timeout_ms`, `files[2].path`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// With `invalid_batch`: each invalid job, by index.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jobs: Option<Vec<BatchItemError>>,
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
