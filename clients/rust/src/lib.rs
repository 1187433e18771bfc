//! A Rust client for runbox's HTTP API (`/v1`; the project README has the
//! reference): jobs, their live output, batches with streamed results,
//! sessions and their files, idempotent submits, retries and typed errors.
//!
//! ```no_run
//! # async fn example() -> Result<(), runbox_client::Error> {
//! use futures_util::StreamExt;
//! use runbox_client::{Client, Event, NewJob, Status};
//!
//! let runbox = Client::new("http://127.0.0.1:8080", "TOKEN")?;
//! let job = runbox.run(&NewJob::python("print(input()[::-1])").stdin("olleh\n")).await?;
//! assert_eq!((job.status, job.stdout.as_deref()), (Status::Completed, Some("hello\n")));
//!
//! let id = runbox.submit(&NewJob::javascript("console.log(6 * 7)"), &Default::default()).await?;
//! let mut events = runbox.events(id.id()).await?;
//! while let Some(event) = events.next().await {
//!     if let Event::Stdout { data, .. } = event? {
//!         print!("{data}");
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! The rules every call follows:
//!
//! - A program that fails is data: [`Client::run`] answers with a [`Job`]
//!   whatever its status or exit code.
//! - 429 and 503 are retried after their `Retry-After`, a bounded number
//!   of times ([`Retry`]); sessions bend this where a retry could run
//!   something twice (see [`Client::exec`] and [`Client::create_session`]).
//! - Every other error status is [`Error::Api`] with the API's status,
//!   code and message; [`Error`] has a variant each for transport,
//!   decoding and a broken stream besides.
//!
//! # Types
//!
//! Requests are common's [`JobSpec`], wrapped in [`NewJob`] (with the
//! submission's `callback_url` and `shared_runtime`, and setters), plus
//! small types of this crate for what common has no type for:
//! [`NewBatch`] and its [`Case`]s, [`NewSession`], [`Exec`], and the
//! options [`SubmitOptions`] and [`BatchQuery`].
//!
//! Answers use common's types where it has them: [`Status`],
//! [`Language`], [`Verdict`], [`OutputFile`], [`SessionStatus`],
//! [`FileEntry`] and [`FileType`] (a session's file), [`CheckpointInfo`] (a checkpoint), [`WorkerInfo`], and `/v1/runtimes`'
//! [`Runtimes`] and [`RuntimeLimits`]. The objects
//! around them are rendered by the api from view types of its own that
//! common does not hold, so this crate declares them, field for field:
//! [`Job`] (and its [`Timings`], which common's does not deserialize),
//! [`Submitted`], [`Batch`], [`BatchStatus`], [`BatchSubmitted`],
//! [`BatchResult`], [`Session`], [`ExecResult`], [`ExecSession`],
//! [`FileWritten`], [`FileListing`], and the
//! stream's [`Event`].
//!
//! # Layout
//!
//! - `client`: [`Client`], its settings ([`ClientBuilder`], [`Retry`]), and
//!   the one path every request takes (token, timeouts, retries).
//! - `jobs`, `batches`, `sessions`: the calls on each resource.
//! - `stream`: the streamed answers, [`Events`] (Server-Sent Events) and
//!   [`BatchResults`] (NDJSON).
//! - `request` and `response`: the types sent and received.
//! - `error`: [`Error`].

mod batches;
mod client;
mod error;
mod jobs;
mod request;
mod response;
mod sessions;
mod stream;

pub use client::{Client, ClientBuilder, MAX_WAIT_S, Retry};
pub use error::{Error, InvalidJob};
pub use request::{BatchQuery, Case, Exec, NewBatch, NewJob, NewSession, SubmitOptions};
pub use response::{
    Batch, BatchResult, BatchStatus, BatchSubmitted, ExecResult, ExecSession, FileListing, FileWritten, Job, Session,
    Submitted, Timings,
};
pub use runbox_common::{
    CheckpointInfo, Compare, FileEncoding, FileEntry, FileType, InputFile, JobSpec, Language, OutputFile, ReturnFiles,
    RuntimeLimits, Runtimes, SessionStatus, Status, Verdict, WorkerInfo,
};
pub use stream::{BatchResults, Event, Events, STREAM_IDLE};
