//! One child's way to the proxy: a Unix socket in its private directory,
//! which its harness connects to once, while it boots.
//!
//! The protocol, both ways a line of JSON and then the raw bytes it
//! announces (`body`):
//!
//! - harness → proxy: `{"id", "job", "method", "url", "headers": [[name,
//!   value]], "redirect": "follow" | "manual" | "error", "body"}`;
//! - proxy → harness: `{"id", "status", "status_text", "url", "redirected",
//!   "headers", "body"}`, or `{"id", "error"}`.
//!
//! Requests may overlap; answers come in the order they finish. Whatever
//! arrives is a job's to send, so nothing on the socket is trusted: a line
//! past its cap or that does not parse ends the link, and every request is
//! judged by the rules of the job the link serves at that moment
//! ([`Link::begin`]). A job's requests still running when it ends are
//! dropped with it, so an answer never reaches the next job.
//!
//! Each request bears the tag of its job's frame (`egress_tag`), which the
//! harness stamped on it when it took it (`job`): one that arrives once
//! its job has ended (written late, from the harness's queue) is refused,
//! never judged by, sent for or counted against the job the link serves
//! by then.
//!
//! Answers are written by one task of their own, each whole: a request
//! dropped with its job is dropped before its answer is queued, never
//! while its bytes are being written, which would leave the harness
//! reading the next answer as the rest of this one's body. An answer
//! queued for a job that has since ended is not sent; one already being
//! sent is finished, and the harness, which numbers every request and
//! never reuses a number, drops it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use runbox_common::{Egress, HostTraffic};
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixListener;
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinHandle};
use tracing::Instrument;

use super::EgressProxy;
use super::fetch::{self, JobEgress, Usage};

/// The socket's name in a child's private directory.
const SOCKET: &str = "egress.sock";

/// The longest request line: a URL and headers, generously. The harness
/// refuses a longer one itself; one that arrives anyway ends the link.
const MAX_LINE: u64 = 256 * 1024;

/// The longest answer line the harness reads (egress.mjs): an answer whose
/// status, URL and headers would be longer is an error instead.
const MAX_ANSWER_LINE: usize = 1024 * 1024;

/// The proxy's end of one child's socket.
pub struct Link {
    path: PathBuf,
    proxy: Arc<EgressProxy>,
    job: Arc<Mutex<Option<Arc<JobEgress>>>>,
    requests: Arc<Mutex<Vec<AbortHandle>>>,
    server: JoinHandle<()>,
    /// The harness connected, and the connection has since ended: the
    /// child's later jobs would have no egress.
    broken: Arc<AtomicBool>,
}

#[derive(Deserialize)]
struct Envelope {
    id: u64,
    /// The tag of the job that made the request.
    #[serde(default)]
    job: String,
    #[serde(default)]
    body: u64,
    #[serde(flatten)]
    request: fetch::Request,
}

impl Link {
    /// Listens on the socket in `dir`, for one connection: the harness's.
    pub fn listen(proxy: Arc<EgressProxy>, dir: &Path) -> std::io::Result<Link> {
        let path = dir.join(SOCKET);
        let listener = UnixListener::bind(&path)?;
        let job: Arc<Mutex<Option<Arc<JobEgress>>>> = Arc::default();
        let requests: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let broken = Arc::new(AtomicBool::new(false));
        let served = serve(listener, path.clone(), proxy.clone(), job.clone(), requests.clone());
        let ended = broken.clone();
        let server = tokio::spawn(async move {
            if served.await {
                ended.store(true, Ordering::Relaxed);
            }
        });
        Ok(Link { path, proxy, job, requests, server, broken })
    }

    /// The socket's path, which the harness is given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// From now on, requests the harness made for the job whose frame
    /// bears `tag` are judged by `egress` (None: each is refused), and
    /// any other is refused.
    pub fn begin(&self, egress: Option<&Egress>, tag: &str) {
        self.cancel_requests();
        let job = egress.map(|egress| {
            Arc::new(JobEgress {
                tag: tag.to_owned(),
                egress: egress.clone(),
                secrets: self.proxy.secrets.get(&egress.token).cloned().unwrap_or_default(),
                usage: Mutex::new(Usage::default()),
                limits: self.proxy.limits,
                // The job's span, so that each request's log line names the job.
                span: tracing::Span::current(),
            })
        });
        *lock(&self.job) = job;
    }

    /// Ends the job: its requests still running are dropped, later ones
    /// refused. Returns its traffic, per host.
    pub fn end(&self) -> Vec<HostTraffic> {
        let job = lock(&self.job).take();
        self.cancel_requests();
        job.map(|job| std::mem::take(&mut lock(&job.usage).hosts)).unwrap_or_default()
    }

    /// Whether the link the harness made has ended (a protocol error, or a
    /// job that closed it): a child in that state is not reused.
    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Relaxed)
    }

    fn cancel_requests(&self) {
        for request in lock(&self.requests).drain(..) {
            request.abort();
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.server.abort();
        self.cancel_requests();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Takes the harness's connection, then serves it until it ends; true if
/// there was one.
async fn serve(
    listener: UnixListener,
    path: PathBuf,
    proxy: Arc<EgressProxy>,
    current: Arc<Mutex<Option<Arc<JobEgress>>>>,
    requests: Arc<Mutex<Vec<AbortHandle>>>,
) -> bool {
    let accepted = listener.accept().await;
    // One connection only: nothing else may connect, even with the path.
    drop(listener);
    let _ = std::fs::remove_file(&path);
    let Ok((stream, _)) = accepted else { return false };
    let (read, write) = stream.into_split();
    let (writer, outbox) = mpsc::unbounded_channel();
    tokio::spawn(write_answers(write, outbox, current.clone()));
    let mut reader = BufReader::new(read);
    loop {
        let mut line = Vec::new();
        match (&mut reader).take(MAX_LINE).read_until(b'\n', &mut line).await {
            Ok(n) if n > 0 && line.last() == Some(&b'\n') => {}
            _ => return true,
        }
        let Ok(Envelope { id, job: tag, body, request }) = serde_json::from_slice::<Envelope>(&line) else {
            return true;
        };
        // Only the job that made the request: see the header.
        let job = lock(&current).clone().filter(|job| job.tag == tag);
        let cap = job.as_ref().map_or(0, |job| job.limits.max_bytes);
        if body > cap {
            // Skipped unread, so the link stays in step.
            if tokio::io::copy(&mut (&mut reader).take(body), &mut tokio::io::sink()).await.is_err() {
                return true;
            }
            let error = match job {
                Some(_) => format!("a request body of {body} bytes is past the job's cap of {cap}"),
                None => "this job may reach no host".to_owned(),
            };
            let _ = writer.send(Answer { job, id, result: Err(error) });
            continue;
        }
        let mut bytes = Vec::new();
        if (&mut reader).take(body).read_to_end(&mut bytes).await.map_or(true, |n| n as u64 != body) {
            return true;
        }
        // The job may have ended while its body arrived: then it is not sent.
        let job = job.filter(|job| lock(&current).as_ref().is_some_and(|now| Arc::ptr_eq(now, job)));
        let Some(job) = job else {
            let _ = writer.send(Answer { job: None, id, result: Err("this job may reach no host".to_owned()) });
            continue;
        };
        if let Err(error) = job.enter() {
            let _ = writer.send(Answer { job: Some(job), id, result: Err(error) });
            continue;
        }
        let (client, writer) = (proxy.client.clone(), writer.clone());
        let span = job.span.clone();
        let task = tokio::spawn(async move {
            let result = fetch::fetch(&client, &job, request, bytes).instrument(span).await;
            job.release();
            let _ = writer.send(Answer { job: Some(job), id, result });
        });
        let mut running = lock(&requests);
        running.retain(|request| !request.is_finished());
        running.push(task.abort_handle());
    }
}

/// An answer on its way to the harness, and the job that asked (None:
/// a request no job could make).
struct Answer {
    job: Option<Arc<JobEgress>>,
    id: u64,
    result: Result<(fetch::Response, Vec<u8>), String>,
}

/// Writes each answer whole, in the order they come, to the harness; an
/// answer to a job that has ended is dropped instead (see the header).
async fn write_answers(
    mut writer: OwnedWriteHalf,
    mut outbox: mpsc::UnboundedReceiver<Answer>,
    current: Arc<Mutex<Option<Arc<JobEgress>>>>,
) {
    while let Some(Answer { job, id, result }) = outbox.recv().await {
        let asked = job.is_none_or(|job| lock(&current).as_ref().is_some_and(|now| Arc::ptr_eq(now, &job)));
        if !asked {
            continue;
        }
        let (line, body) = frame(id, result);
        // A child that stopped reading has gone, or will be: nothing to do.
        if writer.write_all(&line).await.is_err() || writer.write_all(&body).await.is_err() {
            return;
        }
    }
}

/// An answer's line (newline included) and body.
fn frame(id: u64, result: Result<(fetch::Response, Vec<u8>), String>) -> (Vec<u8>, Vec<u8>) {
    let (line, mut body) = match result {
        Ok((response, body)) => {
            let mut line = serde_json::to_value(&response).unwrap_or_default();
            line["id"] = id.into();
            line["body"] = body.len().into();
            (line, body)
        }
        Err(error) => (serde_json::json!({"id": id, "error": format!("runbox egress: {error}")}), Vec::new()),
    };
    let mut line = line.to_string();
    if line.len() >= MAX_ANSWER_LINE {
        let error = "runbox egress: the answer's status line, URL and headers are longer than 1 MiB";
        (line, body) = (serde_json::json!({"id": id, "error": error}).to_string(), Vec::new());
    }
    let mut line = line.into_bytes();
    line.push(b'\n');
    (line, body)
}
