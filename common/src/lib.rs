//! The contract between the runbox api and its workers.
//!
//! Both sides must agree on everything in this crate, and nothing else lives
//! here: how a process starts, logs and stops is `runbox-process`'s, and
//! settings only one process reads are that process's.
//!
//! # Layout
//!
//! Each module owns one concept; its items are re-exported here, so the
//! crate's surface is flat. A module uses only modules listed before it
//! (a file of `queue/` may also use `queue`'s own items), so no two use
//! each other; `tests/modules.rs` checks that.
//!
//! - [`addresses`]: which IP addresses are public, for anything runbox
//!   connects to on a user's behalf.
//! - `egress`: the hosts a token's jobs may reach ([`Egress`], [`Rule`])
//!   and the secrets added to their requests ([`Secret`]).
//! - `language`: the languages runbox runs ([`Language`]).
//! - `session`: sessions' types: the task a session job carries
//!   ([`SessionTask`]), a session and its checkpoints as stored
//!   ([`SessionRecord`], [`CheckpointInfo`]), and how their operations went
//!   ([`Sent`], [`Recovery`]).
//! - `job`: what a client asks to run ([`JobSpec`]), how its stdout is
//!   judged ([`Compare`], [`Verdict`]) and what comes back ([`Status`],
//!   [`Outcome`]).
//! - `verdict`: judging all of a program's stdout, past the output cap, in
//!   constant memory ([`OutputDigest`]).
//! - `env`: reading typed configuration from the environment
//!   ([`env_or`], [`env_required`], [`ConfigError`]).
//! - `sign`: HMAC signatures that let a worker trust a job ([`SigningKey`]).
//! - `connection`: one Redis server or a cluster, behind one type
//!   ([`RedisTarget`]).
//! - `config`: the settings both processes share ([`SharedConfig`],
//!   [`Timeouts`]).
//! - `time`: timestamps as stored.
//! - [`keys`]: every Redis key and channel name.
//! - `workers`: what each worker reports of itself ([`WorkerInfo`]), and
//!   `/v1/runtimes`' answer built from it ([`Runtimes`]).
//! - `live`: a running job's output as it is written ([`OutputChunk`],
//!   [`LiveEntry`]).
//! - `queue`: every operation on Redis, through one handle ([`Queue`],
//!   [`QueueError`]), one file per concept, each with its types, its Lua
//!   scripts and the parsing of its replies:
//!   - `queue::jobs`: enqueue, claim, reclaim, start, finish, cancel and
//!     read jobs, and the queue's depth and oldest age ([`NewJob`],
//!     [`Enqueued`], [`Claimed`], [`JobRecord`], [`Timings`], [`Quota`],
//!     [`Cancelled`]).
//!   - `queue::batches`: enqueue and read batches ([`BatchJob`],
//!     [`BatchRecord`]).
//!   - `queue::callbacks`: the stream of callbacks due ([`CallbackDue`]).
//!   - `queue::workers`: the registry of live workers (heartbeats, the
//!     forgetting of dead ones).
//!   - `queue::sessions`: sessions' Redis operations, and the life of a
//!     session through them.
//!   - `queue::live`: appending and reading a job's live output.
//!
//!   The Lua scripts are files in `lua/`, one per script and per shared
//!   prelude, each opening with its KEYS and ARGV.

pub mod addresses;
mod config;
mod connection;
mod egress;
mod env;
mod job;
pub mod keys;
mod language;
mod live;
mod queue;
mod session;
mod sign;
mod time;
mod verdict;
mod workers;

pub use config::{SharedConfig, Timeouts};
pub use connection::RedisTarget;
pub use egress::{Egress, EgressGrant, HostPattern, Rule, Secret, SecretGrant, Secrets, parse_rules, parse_secrets};
pub use env::{ConfigError, env_or, env_required};
pub use job::{
    Compare, FileEncoding, HostTraffic, InputFile, JobSpec, MAX_RETURN_FILES, MAX_RETURN_FILES_BYTES, Outcome,
    OutputFile, ReturnFiles, Status, Verdict,
};
pub use language::{Language, UnknownLanguage};
pub use live::{LIVE_GRACE, LiveEntry, OutputChunk, OutputStream};
pub use queue::{
    Admission, BatchJob, BatchRecord, CallbackDue, Cancelled, Claimed, Enqueued, Handover, Idempotency, JobRecord,
    JobSummary, NewJob, OverQuota, Queue, QueueError, Quota, SandboxRecord, Timings,
};
pub use session::{
    Checkpoint, CheckpointInfo, FileAction, FileEntry, FileRefusal, FileResult, FileType, MAX_LISTING_ENTRIES,
    MAX_SESSION_FILE_BYTES, MAX_SESSION_FILES, MAX_SESSION_FILES_BYTES, Recovery, Sent, SessionOp, SessionRecord,
    SessionStatus, SessionTask, StepResult,
};
pub use sign::{MIN_SIGNING_KEY_BYTES, SigningKey};
pub use time::{now_rfc3339, now_unix_ms, rfc3339_at_unix_ms};
pub use verdict::OutputDigest;
pub use workers::{HEARTBEAT_EVERY, RuntimeLimits, Runtimes, WORKER_SILENT_AFTER, WorkerInfo};
