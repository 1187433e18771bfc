//! The two streamed answers: a job's live output as Server-Sent Events
//! ([`Events`]) and a batch's results as NDJSON ([`BatchResults`]).
//!
//! Both read the body chunk by chunk and split it into lines (`\n` or
//! `\r\n`), so a chunk that ends mid-line or mid-character is simply kept
//! until the rest comes. The SSE reader follows the format's rules for the
//! fields runbox sends (`event`, `data`, comments for keep-alives) and
//! skips events of a name it does not know, so a newer server's events do
//! not break an older client.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::stream::{self, BoxStream};
use futures_util::{Stream, StreamExt};
use serde::Deserialize;
use serde_json::Value;

use crate::error::Error;
use crate::response::{BatchResult, Job};

/// The longest an event stream may stay silent: runbox sends a keep-alive
/// comment every 15 s, so four missed ones mean the connection is gone.
pub const STREAM_IDLE: Duration = Duration::from_secs(60);

/// One event of a job's live output.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A chunk of stdout, `offset` bytes into it. A stream's chunks put
    /// together are the job object's `stdout`.
    Stdout { offset: u64, data: String },
    /// A chunk of stderr, as [`Event::Stdout`].
    Stderr { offset: u64, data: String },
    /// The job runs again from the start (its worker stopped and another
    /// took it over); offsets start from 0 again.
    Restart,
    /// The finished job; the stream ends after it.
    Result(Box<Job>),
}

/// A job's live output (`GET /v1/jobs/{id}/events`, or a session exec's):
/// a stream of [`Event`]s that ends after [`Event::Result`]. A stream that
/// breaks off first ends with an [`Error::Stream`].
pub struct Events(BoxStream<'static, Result<Event, Error>>);

impl Stream for Events {
    type Item = Result<Event, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_next_unpin(cx)
    }
}

/// A batch's results (`GET /v1/batches/{id}/results`): each job as it
/// finishes, in the order they finish, until every job has been sent.
pub struct BatchResults(BoxStream<'static, Result<BatchResult, Error>>);

impl Stream for BatchResults {
    type Item = Result<BatchResult, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_next_unpin(cx)
    }
}

/// A body's chunks as they come.
type Chunks = BoxStream<'static, Result<Vec<u8>, reqwest::Error>>;

fn chunks(response: reqwest::Response) -> Chunks {
    stream::unfold(response, |mut response| async move {
        match response.chunk().await {
            Ok(Some(bytes)) => Some((Ok(bytes.to_vec()), response)),
            Ok(None) => None,
            Err(e) => Some((Err(e), response)),
        }
    })
    .boxed()
}

/// A response body, line by line.
struct Lines {
    chunks: Chunks,
    what: String,
    buffer: Vec<u8>,
    /// How much of `buffer` is known to hold no line end, so a long line
    /// that comes in many chunks is searched once.
    searched: usize,
    ended: bool,
    /// How long to wait for the next chunk before giving up; None: forever.
    idle: Option<Duration>,
}

impl Lines {
    fn new(chunks: Chunks, what: String, idle: Option<Duration>) -> Lines {
        Lines { chunks, what, buffer: Vec::new(), searched: 0, ended: false, idle }
    }

    /// The next line without its end, or None at the end of the body.
    async fn next(&mut self) -> Result<Option<String>, Error> {
        loop {
            if let Some(end) = self.buffer[self.searched..].iter().position(|b| *b == b'\n') {
                let mut line: Vec<u8> = self.buffer.drain(..=self.searched + end).collect();
                self.searched = 0;
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(Some(String::from_utf8_lossy(&line).into_owned()));
            }
            if self.ended {
                if self.buffer.is_empty() {
                    return Ok(None);
                }
                let rest = std::mem::take(&mut self.buffer);
                self.searched = 0;
                return Ok(Some(String::from_utf8_lossy(&rest).into_owned()));
            }
            self.searched = self.buffer.len();
            let chunk = match self.idle {
                Some(idle) => tokio::time::timeout(idle, self.chunks.next()).await.map_err(|_| Error::Stream {
                    what: self.what.clone(),
                    code: "idle".to_owned(),
                    message: format!("nothing came for {} s, not even a keep-alive", idle.as_secs()),
                })?,
                None => self.chunks.next().await,
            };
            match chunk.transpose().map_err(|source| Error::Transport { what: self.what.clone(), source })? {
                Some(bytes) => self.buffer.extend_from_slice(&bytes),
                None => self.ended = true,
            }
        }
    }

    fn decode<T: serde::de::DeserializeOwned>(&self, text: &str) -> Result<T, Error> {
        serde_json::from_str(text).map_err(|source| Error::Decode { what: self.what.clone(), source })
    }
}

/// Server-Sent Events over [`Lines`]: `(name, data)` pairs.
struct Sse {
    lines: Lines,
    /// Set once the result or an error was given: nothing follows.
    over: bool,
}

impl Sse {
    /// The next event as its name and data, or None at the end of the body.
    async fn next_raw(&mut self) -> Result<Option<(String, String)>, Error> {
        let (mut name, mut data, mut data_lines) = (String::new(), String::new(), 0usize);
        while let Some(line) = self.lines.next().await? {
            if line.is_empty() {
                // A blank line ends an event; one without data (or a run of
                // comments, the keep-alives) dispatches nothing.
                if data_lines > 0 {
                    return Ok(Some((name, data)));
                }
                name.clear();
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = line
                .split_once(':')
                .map_or((line.as_str(), ""), |(field, value)| (field, value.strip_prefix(' ').unwrap_or(value)));
            match field {
                "event" => value.clone_into(&mut name),
                "data" => {
                    if data_lines > 0 {
                        data.push('\n');
                    }
                    data.push_str(value);
                    data_lines += 1;
                }
                _ => {}
            }
        }
        Ok(None)
    }

    /// The next event runbox's live output has, skipping unknown ones.
    async fn next(&mut self) -> Result<Option<Event>, Error> {
        #[derive(Deserialize)]
        struct Chunk {
            offset: u64,
            data: String,
        }
        #[derive(Deserialize)]
        struct Broken {
            error: String,
            #[serde(default)]
            message: String,
        }
        if self.over {
            return Ok(None);
        }
        loop {
            let Some((name, data)) = self.next_raw().await? else {
                self.over = true;
                return Err(Error::Stream {
                    what: self.lines.what.clone(),
                    code: "ended".to_owned(),
                    message: "the connection closed before the job's result; read the job object".to_owned(),
                });
            };
            let event = match name.as_str() {
                "stdout" | "stderr" => {
                    let Chunk { offset, data } = self.lines.decode(&data)?;
                    if name == "stdout" { Event::Stdout { offset, data } } else { Event::Stderr { offset, data } }
                }
                "restart" => Event::Restart,
                "result" => {
                    self.over = true;
                    Event::Result(Box::new(self.lines.decode(&data)?))
                }
                "error" => {
                    self.over = true;
                    let Broken { error, message } = self.lines.decode(&data)?;
                    return Err(Error::Stream { what: self.lines.what.clone(), code: error, message });
                }
                _ => continue,
            };
            return Ok(Some(event));
        }
    }
}

impl Events {
    pub(crate) fn new(response: reqwest::Response, what: String) -> Events {
        Events::of(chunks(response), what)
    }

    fn of(chunks: Chunks, what: String) -> Events {
        let sse = Sse { lines: Lines::new(chunks, what, Some(STREAM_IDLE)), over: false };
        Events(
            stream::unfold(sse, |mut sse| async move {
                let item = match sse.next().await {
                    Ok(None) => return None,
                    Ok(Some(event)) => Ok(event),
                    Err(e) => {
                        sse.over = true;
                        Err(e)
                    }
                };
                Some((item, sse))
            })
            .boxed(),
        )
    }
}

impl BatchResults {
    /// No idle limit: the results stream is silent while jobs run, and a
    /// job may wait long in the queue.
    pub(crate) fn new(response: reqwest::Response, what: String) -> BatchResults {
        BatchResults::of(chunks(response), what)
    }

    fn of(chunks: Chunks, what: String) -> BatchResults {
        let lines = Lines::new(chunks, what, None);
        BatchResults(
            stream::unfold(Some(lines), |lines| async move {
                let mut lines = lines?;
                loop {
                    match lines.next().await {
                        Ok(Some(line)) if line.trim().is_empty() => {}
                        Ok(Some(line)) => {
                            let item = lines.decode::<Value>(&line).and_then(|value| lines.result(value));
                            return Some((item, Some(lines)));
                        }
                        Ok(None) => return None,
                        Err(e) => return Some((Err(e), None)),
                    }
                }
            })
            .boxed(),
        )
    }
}

impl Lines {
    /// A results line: a job object, or `{"id", "status": null, "expired": true}`.
    fn result(&self, line: Value) -> Result<BatchResult, Error> {
        if line.get("expired") == Some(&Value::Bool(true)) {
            let id = line.get("id").and_then(Value::as_str).unwrap_or_default().to_owned();
            return Ok(BatchResult::Expired { id });
        }
        let job = serde_json::from_value(line).map_err(|source| Error::Decode { what: self.what.clone(), source })?;
        Ok(BatchResult::Job(Box::new(job)))
    }
}

#[cfg(test)]
mod tests {
    use futures_util::TryStreamExt;

    use super::*;

    /// `body` in chunks of `size` bytes, as a slow network would bring it.
    fn chunked(body: &str, size: usize) -> Chunks {
        let pieces: Vec<Result<Vec<u8>, reqwest::Error>> =
            body.as_bytes().chunks(size).map(|c| Ok(c.to_vec())).collect();
        stream::iter(pieces).boxed()
    }

    const JOB: &str = r#"{"id":"j1","status":"completed","stdout":"h\u00e9\nlo\n","stderr":""}"#;

    #[tokio::test]
    async fn events_parse_whatever_the_chunks() {
        let body = format!(
            ": keep-alive\n\nevent: stdout\ndata: {{\"offset\":0,\"data\":\"h\u{e9}\\n\"}}\n\n\
             event: future\ndata: {{}}\n\nevent: restart\r\ndata: {{}}\r\n\r\n\
             event: stderr\ndata:{{\"offset\":0,\ndata: \"data\":\"lo\\n\"}}\n\n\
             event: result\ndata: {JOB}\n\nevent: stdout\ndata: {{\"offset\":9,\"data\":\"after\"}}\n\n"
        );
        for size in [1, 2, 3, 7, body.len()] {
            let events: Vec<Event> =
                Events::of(chunked(&body, size), "GET x".into()).try_collect().await.expect("events");
            let [
                Event::Stdout { offset: 0, data: out },
                Event::Restart,
                Event::Stderr { offset: 0, data: err },
                Event::Result(job),
            ] = events.as_slice()
            else {
                panic!("in chunks of {size}: {events:?}")
            };
            assert_eq!((out.as_str(), err.as_str()), ("h\u{e9}\n", "lo\n"), "in chunks of {size}");
            assert_eq!((job.id.as_str(), job.stdout.as_deref()), ("j1", Some("h\u{e9}\nlo\n")));
        }
    }

    #[tokio::test]
    async fn a_stream_without_its_result_ends_in_an_error() {
        let body = "event: stdout\ndata: {\"offset\":0,\"data\":\"x\"}\n\n";
        let items: Vec<Result<Event, Error>> = Events::of(chunked(body, 5), "GET x".into()).collect().await;
        assert!(
            matches!(&items[..], [Ok(Event::Stdout { .. }), Err(Error::Stream { code, .. })] if code == "ended"),
            "{items:?}"
        );
        let body = "event: error\ndata: {\"error\":\"unavailable\",\"message\":\"read the job\"}\n\n";
        let items: Vec<Result<Event, Error>> = Events::of(chunked(body, 4), "GET x".into()).collect().await;
        assert!(matches!(&items[..], [Err(Error::Stream { code, .. })] if code == "unavailable"), "{items:?}");
    }

    #[tokio::test]
    async fn results_are_jobs_or_expired_lines() {
        let body = format!("{JOB}\n\n{{\"id\":\"j2\",\"status\":null,\"expired\":true}}\n{JOB}");
        for size in [1, 4, body.len()] {
            let results: Vec<BatchResult> =
                BatchResults::of(chunked(&body, size), "GET x".into()).try_collect().await.expect("results");
            assert_eq!(results.iter().map(BatchResult::id).collect::<Vec<_>>(), ["j1", "j2", "j1"], "{results:?}");
            assert!(matches!(&results[1], BatchResult::Expired { .. }));
        }
        let broken: Vec<Result<BatchResult, Error>> =
            BatchResults::of(chunked("{\"id\": 1}\n", 3), "GET x".into()).collect().await;
        assert!(matches!(&broken[..], [Err(Error::Decode { .. })]), "{broken:?}");
    }
}
