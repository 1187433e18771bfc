//! Sessions on a worker: opening, serving and ending the sessions this
//! worker holds (the table of them is `held_sessions`), and the inbox
//! through which their execs, checkpoints and destroys arrive (see
//! `runbox_common::session` for the whole protocol).
//!
//! A session starts as a job on the session-starts stream, which a worker
//! claims only into one of its session places (`RUNBOX_WORKER_SESSIONS`,
//! apart from its job slots): the worker opens a [`SessionChild`], marks
//! the session idle on itself, answers the start job, and then keeps the
//! place while the session lives ([`Worker::serve_session`]). Tasks for
//! it arrive on this worker's inbox list ([`inbox`]), are verified like any
//! job, and run one at a time.
//!
//! A session ends when its owner destroys it, when it has been idle for its
//! idle timeout or lived its lifetime (expired), or when its process dies:
//! then it comes back from its latest checkpoint, or ends as lost. It is
//! never silently reset to empty. On shutdown its process is killed and the
//! session left as it is: the api brings it back elsewhere on its next exec
//! (from its latest checkpoint; without one it is lost).

use std::sync::Arc;
use std::time::{Duration, Instant};

use runbox_common::{
    CheckpointInfo, Claimed, FileAction, JobSpec, Language, Outcome, Queue, SessionOp, SessionStatus, SessionTask,
    Status, StepResult, now_rfc3339, now_unix_ms, rfc3339_at_unix_ms,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span, warn};

use crate::held_sessions::Held;
use crate::live::Forwarder;
use crate::sandbox::{Replayed, Restore, SessionChild};
use crate::worker::{Ran, RunningJob, Worker};

/// How long one wait on the inbox blocks in Redis.
pub(crate) const INBOX_BLOCK: Duration = Duration::from_secs(1);

/// A session whose child is open, handed from its start job to the task
/// that serves it.
pub(crate) struct Opened {
    id: String,
    owner: String,
    language: Language,
    /// Its token has egress rules: its child gets a `fetch` through the proxy.
    egress: bool,
    child: SessionChild,
    idle_timeout: Duration,
    expires_at_ms: u64,
    tasks: mpsc::UnboundedReceiver<(Claimed, JobSpec)>,
    end: CancellationToken,
}

impl Worker {
    /// Runs the start job of session `task`: boots its child, from its
    /// checkpoint when asked. The outcome answers the start job.
    pub(crate) async fn open_session(&self, spec: &JobSpec, task: &SessionTask) -> (Outcome, Option<Opened>) {
        let _slot = self.runner.hold_slot();
        let started = Instant::now();
        let SessionOp::Start { owner, checkpoint, idle_timeout_ms, expires_at_ms } = &task.op else {
            return (Outcome::internal_error("a session's step arrived outside its session"), None);
        };
        let restore = match checkpoint {
            None => Restore::Fresh,
            Some(id) => match self.load_restore(id, spec.language).await {
                Ok(restore) => restore,
                Err(message) => return (failed(message), None),
            },
        };
        let child = match self.sessions.child(spec.language, restore, spec.egress.is_some()).await {
            Ok(child) => child,
            Err(e) => {
                warn!(session = %task.id, error = %e, "could not open a session");
                return (failed(format!("could not open the session: {e}")), None);
            }
        };
        let (sender, tasks) = mpsc::unbounded_channel();
        let end = self.stopping.child_token();
        self.sessions.lock().insert(task.id.clone(), Held { tasks: sender, end: end.clone() });
        self.count_sessions();
        // Retried while Redis is away, not taken for a session that ended:
        // the session is waiting for this mark. (A retry after a mark whose
        // reply was lost reads "not waiting" and fails the start, as the
        // lost reply itself did.)
        let ready = || self.queue.session_ready(&task.id, &self.config.name, checkpoint.as_deref());
        if self.until_written("mark the session ready", ready).await != Some(true) {
            self.sessions.lock().remove(&task.id);
            self.count_sessions();
            return (failed("the session ended before it could start".into()), None);
        }
        info!(session = %task.id, restored_from = ?checkpoint, ms = started.elapsed().as_millis() as u64, "session opened");
        let outcome = Outcome {
            status: Status::Completed,
            exit_code: Some(0),
            stderr: String::new(),
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            step: Some(StepResult::Done),
            ..Outcome::internal_error("")
        };
        let opened = Opened {
            id: task.id.clone(),
            owner: owner.clone(),
            language: spec.language,
            egress: spec.egress.is_some(),
            child,
            idle_timeout: Duration::from_millis(*idle_timeout_ms),
            expires_at_ms: *expires_at_ms,
            tasks,
            end,
        };
        (outcome, Some(opened))
    }

    /// Serves session `opened` until it ends; the caller holds its place.
    pub(crate) async fn serve_session(&self, mut opened: Opened) {
        let span = info_span!("session", id = %opened.id, language = %opened.language);
        async {
            let ended = self.session_loop(&mut opened).await;
            opened.child.kill();
            self.sessions.lock().remove(&opened.id);
            self.count_sessions();
            info!(ended = ended, "session closed on this worker");
        }
        .instrument(span)
        .await;
    }

    /// Takes the session's tasks one at a time; returns why it ended.
    async fn session_loop(&self, s: &mut Opened) -> &'static str {
        let mut last_used = tokio::time::Instant::now();
        loop {
            let lifetime_left = Duration::from_millis(s.expires_at_ms.saturating_sub(now_unix_ms()));
            let idle_deadline = last_used + s.idle_timeout;
            let lifetime_deadline = tokio::time::Instant::now() + lifetime_left;
            let (claimed, spec) = tokio::select! {
                task = s.tasks.recv() => match task {
                    Some(task) => task,
                    None => return "channel closed",
                },
                () = tokio::time::sleep_until(idle_deadline) => {
                    self.end_session(s, SessionStatus::Expired, "idle").await;
                    return "idle timeout";
                }
                () = tokio::time::sleep_until(lifetime_deadline) => {
                    self.end_session(s, SessionStatus::Expired, "lifetime").await;
                    return "lifetime";
                }
                () = s.end.cancelled() => return if self.stopping.is_cancelled() { "shutdown" } else { "destroyed" },
            };
            let alive = match spec.session.as_ref().map(|t| &t.op) {
                Some(SessionOp::Exec) => self.session_exec(s, &claimed, &spec).await,
                Some(SessionOp::Checkpoint { checkpoint }) => {
                    self.session_checkpoint(s, &claimed, checkpoint).await;
                    true
                }
                Some(SessionOp::File { action }) => self.session_file(s, &claimed, action).await,
                _ => {
                    self.finish(&claimed, &Ran::without_child(Outcome::internal_error("not a session task"))).await;
                    true
                }
            };
            if !alive {
                return "lost";
            }
            last_used = tokio::time::Instant::now();
        }
    }

    /// Runs one exec; false when the session was lost.
    async fn session_exec(&self, s: &mut Opened, claimed: &Claimed, spec: &JobSpec) -> bool {
        let start = || async move { self.queue.start(claimed, &self.config.name, &now_rfc3339()).await };
        if !matches!(self.until_written("mark the exec running", start).await, Some(Some(_))) {
            // Cancelled before it began (or the worker is killed before
            // Redis took the mark): the session is untouched.
            self.mark_idle(s, 0, None).await;
            let cancelled = Outcome { status: Status::Cancelled, ..Outcome::internal_error("") };
            self.finish(claimed, &Ran::without_child(cancelled)).await;
            return true;
        }
        // Cancelling the exec interrupts it (see `SessionChild::exec`);
        // ending the session kills its process.
        let (cancel, interrupt) = (s.end.child_token(), CancellationToken::new());
        let job = RunningJob { entry: None, cancel: interrupt.clone() };
        self.running.lock().unwrap_or_else(|p| p.into_inner()).insert(claimed.id.clone(), job);
        self.metrics.busy_slots.inc();
        let timeout = self.runner.sandbox().limits.timeout_for(spec);
        let live = Forwarder::start(self.config.live_output, &self.queue, &claimed.id, claimed.deliveries, timeout);
        let slot = self.runner.hold_slot();
        let (mut outcome, alive) = s.child.exec(spec, self.runner.sandbox(), &cancel, &interrupt, live.live()).await;
        drop(slot);
        self.metrics.observe_usage(spec.language, crate::metrics::Lane::Session, &outcome);
        live.finish().await;
        self.metrics.busy_slots.dec();
        self.running.lock().unwrap_or_else(|p| p.into_inner()).remove(&claimed.id);
        let ended_ms = now_unix_ms();
        let mut kept = alive;
        let mut restored = None;
        if !alive && !s.end.is_cancelled() {
            match self.restore_in_place(s).await {
                Ok(checkpoint) => {
                    kept = true;
                    restored = Some(checkpoint.clone());
                    outcome.stderr.push_str(&format!(
                        "\nrunbox: the session's process ended ({}); the session was restored from checkpoint {checkpoint}; \
                         what ran after that checkpoint is gone\n",
                        outcome.status.as_str()
                    ));
                }
                Err(why) => {
                    outcome.stderr.push_str(&format!("\nrunbox: the session's process ended and it is lost: {why}\n"));
                    self.end_session(s, SessionStatus::Lost, &why).await;
                }
            }
        }
        if kept {
            self.mark_idle(s, 1, restored.as_deref()).await;
        }
        self.finish(claimed, &Ran { outcome, boot: Duration::ZERO, ended_ms }).await;
        kept
    }

    /// Takes a checkpoint and answers its job with what it came to: the
    /// checkpoint stored, or why not.
    async fn session_checkpoint(&self, s: &mut Opened, claimed: &Claimed, id: &str) {
        if let Err(e) = self.queue.start(claimed, &self.config.name, &now_rfc3339()).await {
            // Its answer is written below all the same; only `running` is not shown meanwhile.
            self.metrics.redis_errors.inc();
            warn!(error = %e, "could not mark the checkpoint running");
        }
        let started = Instant::now();
        let limits = self.config.checkpoints;
        let taken = match s.child.checkpoint().await {
            Ok(bytes) => {
                let compressed = tokio::task::spawn_blocking(move || lz4_flex::compress_prepend_size(&bytes)).await;
                compressed.map_err(|e| e.to_string())
            }
            Err(e) => Err(e.to_string()),
        };
        let stored = match taken {
            Ok(data) if data.len() as u64 > limits.max_bytes => Err(format!(
                "the checkpoint is {} bytes compressed, more than the {} allowed (RUNBOX_CHECKPOINT_MAX_MB)",
                data.len(),
                limits.max_bytes
            )),
            Ok(data) => {
                let ttl = limits.ttl;
                let info = CheckpointInfo {
                    id: id.to_owned(),
                    created_at: now_rfc3339(),
                    size_bytes: data.len() as u64,
                    took_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(0),
                    expires_at: rfc3339_at_unix_ms(now_unix_ms() + ttl.as_secs() * 1000),
                };
                match self.queue.store_checkpoint(&s.id, &info, &data, ttl).await {
                    Ok(true) => Ok(info),
                    Ok(false) => Err("the session is gone".to_owned()),
                    Err(e) => Err(format!("could not store the checkpoint: {e}")),
                }
            }
            Err(e) => Err(e),
        };
        self.mark_idle(s, 0, None).await;
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(0);
        let outcome = match stored {
            Ok(info) => {
                info!(checkpoint = %info.id, bytes = info.size_bytes, ms = info.took_ms, "checkpoint taken");
                Outcome {
                    status: Status::Completed,
                    exit_code: Some(0),
                    stderr: String::new(),
                    duration_ms,
                    step: Some(StepResult::Checkpointed { checkpoint: info }),
                    ..Outcome::internal_error("")
                }
            }
            Err(why) => Outcome { duration_ms, ..failed(why) },
        };
        self.finish(claimed, &Ran::without_child(outcome)).await;
    }

    /// Does one file operation and answers its job with what it came to;
    /// false when the session was lost (its process died meanwhile and
    /// there was no checkpoint to bring it back from).
    async fn session_file(&self, s: &mut Opened, claimed: &Claimed, action: &FileAction) -> bool {
        if let Err(e) = self.queue.start(claimed, &self.config.name, &now_rfc3339()).await {
            self.metrics.redis_errors.inc();
            warn!(error = %e, "could not mark the file operation running");
        }
        let started = Instant::now();
        let done = s.child.file(action).await;
        let mut kept = true;
        let mut restored = None;
        if !s.child.is_alive() && !s.end.is_cancelled() {
            match self.restore_in_place(s).await {
                Ok(checkpoint) => restored = Some(checkpoint),
                Err(why) => {
                    self.end_session(s, SessionStatus::Lost, &why).await;
                    kept = false;
                }
            }
        }
        if kept {
            self.mark_idle(s, 0, restored.as_deref()).await;
        }
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(0);
        let outcome = match done {
            Ok(file) => {
                info!(op = action.name(), ms = duration_ms, "file operation done");
                Outcome {
                    status: Status::Completed,
                    exit_code: Some(0),
                    stderr: String::new(),
                    duration_ms,
                    step: Some(StepResult::File { file }),
                    ..Outcome::internal_error("")
                }
            }
            Err(e) => Outcome { duration_ms, ..failed(e.to_string()) },
        };
        self.finish(claimed, &Ran::without_child(outcome)).await;
        kept
    }

    /// Opens a new child for `s` from its latest checkpoint; returns the
    /// checkpoint's id, or why it could not.
    async fn restore_in_place(&self, s: &mut Opened) -> Result<String, String> {
        let record = self.queue.get_session(&s.id).await.map_err(|e| e.to_string())?;
        let Some(checkpoint) = record.as_ref().and_then(|r| r.latest_checkpoint()).map(|c| c.id.clone()) else {
            return Err("it has no checkpoint".into());
        };
        let restore = self.load_restore(&checkpoint, s.language).await?;
        let child = self.sessions.child(s.language, restore, s.egress).await.map_err(|e| e.to_string())?;
        s.child = child;
        info!(%checkpoint, "session restored after its process ended");
        Ok(checkpoint)
    }

    /// Reads checkpoint `id` as what a child of `language` opens from.
    async fn load_restore(&self, id: &str, language: Language) -> Result<Restore, String> {
        let stored = self.queue.load_checkpoint(id).await.map_err(|e| e.to_string())?;
        let Some(stored) = stored else { return Err(format!("checkpoint {id} has expired")) };
        if stored.language != Some(language) {
            return Err(format!("checkpoint {id} is of another language"));
        }
        let bytes = tokio::task::spawn_blocking(move || lz4_flex::decompress_size_prepended(&stored.data))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("checkpoint {id} is damaged: {e}"))?;
        Ok(match language {
            Language::Python => Restore::Memory(bytes),
            _ => {
                let default_ms =
                    u64::try_from(self.runner.sandbox().limits.timeouts.default.as_millis()).unwrap_or(u64::MAX);
                let (log, files) =
                    Replayed::parse_log(&bytes, default_ms).map_err(|e| format!("checkpoint {id} is damaged: {e}"))?;
                Restore::Replay(log, files)
            }
        })
    }

    /// Marks session `s` idle again after an exec (`execs` 1) or a
    /// checkpoint or cancelled exec (0), retrying until Redis takes it: a
    /// session left busy would refuse every later exec with 409.
    async fn mark_idle(&self, s: &Opened, execs: u64, restored_from: Option<&str>) {
        let idle = || self.queue.session_idle(&s.id, &self.config.name, execs, restored_from);
        self.until_written("mark the session idle", idle).await;
    }

    /// Brings the `sessions` gauge up to date after a session came or went.
    fn count_sessions(&self) {
        self.metrics.sessions.set(i64::try_from(self.sessions.count()).unwrap_or(i64::MAX));
    }

    /// Records that session `s` ended here, retrying until Redis takes it:
    /// a session still recorded idle on this worker would send its next
    /// exec to a worker that no longer holds it. The write ends only a
    /// session not ended yet, so a retry is harmless.
    async fn end_session(&self, s: &Opened, status: SessionStatus, reason: &str) {
        let ttl = self.config.shared.result_ttl;
        let end = || self.queue.end_session(&s.id, &s.owner, status, reason, ttl, Some(&self.config.name));
        self.until_written("record the session's end", end).await;
    }

    /// Routes session task `id` from the inbox: a destroy ends its session
    /// here at once; anything else goes to its session's queue.
    async fn route_session_task(&self, id: &str) {
        let claimed = match self.queue.claim_session_task(id).await {
            Ok(Some(claimed)) => claimed,
            Ok(None) => return,
            Err(e) => {
                warn!(error = %e, %id, "could not read a session task");
                return;
            }
        };
        if !self.config.shared.signing_key.verify(&claimed.id, &claimed.payload, &claimed.signature) {
            self.metrics.rejected_signatures.inc();
            warn!(%id, "session task signature did not verify; it will not run");
            let rejected =
                Outcome { status: Status::Rejected, ..Outcome::internal_error("job signature did not verify") };
            self.finish(&claimed, &Ran::without_child(rejected)).await;
            return;
        }
        let Ok(spec) = serde_json::from_str::<JobSpec>(&claimed.payload) else {
            self.finish(&claimed, &Ran::without_child(Outcome::internal_error("unreadable session task"))).await;
            return;
        };
        let Some(task) = spec.session.clone() else { return };
        let routed = {
            let live = self.sessions.lock();
            match (live.get(&task.id), &task.op) {
                (Some(session), SessionOp::Destroy) => {
                    session.end.cancel();
                    Ok(true)
                }
                (Some(session), _) => Ok(session.tasks.send((claimed.clone(), spec)).is_ok()),
                (None, _) => Err(()),
            }
        };
        match routed {
            Ok(true) if matches!(task.op, SessionOp::Destroy) => {
                let done = Outcome {
                    status: Status::Completed,
                    exit_code: Some(0),
                    stderr: String::new(),
                    step: Some(StepResult::Done),
                    ..Outcome::internal_error("")
                };
                self.finish(&claimed, &Ran::without_child(done)).await;
            }
            Ok(true) => {}
            _ => {
                let lost = Outcome {
                    status: Status::WorkerLost,
                    ..Outcome::internal_error("the session's process is no longer on its worker")
                };
                self.finish(&claimed, &Ran::without_child(lost)).await;
            }
        }
    }
}

/// Reads this worker's inbox until `stop`, routing each task.
pub(crate) async fn inbox(worker: Arc<Worker>, blocking: Queue, stop: CancellationToken) {
    while !stop.is_cancelled() {
        let next = tokio::select! {
            next = blocking.next_session_task(&worker.config.name, INBOX_BLOCK) => next,
            () = stop.cancelled() => return,
        };
        match next {
            Ok(Some(id)) => worker.route_session_task(&id).await,
            Ok(None) => {}
            Err(e) => {
                worker.metrics.redis_errors.inc();
                warn!(error = %e, "could not read the session inbox");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// A session's start or checkpoint that could not be done, and why (on
/// stderr too, for a person reading the job).
fn failed(reason: String) -> Outcome {
    let step = Some(StepResult::Failed { reason: reason.clone() });
    Outcome { status: Status::Completed, exit_code: Some(1), step, ..Outcome::internal_error(reason) }
}
