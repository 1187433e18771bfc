//! `GET /v1/jobs/{id}/events`: a job's output as it is written, as
//! Server-Sent Events, then its result.
//!
//! Events, in order:
//!
//! - `stdout` / `stderr`: `{"offset": n, "data": "..."}`, a chunk of the
//!   stream starting `n` bytes in. Chunks end on whole characters, and
//!   together they are the job object's `stdout` and `stderr`.
//! - `restart`: `{}`, when the job is run again from the start (its worker
//!   died and another took it over); the offsets start again from 0.
//! - `result`: the job object, once the job is final; the stream ends.
//!
//! A subscriber that comes late gets what was written so far first; one
//! that comes after the end gets the job's output as one chunk per stream,
//! then the result. The chunks come from the job's live stream in Redis
//! (see `runbox_common`'s `live` module), so any api replica can serve any
//! job, and this process reads it only when told it grew.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::{Stream, StreamExt, stream};
use runbox_common::{JobRecord, LiveEntry, OutputStream, QueueError};
use serde_json::json;
use tokio::time::Instant;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::pipeline::{RECHECK_EVERY, owned, wait_for};
use crate::state::AppState;
use crate::views::JobView;

/// Streams job `id`'s output and then its result.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/events",
    tag = "jobs",
    params(crate::jobs::JobId),
    responses(
        (status = 200, description = "`text/event-stream`: `stdout` and `stderr` events (`{offset, data}`), `restart` if the job is run again, then one `result` event with the job object.", content_type = "text/event-stream", body = crate::views::LiveEvent),
        (status = 404, description = "`not_found`: no such job, or another token's.", body = crate::views::ErrorBody),
        (status = 401, description = "`unauthorized`.", body = crate::views::ErrorBody),
    ),
)]
pub async fn stream(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let record = owned(wait_for(&state, &id, Duration::ZERO).await?, &caller)?;
    Ok(events(state, id, Some(record), None))
}

/// The event stream of job `id`, which the caller owns; `first` is the job
/// as just read, if it was. Past `deadline`, if the job is not final by
/// then, the stream ends with an `error` event.
pub(crate) fn events(
    state: AppState,
    id: String,
    first: Option<JobRecord>,
    deadline: Option<Instant>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    Sse::new(updates(state, id, first, deadline).map(|update| Ok(update.event()))).keep_alive(KeepAlive::default())
}

/// What a watcher of a job sees, in order: the job's output as it is
/// written, then the job once final; or the reason the watch ended first.
pub(crate) enum Update {
    /// A chunk of `stream`, starting `offset` bytes in.
    Chunk {
        stream: OutputStream,
        offset: u64,
        text: String,
    },
    /// The job is run again from the start; offsets start again from 0.
    Restart,
    Result(Box<JobRecord>),
    /// The watch ended before the job did: Redis failed, or the deadline
    /// passed. The job object is the way to its result.
    Broken(&'static str),
}

impl Update {
    fn event(self) -> Event {
        match self {
            Update::Chunk { stream, offset, text } => Event::default()
                .event(stream.as_str())
                .json_data(json!({ "offset": offset, "data": text }))
                .unwrap_or_default(),
            Update::Restart => Event::default().event("restart").data("{}"),
            Update::Result(record) => {
                Event::default().event("result").json_data(JobView::from(*record)).unwrap_or_default()
            }
            Update::Broken(message) => {
                Event::default().event("error").data(json!({ "error": "unavailable", "message": message }).to_string())
            }
        }
    }
}

/// Job `id`'s [`Update`]s, as [`events`] sends them.
pub(crate) fn updates(
    state: AppState,
    id: String,
    first: Option<JobRecord>,
    deadline: Option<Instant>,
) -> impl Stream<Item = Update> {
    let watch = Watch {
        state,
        id,
        after: "0".to_owned(),
        sent: [0, 0],
        shown: [0, 0],
        attempt: 0,
        first,
        deadline,
        over: false,
    };
    stream::unfold(watch, Watch::next).flat_map(stream::iter)
}

/// Where one subscriber is in one job's stream.
struct Watch {
    state: AppState,
    id: String,
    /// The live stream's last entry sent.
    after: String,
    /// Bytes of stdout and of stderr sent, by the job's delivery `attempt`.
    sent: [u64; 2],
    /// The same as text: invalid bytes sent as U+FFFD, as the job object
    /// holds them.
    shown: [usize; 2],
    attempt: u64,
    /// The job as read when the subscriber came.
    first: Option<JobRecord>,
    /// When to stop waiting for a job that should have ended.
    deadline: Option<Instant>,
    over: bool,
}

impl Watch {
    /// The next events to send, waiting for them if there are none yet;
    /// None once the result was sent.
    async fn next(mut self) -> Option<(Vec<Update>, Watch)> {
        if self.over {
            return None;
        }
        let (output, done) = (self.state.watchers.register(&self.id), self.state.waiters.register(&self.id));
        // The job is read at first and whenever it may have ended; its
        // output whenever it grew.
        let mut read_job = true;
        loop {
            let grew = output.notify.notified();
            let ended = done.notify.notified();
            tokio::pin!(grew, ended);
            grew.as_mut().enable();
            ended.as_mut().enable();
            let record = match self.first.take() {
                Some(record) => Some(record),
                None if read_job => match self.state.queue.get(&self.id).await {
                    Ok(record) => record,
                    Err(e) => return Some((vec![failure(&e)], self.ended())),
                },
                None => None,
            };
            // Read after the job: a job found final has all its chunks in.
            let mut events = match self.chunks().await {
                Ok(events) => events,
                Err(e) => return Some((vec![failure(&e)], self.ended())),
            };
            match record {
                // Gone (expired) while watched: nothing more will come.
                None if read_job => return Some((events, self.ended())),
                Some(record) if record.status.is_final() => {
                    events.extend(self.rest(&record));
                    events.push(Update::Result(Box::new(record)));
                    return Some((events, self.ended()));
                }
                _ => {}
            }
            if !events.is_empty() {
                return Some((events, self));
            }
            if self.state.stopping.is_cancelled() {
                return None;
            }
            if self.deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                let message = "the exec did not end in time; its worker may have stopped: read the job object";
                return Some((vec![Update::Broken(message)], self.ended()));
            }
            let recheck = Instant::now() + RECHECK_EVERY;
            let recheck = self.deadline.map_or(recheck, |deadline| recheck.min(deadline));
            read_job = tokio::select! {
                () = grew => false,
                () = ended => true,
                () = tokio::time::sleep_until(recheck) => true,
                () = self.state.stopping.cancelled() => true,
            };
        }
    }

    fn ended(mut self) -> Watch {
        self.over = true;
        self
    }

    /// Every chunk the live stream holds past what was sent.
    async fn chunks(&mut self) -> Result<Vec<Update>, QueueError> {
        let mut events = Vec::new();
        loop {
            let entries = self.state.queue.read_output(&self.id, &self.after).await?;
            let Some(last) = entries.last() else { return Ok(events) };
            self.after = last.id.clone();
            for LiveEntry { attempt, chunk, .. } in entries {
                // An attempt that was taken over writes no more that counts.
                if attempt < self.attempt {
                    continue;
                }
                if attempt > self.attempt {
                    // Only what was sent of an earlier attempt needs taking back.
                    if self.sent != [0, 0] {
                        events.push(Update::Restart);
                    }
                    (self.attempt, self.sent, self.shown) = (attempt, [0, 0], [0, 0]);
                }
                let side = chunk.stream as usize;
                let text = String::from_utf8_lossy(&chunk.data);
                self.sent[side] = chunk.offset + chunk.data.len() as u64;
                self.shown[side] += text.len();
                events.push(Update::Chunk { stream: chunk.stream, offset: chunk.offset, text: text.into_owned() });
            }
        }
    }

    /// What the finished job's output holds past the chunks sent: all of
    /// it for a subscriber that came after the end, or after the live
    /// stream expired.
    fn rest(&mut self, record: &JobRecord) -> Vec<Update> {
        let Some(outcome) = &record.outcome else { return Vec::new() };
        [(OutputStream::Stdout, &outcome.stdout), (OutputStream::Stderr, &outcome.stderr)]
            .into_iter()
            .filter_map(|(stream, text)| {
                let side = stream as usize;
                let rest = text.get(self.shown[side]..).filter(|rest| !rest.is_empty())?;
                self.shown[side] = text.len();
                Some(Update::Chunk { stream, offset: self.sent[side], text: rest.to_owned() })
            })
            .collect()
    }
}

/// The stream's end when Redis fails mid-way: the client reads the job
/// object instead.
fn failure(e: &QueueError) -> Update {
    tracing::warn!(error = %e, "live output stream broke off");
    Update::Broken("the live output stream broke off; read the job object")
}
