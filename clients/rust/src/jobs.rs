//! `/v1/jobs`: submit, read, wait for, cancel and watch one job.

use std::time::Duration;

use reqwest::StatusCode;
use serde::Serialize;

use crate::client::{Call, Client, MAX_WAIT_S};
use crate::error::Error;
use crate::request::{NewJob, SubmitOptions};
use crate::response::{Accepted, Job, Submitted};
use crate::stream::Events;
use runbox_common::Runtimes;

/// How long `DELETE /v1/jobs/{id}` (and a batch's) waits for the kill to
/// be confirmed.
pub(crate) const CANCEL_HOLD: Duration = Duration::from_secs(2);

impl Client {
    /// Queues a job. Answers [`Submitted::Pending`], or, when it finished
    /// within `options.wait` (or an `Idempotency-Key` reused names a
    /// finished job), [`Submitted::Finished`].
    pub async fn submit(&self, job: &NewJob, options: &SubmitOptions) -> Result<Submitted, Error> {
        self.submit_body(job, options).await
    }

    /// [`Client::submit`] for a job spec as JSON, sent as it is: for specs
    /// this program did not write (read from a file, passed on), which the
    /// api checks and, if it must, refuses naming what is wrong.
    pub async fn submit_raw(&self, spec: &serde_json::Value, options: &SubmitOptions) -> Result<Submitted, Error> {
        self.submit_body(spec, options).await
    }

    async fn submit_body(&self, body: &impl Serialize, options: &SubmitOptions) -> Result<Submitted, Error> {
        let call = Call::post(&["v1", "jobs"])
            .body(body)?
            .wait(options.wait)
            .idempotency_key(options.idempotency_key.as_deref());
        self.answer(&call, |status, body| {
            if status == StatusCode::OK {
                return Ok(Submitted::Finished(Box::new(serde_json::from_slice(body)?)));
            }
            let Accepted { id, status } = serde_json::from_slice(body)?;
            Ok(Submitted::Pending { id, status })
        })
        .await
    }

    /// Job `id` as it is now; with `wait`, once it is finished or that many
    /// seconds (at most [`MAX_WAIT_S`]) have passed.
    pub async fn get(&self, id: &str, wait: Option<u64>) -> Result<Job, Error> {
        self.json(&Call::get(&["v1", "jobs", id]).wait(wait)).await
    }

    /// Job `id` once it is finished, long-polling as long as it takes.
    pub async fn wait(&self, id: &str) -> Result<Job, Error> {
        loop {
            let job = self.get(id, Some(MAX_WAIT_S)).await?;
            if job.is_final() {
                return Ok(job);
            }
        }
    }

    /// Runs a job and answers with it finished, whatever its exit code: a
    /// failing program is a [`Job`], not an [`Error`].
    pub async fn run(&self, job: &NewJob) -> Result<Job, Error> {
        match self.submit(job, &SubmitOptions::new().wait(MAX_WAIT_S)).await? {
            Submitted::Finished(job) => Ok(*job),
            Submitted::Pending { id, .. } => self.wait(&id).await,
        }
    }

    /// Cancels job `id`: a queued job never runs, a running one is killed.
    /// Answers with the job, final if the kill was confirmed within 2 s.
    pub async fn cancel(&self, id: &str) -> Result<Job, Error> {
        self.json(&Call::delete(&["v1", "jobs", id]).hold(CANCEL_HOLD)).await
    }

    /// Job `id`'s output as it is written, then its result: what was
    /// written before the call comes first.
    pub async fn events(&self, id: &str) -> Result<Events, Error> {
        let (response, what) = self.send(&Call::get(&["v1", "jobs", id, "events"]).stream("text/event-stream")).await?;
        Ok(Events::new(response, what))
    }

    /// The languages, the limits in force and the live workers.
    pub async fn runtimes(&self) -> Result<Runtimes, Error> {
        self.json(&Call::get(&["v1", "runtimes"])).await
    }
}
