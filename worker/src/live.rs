//! Live output, the worker's side: a running job's kept output goes to
//! Redis in chunks as it is written (see `runbox_common`'s `live` module).
//!
//! Every job's output is sent, watched or not, because a subscriber may
//! come late and must first get what was written so far. The job never
//! waits for it: the capture hands bytes to a [`Live`] and goes on, and one
//! task per job writes whatever piled up, at most once per [`COALESCE`]
//! until the job ends, and then the rest at once.
//! A write that fails is not retried: the job object has all the output.

use std::time::Duration;

use runbox_common::{LIVE_GRACE, Queue};
use tokio::task::JoinHandle;

use crate::sandbox::Live;

/// Shortest time between two writes of one job's output: a job printing
/// line by line costs a few writes a second, not one per line.
const COALESCE: Duration = Duration::from_millis(25);

/// How long the last write may take before the result is written without it.
const LAST_WRITE: Duration = Duration::from_secs(2);

/// One job's output on its way to Redis.
pub(crate) struct Forwarder {
    live: Live,
    task: Option<JoinHandle<()>>,
}

impl Forwarder {
    /// Starts sending job `id`'s output; its stream outlives the job by at
    /// most `running_for` while the job runs, and [`LIVE_GRACE`] after.
    /// `attempt` is the job's delivery count. When `on` is false, nothing
    /// is sent.
    pub(crate) fn start(on: bool, queue: &Queue, id: &str, attempt: u64, running_for: Duration) -> Forwarder {
        if !on {
            return Forwarder { live: Live::default(), task: None };
        }
        let live = Live::new();
        let ttl = running_for + LIVE_GRACE;
        let task = tokio::spawn(forward(queue.clone(), id.to_owned(), attempt, live.clone(), ttl));
        Forwarder { live, task: Some(task) }
    }

    pub(crate) fn live(&self) -> &Live {
        &self.live
    }

    /// Sends what is left, before the job's result is written, so that a
    /// subscriber gets all the chunks before the result.
    pub(crate) async fn finish(self) {
        self.live.close();
        let Some(mut task) = self.task else { return };
        if tokio::time::timeout(LAST_WRITE, &mut task).await.is_err() {
            task.abort();
        }
    }
}

async fn forward(queue: Queue, id: String, attempt: u64, live: Live, running_ttl: Duration) {
    while let Some((chunks, last)) = live.take().await {
        let ttl = if last { LIVE_GRACE } else { running_ttl };
        if let Err(e) = queue.append_output(&id, attempt, &chunks, ttl).await {
            tracing::warn!(error = %e, "could not send live output; the job's result keeps all of it");
        }
        if last {
            return;
        }
        // Cut short when the job ends: its result waits for the last write.
        tokio::select! {
            () = tokio::time::sleep(COALESCE) => {}
            () = live.closed() => {}
        }
    }
}
