//! The queue worker: claims jobs from Redis, runs each in the sandbox, and
//! writes the result back.
//!
//! One intake loop owns the job slots. It asks Redis only for as many
//! entries as it has free slots (`COUNT = free`), so it never holds a job it
//! cannot start, and now and then it takes over entries a dead worker left
//! pending. Each job then runs on its own task. A second intake loop, the
//! same code, owns the session places (`RUNBOX_WORKER_SESSIONS`): it claims
//! sessions' start jobs from a stream of their own, and each session keeps
//! its place for its life, so sessions never take a job slot and jobs never
//! wait behind sessions. Beside the loops run a heartbeat (what this worker
//! is, for `/v1/runtimes`) and a listener for cancel requests.
//!
//! Redis being away never ends the worker: every call that fails is logged
//! and retried with backoff, and a result that cannot be written is retried
//! until it can, or left pending for another worker.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use runbox_common::{Claimed, JobSpec, Outcome, Queue, QueueError, Status, WorkerInfo, keys, now_rfc3339, now_unix_ms};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, info, info_span, warn};

use crate::backoff::Backoff;
use crate::config::WorkerConfig;
use crate::held_sessions::Sessions;
use crate::live::Forwarder;
use crate::metrics::Metrics;
use crate::sandbox::{Runner, Sandbox};
use crate::sessions::{self, Opened};
use crate::worker::{Ran, RunningJob, Worker};

/// How long one claim blocks in Redis; also the longest SIGTERM waits for it.
const CLAIM_BLOCK: Duration = Duration::from_secs(1);
/// How often the intake loop looks for entries left by dead workers.
const RECLAIM_EVERY: Duration = Duration::from_secs(2);
/// A call to Redis slower than this (beyond a claim's own block) spans an
/// outage in which heartbeats may have gone unanswered.
const OUTAGE: Duration = HEARTBEAT_EVERY;
/// How often a worker says it is alive and keeps its entries claimed (an
/// entry idle for `RUNBOX_RECLAIM_IDLE_MS` belongs to a dead worker): the
/// contract's one interval, from which every liveness threshold follows.
pub use runbox_common::HEARTBEAT_EVERY;

/// Runs the worker until `shutdown` resolves, then drains: no new claims,
/// running jobs get `shutdown_grace` to finish, and what is still running
/// then is killed and left pending for another worker.
pub async fn run(
    config: WorkerConfig,
    sandbox: Sandbox,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), QueueError> {
    let queue = Queue::connect(&config.shared.redis, &config.shared.queue)?;
    queue.check_server().await?;
    let claims = Queue::connect_blocking(&config.shared.redis, &config.shared.queue, CLAIM_BLOCK)?;
    // Connects lazily: a worker without session places never opens it.
    let session_claims = Queue::connect_blocking(&config.shared.redis, &config.shared.queue, CLAIM_BLOCK)?;
    let inbox = Queue::connect_blocking(&config.shared.redis, &config.shared.queue, sessions::INBOX_BLOCK)?;
    let sessions = Sessions::new(sandbox.clone(), config.pool.max > 0);
    let runner = Runner::pooled(Arc::new(sandbox), config.pool);
    // `stop` ends intake and sessions at shutdown; `done` ends the heartbeat
    // and the cancel listener once running jobs are drained, so a DELETE
    // during the grace period still kills its job.
    let stop = CancellationToken::new();
    let worker = Arc::new(Worker {
        config,
        runner,
        queue,
        metrics,
        running: Arc::default(),
        sessions,
        stopping: stop.clone(),
        kill: CancellationToken::new(),
    });
    let done = CancellationToken::new();
    let tasks = TaskTracker::new();
    let background = TaskTracker::new();
    let (first_heartbeat, sent) = tokio::sync::oneshot::channel();
    background.spawn(heartbeat(worker.clone(), done.clone(), first_heartbeat));
    background.spawn(listen_for_cancels(worker.clone(), done.clone()));
    background.spawn(sessions::inbox(worker.clone(), inbox, stop.clone()));
    // Announced once /v1/runtimes can list it (or Redis said no).
    let _ = sent.await;

    info!(
        worker = %worker.config.name,
        concurrency = worker.config.concurrency,
        sessions = worker.config.sessions,
        "worker started"
    );
    let jobs = intake(worker.clone(), Lane::Jobs, claims, stop.clone(), tasks.clone());
    let sessions = intake(worker.clone(), Lane::Sessions, session_claims, stop.clone(), tasks.clone());
    let intake = async { tokio::join!(jobs, sessions) };
    tokio::pin!(intake);
    tokio::select! {
        _ = &mut intake => {}
        () = shutdown => {
            info!("shutting down: no new jobs; waiting for running ones");
            stop.cancel();
            intake.await;
        }
    }

    tasks.close();
    if tokio::time::timeout(worker.config.shutdown_grace, tasks.wait()).await.is_err() {
        warn!(grace = ?worker.config.shutdown_grace, "grace period over: killing running jobs, leaving them for other workers");
        worker.kill.cancel();
        tasks.wait().await;
    }
    done.cancel();
    background.close();
    background.wait().await;
    let _ = worker.queue.forget_worker(&worker.config.name).await;
    info!("worker stopped");
    Ok(())
}

/// What an intake loop claims, and into what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lane {
    /// Jobs, from the owners' streams in turn, into job slots.
    Jobs,
    /// Sessions' start jobs, from the session-starts stream, into session
    /// places, each held for its session's life.
    Sessions,
}

impl Lane {
    /// How many of this lane's entries the worker holds at once.
    fn places(self, worker: &Worker) -> usize {
        match self {
            Lane::Jobs => worker.config.concurrency,
            Lane::Sessions => worker.config.sessions,
        }
    }

    async fn claim(self, worker: &Worker, claims: &Queue, count: usize) -> Result<Vec<Claimed>, QueueError> {
        match self {
            Lane::Jobs => claims.claim(&worker.config.name, count, CLAIM_BLOCK).await,
            Lane::Sessions => claims.claim_session_starts(&worker.config.name, count, CLAIM_BLOCK).await,
        }
    }

    async fn reclaim(self, worker: &Worker, count: usize) -> Result<Vec<Claimed>, QueueError> {
        let (name, idle) = (&worker.config.name, worker.config.reclaim_idle);
        match self {
            Lane::Jobs => worker.queue.reclaim(name, idle, count).await,
            Lane::Sessions => worker.queue.reclaim_session_starts(name, idle, count).await,
        }
    }
}

/// Claims `lane`'s entries while it has places free, and runs each on a
/// task of `tasks`, until `stop`.
async fn intake(worker: Arc<Worker>, lane: Lane, claims: Queue, stop: CancellationToken, tasks: TaskTracker) {
    if lane.places(&worker) == 0 {
        return;
    }
    let slots = Arc::new(Semaphore::new(lane.places(&worker)));
    let mut backoff = Backoff::new();
    let mut last_reclaim = Instant::now();
    // An entry idle past `reclaim_idle` belongs to a worker that stopped
    // answering, unless Redis itself stopped answering: then every worker's
    // entries went idle, and a live one needs a heartbeat to keep them. So
    // after a call that failed or took an outage's time, nothing is taken
    // over until a whole idle period has passed.
    let mut reclaim_from = Instant::now();
    while !stop.is_cancelled() {
        // Wait for a free slot; then ask for as many entries as are free.
        let first = tokio::select! {
            permit = slots.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
            () = stop.cancelled() => return,
        };
        let mut permits = vec![first];
        while let Ok(permit) = slots.clone().try_acquire_owned() {
            permits.push(permit);
        }

        let reclaiming = last_reclaim.elapsed() >= RECLAIM_EVERY && Instant::now() >= reclaim_from;
        let asked = Instant::now();
        let claimed = if reclaiming {
            last_reclaim = Instant::now();
            lane.reclaim(&worker, permits.len()).await
        } else {
            lane.claim(&worker, &claims, permits.len()).await
        };
        let outage = asked.elapsed() > if reclaiming { OUTAGE } else { CLAIM_BLOCK + OUTAGE };
        if outage || claimed.is_err() {
            reclaim_from = Instant::now() + worker.config.reclaim_idle;
        }
        let claimed = match claimed {
            // Taken over while Redis was not answering: their workers may be
            // alive. They stay pending here, where nothing keeps them, so a
            // later reclaim takes them if their worker really is gone.
            Ok(entries) if reclaiming && outage => {
                if !entries.is_empty() {
                    warn!(count = entries.len(), "entries taken over across a Redis outage wait for a later reclaim");
                }
                Ok(Vec::new())
            }
            Ok(entries) if reclaiming => {
                if !entries.is_empty() {
                    worker.metrics.reclaimed.inc_by(entries.len() as u64);
                    info!(count = entries.len(), ?lane, "took over jobs from a worker that stopped answering");
                }
                Ok(entries)
            }
            other => other,
        };
        match claimed {
            Ok(entries) => {
                if backoff.failed() {
                    info!("redis reachable again");
                }
                backoff.reset();
                for entry in entries {
                    let Some(permit) = permits.pop() else { break };
                    let worker = worker.clone();
                    tasks.spawn(async move { worker.handle(entry, permit).await });
                }
            }
            Err(e) => {
                worker.metrics.redis_errors.inc();
                let delay = backoff.next();
                warn!(error = %e, retry_in = ?delay, ?lane, "could not claim jobs");
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = stop.cancelled() => return,
                }
            }
        }
    }
}

impl Worker {
    /// Kills the child of job `id`, if it runs here.
    fn cancel_running(&self, id: &str) {
        if let Some(job) = self.running.lock().unwrap_or_else(|p| p.into_inner()).get(id) {
            info!(%id, "cancel requested: killing the job");
            job.cancel.cancel();
        }
    }

    /// Reads the cancel flag of every job running here and kills the flagged.
    async fn recheck_cancels(&self) {
        let ids: Vec<String> = self.running.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect();
        if ids.is_empty() {
            return;
        }
        match self.queue.cancel_requested(&ids).await {
            Ok(flags) => ids.iter().zip(flags).filter(|(_, flag)| *flag).for_each(|(id, _)| self.cancel_running(id)),
            Err(e) => {
                self.metrics.redis_errors.inc();
                warn!(error = %e, "could not read cancel flags");
            }
        }
    }

    async fn handle(self: Arc<Self>, entry: Claimed, permit: OwnedSemaphorePermit) {
        let span = info_span!("job", id = %entry.id, language = tracing::field::Empty, status = tracing::field::Empty, duration_ms = tracing::field::Empty);
        async move {
            let _permit = permit;
            if let Some((ran, session)) = self.run_entry(&entry).await {
                tracing::Span::current().record("status", ran.outcome.status.as_str());
                tracing::Span::current().record("duration_ms", ran.outcome.duration_ms);
                self.finish(&entry, &ran).await;
                info!("job finished");
                // A session's start job keeps its place (a session place,
                // as it came from the session-starts stream) for the
                // session's life.
                if let Some(session) = session {
                    self.serve_session(session).await;
                }
            }
        }
        .instrument(span)
        .await;
    }

    /// Runs one claimed entry; with the session a start job opened, to
    /// serve once the job is answered. None means it must be left pending:
    /// the worker is shutting down and the job was killed half-way.
    async fn run_entry(&self, entry: &Claimed) -> Option<(Ran, Option<Opened>)> {
        // A job that never reached a child still counts among the finished:
        // its language is not known (its spec was not read), so it is "unknown".
        let unrun = |outcome: Outcome| {
            self.metrics.jobs_finished.with_label_values(&["unknown", outcome.status.as_str()]).inc();
            Some((Ran::without_child(outcome), None))
        };
        if entry.deliveries > self.config.max_deliveries {
            warn!(deliveries = entry.deliveries, "job was delivered too often; its workers keep dying");
            return unrun(Outcome {
                status: Status::WorkerLost,
                ..Outcome::internal_error("the job's worker stopped answering too many times")
            });
        }
        if !self.config.shared.signing_key.verify(&entry.id, &entry.payload, &entry.signature) {
            self.metrics.rejected_signatures.inc();
            warn!(id = %entry.id, "signature did not verify; the job will not run");
            return unrun(Outcome {
                status: Status::Rejected,
                ..Outcome::internal_error("job signature did not verify")
            });
        }
        let spec: JobSpec = match serde_json::from_str(&entry.payload) {
            Ok(spec) => spec,
            Err(e) => return unrun(Outcome::internal_error(format!("unreadable job spec: {e}"))),
        };
        tracing::Span::current().record("language", spec.language.as_str());

        // Registered before the job is marked running, so a cancel that
        // arrives the moment it is running finds it.
        let cancel = self.kill.child_token();
        let stream_entry = entry.stream_entry().map(|(stream, id)| (stream.to_owned(), id.to_owned()));
        let job = RunningJob { entry: stream_entry, cancel: cancel.clone() };
        self.running.lock().unwrap_or_else(|p| p.into_inner()).insert(entry.id.clone(), job);
        let ran = self.start_and_run(entry, &spec, &cancel).await;
        self.running.lock().unwrap_or_else(|p| p.into_inner()).remove(&entry.id);
        if self.kill.is_cancelled() {
            return None;
        }
        if let Some((ran, _)) = &ran {
            let language = [spec.language.as_str()];
            self.metrics.jobs_finished.with_label_values(&[language[0], ran.outcome.status.as_str()]).inc();
            if let Some(verdict) = ran.outcome.verdict {
                self.metrics.verdicts.with_label_values(&[language[0], verdict.as_str()]).inc();
            }
            self.metrics.run_duration.with_label_values(&language).observe(ran.outcome.duration_ms as f64 / 1000.0);
            self.metrics.boot_duration.with_label_values(&language).observe(ran.boot.as_secs_f64());
            if ran.outcome.warm {
                self.metrics.warm_jobs.with_label_values(&language).inc();
            }
            let lane = match crate::sandbox::SharedLane::takes(&spec) {
                Some(_) => crate::metrics::Lane::Shared,
                None => crate::metrics::Lane::SingleUse,
            };
            self.metrics.observe_usage(spec.language, lane, &ran.outcome);
        }
        ran
    }

    async fn start_and_run(
        &self,
        entry: &Claimed,
        spec: &JobSpec,
        cancel: &CancellationToken,
    ) -> Option<(Ran, Option<Opened>)> {
        let start = || async move { self.queue.start(entry, &self.config.name, &now_rfc3339()).await };
        match self.until_written("mark the job running", start).await? {
            Some(waited) => self.metrics.queue_wait.observe(waited.as_secs_f64()),
            // Cancelled or finished meanwhile: the result write below is
            // a no-op for a finished job and records a pending cancel.
            None => {
                let cancelled = Outcome { status: Status::Cancelled, ..Outcome::internal_error("") };
                return Some((Ran::without_child(cancelled), None));
            }
        }
        if let Some(task) = &spec.session {
            let (outcome, session) = self.open_session(spec, task).await;
            return Some((Ran::without_child(outcome), session));
        }
        self.metrics.busy_slots.inc();
        let timeout = self.runner.sandbox().limits.timeout_for(spec);
        let live = Forwarder::start(self.config.live_output, &self.queue, &entry.id, entry.deliveries, timeout);
        let report = self.runner.run_live(spec, cancel, live.live()).await;
        live.finish().await;
        self.metrics.busy_slots.dec();
        Some((Ran { outcome: report.outcome, boot: report.boot, ended_ms: now_unix_ms() }, None))
    }
}

/// Publishes what this worker is every few seconds; `first` fires after
/// the first attempt.
async fn heartbeat(worker: Arc<Worker>, stop: CancellationToken, first: tokio::sync::oneshot::Sender<()>) {
    let mut first = Some(first);
    let sandbox = worker.runner.sandbox();
    let runtime = &sandbox.runtime;
    // `deno --version` is a subprocess: not on the async threads.
    let versions = {
        let runtime = runtime.clone();
        tokio::task::spawn_blocking(move || {
            (runtime.deno_version(), runtime.pyodide_version(), runtime.python_packages())
        })
    };
    let (deno, pyodide, python_packages) = versions.await.unwrap_or_default();
    loop {
        let info = WorkerInfo {
            name: worker.config.name.clone(),
            deno: deno.clone(),
            pyodide: pyodide.clone(),
            python_packages: python_packages.clone(),
            isolation: sandbox.isolation.layers().into_iter().map(str::to_owned).collect(),
            concurrency: worker.config.concurrency,
            session_capacity: worker.config.sessions,
            pool_max: worker.config.pool.max,
            memory_mb: sandbox.limits.memory_mb,
            max_output_bytes: sandbox.limits.max_output_bytes,
            sessions: worker.sessions.count(),
            seen_at_ms: now_unix_ms(),
        };
        if let Err(e) = worker.queue.heartbeat(&info).await {
            worker.metrics.redis_errors.inc();
            warn!(error = %e, "could not send heartbeat");
        }
        // Workers silent for as long as the api takes them for gone, and
        // holding no entry, leave the registry.
        let dead_before = now_unix_ms().saturating_sub(millis(runbox_common::WORKER_SILENT_AFTER));
        match worker.queue.forget_dead_workers(dead_before).await {
            Ok(forgotten) if !forgotten.is_empty() => info!(?forgotten, "forgot workers that stopped answering"),
            Ok(_) => {}
            Err(e) => {
                worker.metrics.redis_errors.inc();
                warn!(error = %e, "could not clean up dead workers");
            }
        }
        // Resets the idle time of every entry held here, so no live worker's
        // job is ever taken over, however long it runs.
        let entries: Vec<(String, String)> = worker
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter_map(|job| job.entry.clone())
            .collect();
        if let Err(e) = worker.queue.keep_claimed(&worker.config.name, &entries).await {
            worker.metrics.redis_errors.inc();
            warn!(error = %e, "could not keep running jobs claimed");
        }
        if let Some(first) = first.take() {
            let _ = first.send(());
        }
        tokio::select! {
            () = tokio::time::sleep(HEARTBEAT_EVERY) => {}
            () = stop.cancelled() => return,
        }
    }
}

/// How often running jobs' cancel flags are read, in case a message on the
/// cancel channel was missed (published while the subscription was down).
const CANCEL_RECHECK: Duration = Duration::from_secs(2);

/// Kills the child of each job named on the cancel channel, if it runs here.
/// After every (re)subscription, and every [`CANCEL_RECHECK`], it also reads
/// the cancel flags of the jobs running here, so no cancel is lost.
async fn listen_for_cancels(worker: Arc<Worker>, stop: CancellationToken) {
    let mut backoff = Backoff::new();
    while !stop.is_cancelled() {
        let mut pubsub = match worker.queue.subscribe(&[keys::CANCEL_CHANNEL]).await {
            Ok(pubsub) => {
                backoff.reset();
                pubsub
            }
            Err(e) => {
                let delay = backoff.next();
                warn!(error = %e, retry_in = ?delay, "could not subscribe to cancel requests");
                tokio::select! {
                    () = tokio::time::sleep(delay) => continue,
                    () = stop.cancelled() => return,
                }
            }
        };
        let mut messages = pubsub.on_message();
        let mut recheck = tokio::time::interval(CANCEL_RECHECK);
        loop {
            let message = tokio::select! {
                message = messages.next() => message,
                _ = recheck.tick() => {
                    worker.recheck_cancels().await;
                    continue;
                }
                () = stop.cancelled() => return,
            };
            let Some(message) = message else { break };
            let Ok(id) = message.get_payload::<String>() else { continue };
            worker.cancel_running(&id);
        }
        warn!("cancel subscription lost; reconnecting");
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
