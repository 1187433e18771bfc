//! A running job's live output on Redis (see `crate::live`): appended by
//! the worker running it, read by the api serving its events.

use std::time::Duration;

use super::{Queue, QueueError};
use crate::{LiveEntry, OutputChunk, OutputStream};

/// Most entries one read of a live stream returns.
const READ_COUNT: usize = 256;

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
