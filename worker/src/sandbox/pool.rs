//! Warm, single-use runners.
//!
//! A [`Runner`] keeps a few children per runtime already booted (Pyodide
//! restored, the JS harness loaded) and waiting on stdin, so a job skips
//! the boot. A child still runs exactly one job: it is taken out of the pool
//! for the job and killed after it, just as in the cold path, and its
//! permissions are the same (Python's boot-time read access is revoked
//! before READY, so a waiting child already has none).
//!
//! The pool refills in the background, one boot at a time and only while
//! a job slot is free, so warming never takes CPU from running jobs. Its size
//! follows demand: per runtime, the most jobs that ran at once in the last
//! minute, kept between the configured minimum and maximum.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use runbox_common::{JobSpec, Language, Outcome};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{BootedChild, Sandbox, SharedLane};

/// How long a burst of demand keeps the pool large.
const DEMAND_WINDOW: Duration = Duration::from_secs(60);

/// Pool bounds, per runtime (JavaScript and TypeScript share one).
#[derive(Debug, Clone, Copy)]
pub struct PoolConfig {
    /// Warm children kept even when idle.
    pub min: usize,
    /// Warm children at most; 0 turns the pool off (every job boots cold).
    pub max: usize,
    /// Jobs that run at once; warming pauses while all are busy.
    pub concurrency: usize,
}

/// The two kinds of child: the JS harness serves JavaScript and TypeScript.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Js = 0,
    Python = 1,
}

impl Kind {
    const ALL: [Kind; 2] = [Kind::Python, Kind::Js];

    fn of(language: Language) -> Kind {
        match language {
            Language::Python => Kind::Python,
            Language::Javascript | Language::Typescript => Kind::Js,
        }
    }

    fn language(self) -> Language {
        match self {
            Kind::Python => Language::Python,
            Kind::Js => Language::Javascript,
        }
    }
}

/// What a run produced, and what it cost before the program started.
#[derive(Debug)]
pub struct RunReport {
    pub outcome: Outcome,
    /// Time spent getting a booted child for this job: zero when a warm one
    /// was ready, the rest of its boot when one was on its way, a whole boot
    /// otherwise.
    pub boot: Duration,
}

/// Runs jobs, from the warm pool when it has a child and cold otherwise,
/// or in the shared lane when the job's batch asked for it.
pub struct Runner {
    sandbox: Arc<Sandbox>,
    pool: Option<Arc<Pool>>,
    shared: Arc<SharedLane>,
}

struct Pool {
    sandbox: Arc<Sandbox>,
    config: PoolConfig,
    state: Mutex<State>,
    changed: Arc<Notify>,
}

#[derive(Default)]
struct State {
    idle: [VecDeque<BootedChild>; 2],
    /// Children the refiller is booting right now.
    booting: [usize; 2],
    running: [usize; 2],
    /// Jobs running in the shared lane, which need no warm child but do
    /// hold a slot.
    shared_running: usize,
    /// The most jobs of each kind that ran at once lately, and when.
    peak: [(usize, Option<Instant>); 2],
}

impl Runner {
    /// A runner with no pool: every job boots its own child.
    pub fn cold(sandbox: Arc<Sandbox>) -> Runner {
        Runner { shared: SharedLane::new(sandbox.clone(), 1), sandbox, pool: None }
    }

    /// A runner with a warm pool, refilled by a task on the current runtime.
    pub fn pooled(sandbox: Arc<Sandbox>, config: PoolConfig) -> Runner {
        if config.max == 0 {
            return Runner::cold(sandbox);
        }
        let pool = Arc::new(Pool {
            sandbox: sandbox.clone(),
            config,
            state: Mutex::default(),
            changed: Arc::new(Notify::new()),
        });
        tokio::spawn(refill(Arc::downgrade(&pool)));
        Runner { shared: SharedLane::new(sandbox.clone(), config.concurrency), sandbox, pool: Some(pool) }
    }

    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    /// Runs `spec` and reports how it ended: in a fresh child, or in the
    /// shared lane if its batch asked for that.
    pub async fn run(&self, spec: &JobSpec, cancel: &CancellationToken) -> RunReport {
        if let Some(lane) = SharedLane::takes(spec) {
            if let Some(pool) = &self.pool {
                pool.lock().shared_running += 1;
            }
            let report = self.shared.run(lane, spec, cancel).await;
            if let Some(pool) = &self.pool {
                pool.lock().shared_running -= 1;
                pool.changed.notify_waiters();
            }
            return report;
        }
        let kind = Kind::of(spec.language);
        let waiting = Instant::now();
        let warm = match &self.pool {
            Some(pool) => pool.take(kind).await,
            None => None,
        };
        let (child, boot) = match warm {
            // Ready at once counts as no boot at all.
            Some(child) if waiting.elapsed() < Duration::from_millis(1) => (Ok(child), Duration::ZERO),
            Some(child) => (Ok(child), waiting.elapsed()),
            None => {
                let child = BootedChild::boot(&self.sandbox, spec.language).await;
                (child, waiting.elapsed())
            }
        };
        let outcome = match child {
            Ok(child) => child.run(spec, &self.sandbox, cancel).await,
            Err(e) => {
                tracing::error!(error = %e, language = %spec.language, "sandbox failed to start a child");
                Outcome::internal_error("runbox could not start the sandbox for this job")
            }
        };
        if let Some(pool) = &self.pool {
            pool.finished(kind);
        }
        RunReport { outcome, boot }
    }

    /// Asks for a warm child of `language`'s kind and waits until one is
    /// ready. For tests and benchmarks that must exercise the warm path.
    pub async fn wait_warm(&self, language: Language) {
        let Some(pool) = &self.pool else { return };
        {
            let mut state = pool.lock();
            let k = Kind::of(language) as usize;
            state.peak[k] = (state.peak[k].0.max(1), Some(Instant::now()));
        }
        pool.changed.notify_waiters();
        loop {
            let notified = pool.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if !pool.lock().idle[Kind::of(language) as usize].is_empty() {
                return;
            }
            notified.await;
        }
    }
}

impl Pool {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts the job and takes a live warm child for `kind`: one that is
    /// ready, or else one that is already booting (it is further along than
    /// a new boot would be). None when neither exists.
    async fn take(&self, kind: Kind) -> Option<BootedChild> {
        let k = kind as usize;
        {
            let mut state = self.lock();
            state.running[k] += 1;
            let now = Instant::now();
            let (peak, at) = state.peak[k];
            let stale = at.is_none_or(|at| now.duration_since(at) > DEMAND_WINDOW);
            if stale || state.running[k] >= peak {
                state.peak[k] = (state.running[k], Some(now));
            }
        }
        self.changed.notify_waiters();
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let mut state = self.lock();
                while let Some(mut candidate) = state.idle[k].pop_front() {
                    if candidate.is_alive() {
                        return Some(candidate);
                    }
                }
                if state.booting[k] == 0 {
                    return None;
                }
            }
            changed.await;
        }
    }

    fn finished(&self, kind: Kind) {
        let mut state = self.lock();
        state.running[kind as usize] = state.running[kind as usize].saturating_sub(1);
        drop(state);
        self.changed.notify_waiters();
    }

    /// Picks the kind most short of its target and counts it as booting,
    /// if warming may run now.
    fn start_boot(&self) -> Option<Kind> {
        let mut state = self.lock();
        if state.running.iter().sum::<usize>() + state.shared_running >= self.config.concurrency {
            return None;
        }
        let now = Instant::now();
        let next = Kind::ALL
            .into_iter()
            .map(|kind| {
                let k = kind as usize;
                let (peak, at) = state.peak[k];
                let recent = at.is_some_and(|at| now.duration_since(at) <= DEMAND_WINDOW);
                let demand = if recent { peak } else { 0 };
                let target = demand.clamp(self.config.min, self.config.max.max(self.config.min));
                (kind, target.saturating_sub(state.idle[k].len() + state.booting[k]))
            })
            .filter(|(_, short)| *short > 0)
            .max_by_key(|(_, short)| *short)
            .map(|(kind, _)| kind);
        if let Some(kind) = next {
            state.booting[kind as usize] += 1;
        }
        next
    }

    fn put(&self, kind: Kind, child: BootedChild) {
        let mut state = self.lock();
        state.idle[kind as usize].push_back(child);
        state.booting[kind as usize] = state.booting[kind as usize].saturating_sub(1);
        drop(state);
        self.changed.notify_waiters();
    }
}

/// Keeps the pool at its target until the runner is dropped.
async fn refill(pool: Weak<Pool>) {
    loop {
        let Some(strong) = pool.upgrade() else { return };
        match strong.start_boot() {
            Some(kind) => match BootedChild::boot(&strong.sandbox, kind.language()).await {
                Ok(child) => strong.put(kind, child),
                Err(e) => {
                    strong.lock().booting[kind as usize] -= 1;
                    strong.changed.notify_waiters();
                    tracing::warn!(error = %e, "could not warm a child; retrying in 1 s");
                    drop(strong);
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            },
            None => {
                // Wait for a job to start or end; the timeout bounds a
                // notification missed between the check and here.
                let changed = strong.changed.clone();
                drop(strong);
                let _ = tokio::time::timeout(Duration::from_millis(250), changed.notified()).await;
            }
        }
    }
}
