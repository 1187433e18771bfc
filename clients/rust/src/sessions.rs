//! `/v1/sessions`: interpreters whose state lasts from one exec to the
//! next, and the files in their home.
//!
//! Sessions bend the retry rule where a retry could do something twice:
//! a create or fork (which have no idempotency key) is not retried on
//! 503 `unavailable`, an exec is never retried, and 409 `session_busy`,
//! like every 4xx but 429, is an error at once.

use std::time::Duration;

use reqwest::StatusCode;
use runbox_common::{CheckpointInfo, SessionStatus};

use crate::client::{Call, Client, RetryRule};
use crate::error::Error;
use crate::request::{Exec, NewSession};
use crate::response::{Accepted, ExecResult, ExecSession, FileListing, FileWritten, Session, SessionList};
use crate::stream::Events;

/// How long runbox waits for a worker to open a session before it answers
/// 202 with the session `starting`.
const START_HOLD: Duration = Duration::from_secs(60);
/// How long a checkpoint may take, and a fork (a checkpoint, then a start).
const CHECKPOINT_HOLD: Duration = Duration::from_secs(120);
const FORK_HOLD: Duration = Duration::from_secs(180);
/// What runbox waits beyond an exec's own timeout before it answers 202.
const EXEC_MARGIN: Duration = Duration::from_secs(30);
/// An exec's timeout when it names none: the api's default is not known
/// here, so a long one.
const EXEC_DEFAULT: Duration = Duration::from_secs(60);
/// How long a session answered as still `starting` is polled for, and how often.
const START_POLL: Duration = Duration::from_secs(120);
const START_POLL_EVERY: Duration = Duration::from_millis(500);
/// How long runbox waits on a session's file operation.
const FILE_HOLD: Duration = Duration::from_secs(60);

impl Client {
    /// Starts a session and answers once a worker holds it (or, past two
    /// minutes of `starting`, with it as it is).
    pub async fn create_session(&self, session: &NewSession) -> Result<Session, Error> {
        let call = Call::post(&["v1", "sessions"]).body(session)?.hold(START_HOLD).retry(RetryRule::SessionCreate);
        let session = self.json(&call).await?;
        self.started(session).await
    }

    pub async fn get_session(&self, id: &str) -> Result<Session, Error> {
        self.json(&Call::get(&["v1", "sessions", id])).await
    }

    /// The token's live sessions.
    pub async fn list_sessions(&self) -> Result<Vec<Session>, Error> {
        Ok(self.json::<SessionList>(&Call::get(&["v1", "sessions"])).await?.sessions)
    }

    /// Runs `exec` in session `id`: a failing exec is a result, not an
    /// error. Never retried (see the module doc). An exec that outlasts
    /// runbox's wait is waited for here, as a job.
    pub async fn exec(&self, id: &str, exec: &Exec) -> Result<ExecResult, Error> {
        let call =
            Call::post(&["v1", "sessions", id, "exec"]).body(exec)?.hold(exec_hold(exec)).retry(RetryRule::Never);
        let answer = self
            .answer(&call, |status, body| {
                if status == StatusCode::ACCEPTED {
                    return Ok(Err(serde_json::from_slice::<Accepted>(body)?.id));
                }
                Ok(Ok(serde_json::from_slice::<ExecResult>(body)?))
            })
            .await?;
        match answer {
            Ok(result) => Ok(result),
            Err(job) => {
                let job = self.wait(&job).await?;
                let session = self.get_session(id).await?;
                Ok(ExecResult {
                    job,
                    session: ExecSession { id: session.id, status: session.status, restored_from: None },
                })
            }
        }
    }

    /// [`Client::exec`], answered with the exec's output as it is written,
    /// then its result, as [`Client::events`] gives a job's.
    pub async fn exec_events(&self, id: &str, exec: &Exec) -> Result<Events, Error> {
        let call =
            Call::post(&["v1", "sessions", id, "exec"]).body(exec)?.stream("text/event-stream").retry(RetryRule::Never);
        let (response, what) = self.send(&call).await?;
        Ok(Events::new(response, what))
    }

    /// Saves session `id`'s state. A retry after a lost answer at worst
    /// leaves one more checkpoint, which expires by itself.
    pub async fn checkpoint(&self, id: &str) -> Result<CheckpointInfo, Error> {
        self.json(&Call::post(&["v1", "sessions", id, "checkpoints"]).hold(CHECKPOINT_HOLD)).await
    }

    /// Checkpoints session `id` and starts a new session from it; the two
    /// then go their own ways. Retried as a create is.
    pub async fn fork(&self, id: &str) -> Result<Session, Error> {
        let call = Call::post(&["v1", "sessions", id, "fork"]).hold(FORK_HOLD).retry(RetryRule::SessionCreate);
        let session = self.json(&call).await?;
        self.started(session).await
    }

    /// Ends session `id` and its process; answers with it `closed`.
    pub async fn destroy_session(&self, id: &str) -> Result<Session, Error> {
        self.json(&Call::delete(&["v1", "sessions", id])).await
    }

    /// Writes `bytes` to `path` under session `id`'s home, making its
    /// directories; a file there is replaced, so a retry is harmless.
    pub async fn upload_file(&self, id: &str, path: &str, bytes: impl Into<Vec<u8>>) -> Result<FileWritten, Error> {
        let route = file_route(id, path)?;
        self.json(&Call::put(&route).bytes(bytes.into()).hold(FILE_HOLD)).await
    }

    /// The bytes of the file at `path` under session `id`'s home.
    pub async fn read_file(&self, id: &str, path: &str) -> Result<Vec<u8>, Error> {
        self.bytes(&Call::get(&file_route(id, path)?).hold(FILE_HOLD)).await
    }

    /// A directory of session `id`'s home: the home itself with `None`.
    pub async fn list_files(&self, id: &str, path: Option<&str>) -> Result<FileListing, Error> {
        self.json(&Call::get(&["v1", "sessions", id, "files"]).query("path", path).hold(FILE_HOLD)).await
    }

    /// Deletes the file at `path` under session `id`'s home, or the
    /// directory with all it holds.
    pub async fn delete_file(&self, id: &str, path: &str) -> Result<(), Error> {
        self.bytes(&Call::delete(&file_route(id, path)?).hold(FILE_HOLD)).await.map(drop)
    }

    /// `session` once a worker has opened it: runbox answers 202 with it
    /// still `starting` when that takes long.
    async fn started(&self, mut session: Session) -> Result<Session, Error> {
        let deadline = tokio::time::Instant::now() + START_POLL;
        while session.status == SessionStatus::Starting && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(START_POLL_EVERY).await;
            session = self.get_session(&session.id).await?;
        }
        Ok(session)
    }
}

/// The route of the file at `path` in session `id`, one segment per name.
/// A path with an empty, `.` or `..` name is refused here with the
/// `invalid_path` runbox would answer: the URL would resolve it away
/// before runbox could see it, and name another file.
fn file_route<'a>(id: &'a str, path: &'a str) -> Result<Vec<&'a str>, Error> {
    let names: Vec<&str> = path.split('/').collect();
    if names.iter().any(|name| matches!(*name, "" | "." | "..")) {
        return Err(Error::Api {
            status: StatusCode::BAD_REQUEST,
            code: "invalid_path".to_owned(),
            message: format!(
                "{path:?} has an empty, `.` or `..` name; a path is plain names relative to the session's home"
            ),
            jobs: Vec::new(),
        });
    }
    Ok(["v1", "sessions", id, "files"].into_iter().chain(names).collect())
}

/// How long runbox may hold an exec: its timeout plus the margin.
fn exec_hold(exec: &Exec) -> Duration {
    exec.timeout_ms.map_or(EXEC_DEFAULT, Duration::from_millis) + EXEC_MARGIN
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_path_is_one_segment_per_name_and_dot_names_are_refused() {
        assert_eq!(file_route("s", "a b/c.csv").expect("route"), ["v1", "sessions", "s", "files", "a b", "c.csv"]);
        let client = Client::new("http://127.0.0.1:8080", "t").expect("client");
        let route = file_route("s", "d/%2e?x#y").expect("route");
        let url = client.url(&Call::get(&route));
        assert_eq!(url.as_str(), "http://127.0.0.1:8080/v1/sessions/s/files/d/%252e%3Fx%23y");
        for bad in ["../etc/passwd", "a/../b", "/abs", "a//b", "./a", "a/"] {
            let error = file_route("s", bad).expect_err(bad);
            assert_eq!((error.status(), error.code()), (Some(StatusCode::BAD_REQUEST), Some("invalid_path")), "{bad}");
        }
    }
}
