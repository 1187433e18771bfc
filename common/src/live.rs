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
//! answers.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{Queue, QueueError};

/// How long a finished job's live stream is kept, for subscribers still
/// reading it; later ones are answered from the job object.
pub const LIVE_GRACE: Duration = Duration::from_secs(60);

/// Most entries one read of a live stream returns.
const READ_COUNT: usize = 256;

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

impl Queue {
    /// Appends `chunks` of job `id`'s output, written by its delivery
    /// `attempt`, to its live stream, gives the stream `ttl` to live, and
    /// tells every api that it grew.
    pub async fn append_output(
        &self,
        id: &str,
        attempt: u64,
        chunks: &[OutputChunk],
        ttl: Duration,
    ) -> Result<(), QueueError> {
        if chunks.is_empty() {
            return Ok(());
        }
        let key = self.keys.output(id);
        let mut pipe = redis::pipe();
        for chunk in chunks {
            pipe.cmd("XADD")
                .arg(&key)
                .arg("*")
                .arg("a")
                .arg(attempt)
                .arg("s")
                .arg(chunk.stream.as_str())
                .arg("o")
                .arg(chunk.offset)
                .arg("d")
                .arg(&chunk.data[..])
                .ignore();
        }
        pipe.pexpire(&key, i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)).ignore();
        pipe.publish(crate::keys::OUTPUT_CHANNEL, id).ignore();
        pipe.query_async::<()>(&mut self.conn.clone()).await?;
        Ok(())
    }

    /// Entries of job `id`'s live stream after entry `after` (`"0"` for
    /// all), oldest first, at most a few hundred per call.
    pub async fn read_output(&self, id: &str, after: &str) -> Result<Vec<LiveEntry>, QueueError> {
        type Entry = (String, Vec<(String, Vec<u8>)>);
        let entries: Vec<Entry> = redis::cmd("XRANGE")
            .arg(self.keys.output(id))
            .arg(format!("({after}"))
            .arg("+")
            .arg("COUNT")
            .arg(READ_COUNT)
            .query_async(&mut self.conn.clone())
            .await?;
        entries.into_iter().map(|(entry, fields)| parse_entry(id, entry, fields)).collect()
    }
}

fn parse_entry(job: &str, id: String, fields: Vec<(String, Vec<u8>)>) -> Result<LiveEntry, QueueError> {
    let malformed = || QueueError::Protocol(format!("job {job}: malformed live output entry {id}"));
    let (mut stream, mut offset, mut data, mut attempt) = (None, None, None, None);
    let number = |value: &[u8]| std::str::from_utf8(value).ok().and_then(|n| n.parse::<u64>().ok());
    for (name, value) in fields {
        match name.as_str() {
            "s" => {
                stream = match &value[..] {
                    b"stdout" => Some(OutputStream::Stdout),
                    b"stderr" => Some(OutputStream::Stderr),
                    _ => return Err(malformed()),
                }
            }
            "o" => offset = number(&value),
            "a" => attempt = number(&value),
            "d" => data = Some(value),
            _ => {}
        }
    }
    match (stream, offset, data, attempt) {
        (Some(stream), Some(offset), Some(data), Some(attempt)) => {
            Ok(LiveEntry { id, attempt, chunk: OutputChunk { stream, offset, data } })
        }
        _ => Err(malformed()),
    }
}
