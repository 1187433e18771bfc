//! Live output: what a running job writes, as it writes it, for
//! subscribers on any api replica.
//!
//! The worker running a job appends its output in chunks to a Redis stream
//! of the job's own ([`crate::keys::QueueKeys::output`]) and publishes the
//! job's id on [`crate::keys::OUTPUT_CHANNEL`]; an api serving
//! `GET /v1/jobs/{id}/events` reads the stream from where it left off each
//! time it is told. Only the bytes the job's output caps keep are sent, so
//! a job's stream holds at most its two caps; the worker's last write gives
//! the stream [`LIVE_GRACE`] to live, after which the job object alone
//! answers. This file holds the types; the operations that write and read
//! the stream are `queue::live`'s.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How long a finished job's live stream is kept, for subscribers still
/// reading it; later ones are answered from the job object.
pub const LIVE_GRACE: Duration = Duration::from_secs(60);

/// Which of a job's streams a chunk is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputStream {
    Stdout,
    Stderr,
}

impl OutputStream {
    pub fn as_str(self) -> &'static str {
        match self {
            OutputStream::Stdout => "stdout",
            OutputStream::Stderr => "stderr",
        }
    }
}

/// Bytes a job wrote on one stream, starting `offset` bytes into it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputChunk {
    pub stream: OutputStream,
    pub offset: u64,
    pub data: Vec<u8>,
}

/// One entry read from a job's live stream, with the stream entry id to
/// read on from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveEntry {
    pub id: String,
    /// Which delivery of the job wrote it: a job taken over from a worker
    /// that stopped runs again from the start, as a later attempt.
    pub attempt: u64,
    pub chunk: OutputChunk,
}
