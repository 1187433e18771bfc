//! What runbox answers, as typed structs. Common has the enums and the
//! small parts (`Status`, `Language`, `Verdict`, `OutputFile`,
//! `SessionStatus`, `CheckpointInfo`, `Runtimes`), which are used as they
//! are. The objects around them are rendered by the api from its own view
//! types, which common does not have (and `Timings` there only
//! serializes), so they are declared here, field for field as the api
//! writes them.

use std::collections::BTreeMap;

use runbox_common::{CheckpointInfo, FileEntry, Language, OutputFile, SessionStatus, Status, Verdict};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The job object (`GET /v1/jobs/{id}` and every route that answers with
/// a job). Fields not known yet are None. It serializes back to the JSON
/// the api sent, fields this client does not know included (`extra`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub id: String,
    pub status: Status,
    #[serde(default)]
    pub language: Option<Language>,
    #[serde(default)]
    pub stdout: Option<String>,
    #[serde(default)]
    pub stderr: Option<String>,
    /// None when the child did not exit by itself.
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// A signal that ended the child when runbox did not send it.
    #[serde(default)]
    pub signal: Option<i32>,
    /// Set when the job had an `expected_stdout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
    #[serde(default)]
    pub duration_ms: Option<u64>,
    #[serde(default)]
    pub stdout_truncated: bool,
    #[serde(default)]
    pub stderr_truncated: bool,
    /// The files the job asked back with `return_files`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<OutputFile>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub files_truncated: bool,
    /// It ran in one of the token's long-lived children that had already
    /// run another of its jobs.
    #[serde(default)]
    pub warm: bool,
    #[serde(default)]
    pub cpu_ms: Option<u64>,
    #[serde(default)]
    pub peak_memory_bytes: Option<u64>,
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub started_at: Option<String>,
    #[serde(default)]
    pub finished_at: Option<String>,
    #[serde(default)]
    pub timings: Timings,
    /// Fields of a newer api that this client does not know, as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Job {
    /// True once the job will not change again.
    pub fn is_final(&self) -> bool {
        self.status.is_final()
    }

    /// Ran to its end with exit code 0 (and, with an expected stdout, accepted).
    pub fn ok(&self) -> bool {
        self.status == Status::Completed
            && self.exit_code == Some(0)
            && self.verdict.is_none_or(|verdict| verdict == Verdict::Accepted)
    }
}

/// Where a job's time went, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timings {
    /// From enqueue until a worker started it.
    #[serde(default)]
    pub queue_ms: Option<u64>,
    /// Booting its child; 0 when a warm one was ready.
    #[serde(default)]
    pub boot_ms: Option<u64>,
    /// The program's run (`duration_ms`).
    #[serde(default)]
    pub run_ms: Option<u64>,
    /// From the child's end until the result was stored.
    #[serde(default)]
    pub write_ms: Option<u64>,
}

/// What submitting a job answered.
#[derive(Debug, Clone, PartialEq)]
pub enum Submitted {
    /// Queued, or not finished within the wait asked for.
    Pending { id: String, status: Status },
    /// Finished within the wait, or the job a reused `Idempotency-Key`
    /// first queued, finished.
    Finished(Box<Job>),
}

impl Submitted {
    pub fn id(&self) -> &str {
        match self {
            Submitted::Pending { id, .. } => id,
            Submitted::Finished(job) => &job.id,
        }
    }

    pub fn status(&self) -> Status {
        match self {
            Submitted::Pending { status, .. } => *status,
            Submitted::Finished(job) => job.status,
        }
    }
}

/// A job (or exec) still running: `{"id", "status"}`, answered with 202.
#[derive(Deserialize)]
pub(crate) struct Accepted {
    pub id: String,
    pub status: Status,
}

/// A batch queued: its id and its jobs' ids, in submission order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchSubmitted {
    pub id: String,
    pub job_ids: Vec<String>,
}

/// The batch object: counts, and one page of its jobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Batch {
    pub id: String,
    pub status: BatchStatus,
    pub size: usize,
    /// Jobs with a final status.
    pub done: u64,
    #[serde(default)]
    pub stop_on_first_failure: bool,
    #[serde(default)]
    pub created_at: Option<String>,
    /// Jobs by status name (`expired` for a job whose result is gone);
    /// only statuses that occur.
    #[serde(default)]
    pub counts: BTreeMap<String, u64>,
    /// Jobs by verdict name, for jobs that had an expected stdout.
    #[serde(default)]
    pub verdicts: BTreeMap<String, u64>,
    #[serde(default)]
    pub offset: usize,
    #[serde(default)]
    pub limit: usize,
    /// Where the next page starts, if there is one.
    #[serde(default)]
    pub next_offset: Option<usize>,
    #[serde(default)]
    pub jobs: Vec<Job>,
}

/// Where a batch is: `running` until every job has a final status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchStatus {
    Running,
    Finished,
}

/// One line of a batch's results stream.
#[derive(Debug, Clone, PartialEq)]
pub enum BatchResult {
    /// A job of the batch, finished.
    Job(Box<Job>),
    /// A job whose result expired before it could be sent.
    Expired { id: String },
}

impl BatchResult {
    pub fn id(&self) -> &str {
        match self {
            BatchResult::Job(job) => &job.id,
            BatchResult::Expired { id } => id,
        }
    }
}

/// The session object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    pub id: String,
    pub language: Language,
    pub status: SessionStatus,
    /// The worker holding its process.
    #[serde(default)]
    pub worker: Option<String>,
    pub created_at: String,
    pub last_used_at: String,
    pub idle_timeout_s: u64,
    /// When its lifetime ends.
    pub expires_at: String,
    pub execs: u64,
    #[serde(default)]
    pub checkpoints: Vec<CheckpointInfo>,
    /// Why it ended, once it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_reason: Option<String>,
    /// The checkpoint it was last brought back from, if it ever was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_from: Option<String>,
}

impl Session {
    /// Closed, expired or lost: it will run nothing again.
    pub fn ended(&self) -> bool {
        matches!(self.status, SessionStatus::Closed | SessionStatus::Expired | SessionStatus::Lost)
    }
}

/// What an exec answered: its job, and the session after it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecResult {
    #[serde(flatten)]
    pub job: Job,
    pub session: ExecSession,
}

/// The session an exec ran in, as it is after the exec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecSession {
    pub id: String,
    pub status: SessionStatus,
    /// Set when the session was brought back from this checkpoint during
    /// the exec: what ran after the checkpoint is gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_from: Option<String>,
}

/// `{"sessions": [...]}`.
#[derive(Deserialize)]
pub(crate) struct SessionList {
    pub sessions: Vec<Session>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A job object as the api writes it (`api/src/jobs.rs`' `JobView`).
    fn job_object() -> Value {
        json!({"id": "2be15091-dfcd-44ac-8f1a-96a0833a61e1", "status": "completed", "language": "python",
               "stdout": "4\n", "stderr": "", "exit_code": 0, "signal": null, "verdict": "accepted",
               "duration_ms": 22, "stdout_truncated": false, "stderr_truncated": false, "warm": true,
               "cpu_ms": 20, "peak_memory_bytes": 30212096, "created_at": "2026-11-29T14:14:04.49Z",
               "started_at": "2026-11-29T14:14:04.49Z", "finished_at": "2026-11-29T14:14:04.52Z",
               "timings": {"queue_ms": 1, "boot_ms": 0, "run_ms": 22, "write_ms": 1}})
    }

    #[test]
    fn a_job_object_round_trips_to_the_same_json() {
        let mut wire = job_object();
        let job: Job = serde_json::from_value(wire.clone()).expect("parses");
        assert_eq!((job.status, job.exit_code, job.verdict), (Status::Completed, Some(0), Some(Verdict::Accepted)));
        assert!(job.ok());
        assert_eq!(serde_json::to_value(&job).expect("serializes"), wire);
        // A field of a newer api is kept, and written back.
        wire["future"] = json!({"a": 1});
        let job: Job = serde_json::from_value(wire.clone()).expect("parses");
        assert_eq!(job.extra.get("future"), Some(&json!({"a": 1})));
        assert_eq!(serde_json::to_value(&job).expect("serializes"), wire);
    }

    #[test]
    fn an_exec_is_its_job_plus_the_session() {
        let mut wire = job_object();
        wire["session"] = json!({"id": "s1", "status": "idle"});
        let exec: ExecResult = serde_json::from_value(wire.clone()).expect("parses");
        assert_eq!(exec.session.status, SessionStatus::Idle);
        assert!(exec.job.extra.is_empty(), "{:?}", exec.job.extra);
        assert_eq!(serde_json::to_value(&exec).expect("serializes"), wire);
    }
}

/// A file uploaded to a session ([`crate::Client::upload_file`]).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct FileWritten {
    pub path: String,
    /// Bytes written.
    pub size: u64,
}

/// A directory of a session's home ([`crate::Client::list_files`]).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct FileListing {
    /// The directory, relative to the home (empty for the home).
    pub path: String,
    /// Its entries, by name.
    pub files: Vec<FileEntry>,
    /// It held more entries than runbox lists: these are the first.
    #[serde(default)]
    pub truncated: bool,
}
