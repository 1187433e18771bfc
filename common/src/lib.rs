//! The contract between the runbox api and its workers.
//!
//! Both sides must agree on everything in this crate, and nothing else lives
//! here.
//!
//! # Layout
//!
//! - `job`: what a client asks to run ([`Language`], [`JobSpec`]) and what
//!   comes back ([`Status`], [`Outcome`]).
//! - `sign`: HMAC signatures that let a worker trust a job ([`SigningKey`]).
//! - [`keys`]: every Redis key and channel name.
//! - `queue`: the queue operations on Redis ([`Queue`]), over `connection`:
//!   one server or a cluster ([`RedisTarget`]); the Lua scripts they run
//!   are files in `lua/`, one per script and per shared prelude, each
//!   opening with its KEYS and ARGV.
//! - `live`: a running job's output as it is written, through Redis
//!   ([`OutputChunk`]).
//! - `config`: reading typed configuration from the environment, and the
//!   settings both processes share ([`SharedConfig`], [`Timeouts`]).
//! - `time`: timestamps as stored.
//! - `session`: sessions, their steps and their Redis operations
//!   ([`SessionRecord`], [`SessionTask`]).
//! - `verdict`: judging all of a program's stdout, past the output cap, in
//!   constant memory ([`OutputDigest`]).
//! - `workers`: what each worker reports of itself ([`WorkerInfo`]), and
//!   `/v1/runtimes`' answer built from it ([`Runtimes`]).

mod config;
mod connection;
mod job;
pub mod keys;
mod live;
mod queue;
mod session;
mod sign;
mod time;
mod verdict;
mod workers;

pub use config::{ConfigError, SharedConfig, Timeouts, env_or, env_required};
pub use connection::RedisTarget;
pub use job::{
    Compare, FileEncoding, InputFile, JobSpec, Language, MAX_RETURN_FILES, MAX_RETURN_FILES_BYTES, Outcome, OutputFile,
    ReturnFiles, Status, UnknownLanguage, Verdict,
};
pub use live::{LIVE_GRACE, LiveEntry, OutputChunk, OutputStream};
pub use queue::{
    BatchJob, BatchRecord, CallbackDue, Cancelled, Claimed, Enqueued, Idempotency, JobRecord, JobSummary, NewJob,
    OverQuota, Queue, QueueError, Quota, Timings,
};
pub use session::{Checkpoint, CheckpointInfo, Recovery, Sent, SessionOp, SessionRecord, SessionStatus, SessionTask};
pub use sign::{MIN_SIGNING_KEY_BYTES, SigningKey};
pub use time::{now_rfc3339, now_unix_ms, rfc3339_at_unix_ms};
pub use verdict::OutputDigest;
pub use workers::{HEARTBEAT_EVERY, RuntimeLimits, Runtimes, WORKER_SILENT_AFTER, WorkerInfo};
