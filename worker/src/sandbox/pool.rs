//! Warm children, booted before their job, and the runner that hands them out.
//!
//! A [`Runner`] keeps a few children per kind already booted and waiting,
//! so a job skips the boot:
//!
//! - single-use JS children (the JS harness loaded), for JavaScript and
//!   TypeScript jobs, each taken for one job and killed after it;
//! - shared-mode Python children, bound to no owner yet: the first Python
//!   job of an owner that has no warm child of its own ([`SharedLane`])
//!   takes one, and from then on it serves that owner alone;
//! - single-use Python children, for jobs that asked for a fresh child
//!   (`shared_runtime: false`), kept only while such jobs come.
//!
//! A waiting child has no permissions left (Python's boot-time read access
//! is revoked before READY), and an unbound one has run nothing, so taking
//! it is the same as booting one for the job.
//!
//! The pool refills in the background, one boot at a time and only while
//! a job slot is free, so warming never takes CPU from running jobs. Its
//! size follows demand: per kind, the most jobs that took (or waited for) a
//! child of that kind at once in the last minute, kept between the
//! configured minimum and maximum (the minimum does not apply to
//! single-use Python children, which only opted-out jobs use). A Python job
//! served by its owner's warm child takes nothing from here, so the pool
//! grows with new owners, not with every job.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use runbox_common::{JobSpec, Language, Outcome};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::command::ChildMode;
use super::shared::{self, SharedChild, WarmConfig};
use super::{BootedChild, Live, Sandbox, SharedLane};

/// How long a burst of demand keeps the pool large.
const DEMAND_WINDOW: Duration = Duration::from_secs(60);

/// Pool bounds, per kind of child, and what the owners' warm children may hold.
#[derive(Debug, Clone, Copy)]
pub struct PoolConfig {
    /// Warm children kept even when idle (JS; unbound Python).
    pub min: usize,
    /// Warm children at most; 0 turns the pool off (every fresh child boots cold).
    pub max: usize,
    /// Jobs that run at once; warming pauses while all are busy.
    pub concurrency: usize,
    /// Owners' idle children (see [`WarmConfig`]).
    pub warm: WarmConfig,
}

/// The kinds of pooled child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Single-use, for JavaScript and TypeScript.
    Js = 0,
    /// Single-use Python, for jobs that opted out of the shared runtime.
    Python = 1,
    /// A shared-mode Python child that has run nothing and has no owner yet.
    Shared = 2,
}

const KINDS: usize = 3;

impl Kind {
    const ALL: [Kind; KINDS] = [Kind::Shared, Kind::Js, Kind::Python];

    fn single(language: Language) -> Kind {
        match language {
            Language::Python => Kind::Python,
            Language::Javascript | Language::Typescript => Kind::Js,
        }
    }

    /// Whether the pool's minimum applies: to the kinds that jobs take by
    /// default, not to the opted-out's.
    fn kept_idle(self) -> bool {
        self != Kind::Python
    }
}

/// A child waiting in the pool.
enum Warm {
    Single(BootedChild),
    Shared(SharedChild),
}

impl Warm {
    fn is_alive(&mut self) -> bool {
        match self {
            Warm::Single(child) => child.is_alive(),
            Warm::Shared(child) => child.is_alive(),
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

/// Runs jobs: in their owner's warm children (the shared lane) when the
/// job's spec names an owner, else each in a fresh child; a fresh child
/// comes from the warm pool when it has one, and is booted otherwise.
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
    idle: [VecDeque<Warm>; KINDS],
    /// Children the refiller is booting right now.
    booting: [usize; KINDS],
    /// Jobs that took, or are waiting for, a child of each kind and are
    /// not done: the demand the pool's size follows.
    wanting: [usize; KINDS],
    /// Jobs running on this runner, in any lane: every one holds a slot,
    /// and warming pauses while they fill all of them.
    busy: usize,
    /// The most jobs of each kind that wanted a child at once lately, and when.
    peak: [(usize, Option<Instant>); KINDS],
}

impl Runner {
    /// A runner with no pool: every fresh child is booted for its job.
    pub fn cold(sandbox: Arc<Sandbox>) -> Runner {
        Runner::without_pool(sandbox, WarmConfig::default())
    }

    fn without_pool(sandbox: Arc<Sandbox>, warm: WarmConfig) -> Runner {
        Runner { shared: SharedLane::new(sandbox.clone(), warm), sandbox, pool: None }
    }

    /// A runner with a warm pool, refilled by a task on the current runtime.
    pub fn pooled(sandbox: Arc<Sandbox>, config: PoolConfig) -> Runner {
        if config.max == 0 {
            return Runner::without_pool(sandbox, config.warm);
        }
        let pool = Arc::new(Pool {
            sandbox: sandbox.clone(),
            config,
            state: Mutex::default(),
            changed: Arc::new(Notify::new()),
        });
        tokio::spawn(refill(Arc::downgrade(&pool)));
        Runner { shared: SharedLane::new(sandbox.clone(), config.warm), sandbox, pool: Some(pool) }
    }

    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    /// Runs `spec` and reports how it ended: in its owner's warm children
    /// if its spec names an owner and the lane takes it, else in a fresh
    /// child of its own.
    pub async fn run(&self, spec: &JobSpec, cancel: &CancellationToken) -> RunReport {
        self.run_live(spec, cancel, &Live::default()).await
    }

    /// [`Runner::run`], handing the output the job's caps keep to `live` as
    /// it is written.
    pub async fn run_live(&self, spec: &JobSpec, cancel: &CancellationToken, live: &Live) -> RunReport {
        // Held for the whole run, in every lane, so warming sees exactly
        // how many slots are taken.
        let _busy = self.pool.as_ref().map(|pool| pool.busy());
        match SharedLane::takes(spec) {
            Some(owner) => self.run_shared(owner, spec, cancel, live).await,
            None => self.run_single(spec, cancel, live).await,
        }
    }

    /// Runs `spec` in a warm child of `owner`, or else in a fresh shared
    /// child, which then stays warm for `owner` if it may.
    async fn run_shared(&self, owner: &str, spec: &JobSpec, cancel: &CancellationToken, live: &Live) -> RunReport {
        let kind = shared::Kind::of(spec.language);
        let waiting = Instant::now();
        if let Some(child) = self.shared.take(owner, kind).await {
            let outcome = self.shared.run(owner, child, spec, cancel, live).await;
            return RunReport { outcome, boot: Duration::ZERO };
        }
        // Only Python children are pooled: a JS child boots in tens of
        // milliseconds.
        let (warm, demand) = match (&self.pool, kind) {
            (Some(pool), shared::Kind::Python) => pool.take(Kind::Shared).await,
            _ => (None, None),
        };
        let (child, boot) = match warm {
            Some(Warm::Shared(child)) => (Ok(child), waited(waiting)),
            _ => (SharedChild::boot(&self.sandbox, kind, ChildMode::Shared).await, waiting.elapsed()),
        };
        let outcome = match child {
            Ok(child) => self.shared.run(owner, child, spec, cancel, live).await,
            Err(e) => {
                tracing::error!(error = %e, "sandbox failed to start a shared child");
                Outcome::internal_error("runbox could not start the sandbox for this job")
            }
        };
        // The demand counted by the take lasts until here.
        drop(demand);
        RunReport { outcome, boot }
    }

    /// Runs `spec` in a single-use child: a warm one if the pool has it.
    async fn run_single(&self, spec: &JobSpec, cancel: &CancellationToken, live: &Live) -> RunReport {
        let waiting = Instant::now();
        let (warm, demand) = match &self.pool {
            Some(pool) => pool.take(Kind::single(spec.language)).await,
            None => (None, None),
        };
        let (child, boot) = match warm {
            Some(Warm::Single(child)) => (Ok(child), waited(waiting)),
            _ => (BootedChild::boot(&self.sandbox, spec.language).await, waiting.elapsed()),
        };
        let outcome = match child {
            Ok(child) => child.run(spec, &self.sandbox, cancel, live).await,
            Err(e) => {
                tracing::error!(error = %e, language = %spec.language, "sandbox failed to start a child");
                Outcome::internal_error("runbox could not start the sandbox for this job")
            }
        };
        drop(demand);
        RunReport { outcome, boot }
    }

    /// Asks for a warm single-use child of `language`'s kind and waits
    /// until one is ready. For tests and benchmarks that must exercise the
    /// warm path.
    pub async fn wait_warm(&self, language: Language) {
        self.wait_for(Kind::single(language)).await;
    }

    /// Asks for an unbound shared Python child and waits until one is
    /// ready, so that a new owner's first Python job finds it.
    pub async fn wait_warm_shared(&self) {
        self.wait_for(Kind::Shared).await;
    }

    async fn wait_for(&self, kind: Kind) {
        let Some(pool) = &self.pool else { return };
        let k = kind as usize;
        {
            let mut state = pool.lock();
            state.peak[k] = (state.peak[k].0.max(1), Some(Instant::now()));
        }
        pool.changed.notify_waiters();
        loop {
            let notified = pool.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if !pool.lock().idle[k].is_empty() {
                return;
            }
            notified.await;
        }
    }
}

/// No wait at all for a child that was ready at once, else the time waited
/// for the one that was booting.
fn waited(since: Instant) -> Duration {
    let waited = since.elapsed();
    if waited < Duration::from_millis(1) { Duration::ZERO } else { waited }
}

/// Counts a job, of a kind or in all, for as long as it is held.
struct Counted {
    pool: Arc<Pool>,
    /// The kind whose demand it counts, or None for the busy count.
    kind: Option<Kind>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        let mut state = self.pool.lock();
        match self.kind {
            Some(kind) => state.wanting[kind as usize] = state.wanting[kind as usize].saturating_sub(1),
            None => state.busy = state.busy.saturating_sub(1),
        }
        drop(state);
        self.pool.changed.notify_waiters();
    }
}

impl Pool {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts a running job until the guard is dropped.
    fn busy(self: &Arc<Self>) -> Counted {
        self.lock().busy += 1;
        Counted { pool: self.clone(), kind: None }
    }

    /// Counts a job's demand for `kind` (until the guard is dropped) and
    /// takes a live warm child of that kind: one that is ready, or else one
    /// that is already booting (it is further along than a new boot would
    /// be). None when neither exists.
    async fn take(self: &Arc<Self>, kind: Kind) -> (Option<Warm>, Option<Counted>) {
        let k = kind as usize;
        {
            let mut state = self.lock();
            state.wanting[k] += 1;
            let now = Instant::now();
            let (peak, at) = state.peak[k];
            let stale = at.is_none_or(|at| now.duration_since(at) > DEMAND_WINDOW);
            if stale || state.wanting[k] >= peak {
                state.peak[k] = (state.wanting[k], Some(now));
            }
        }
        let counted = Some(Counted { pool: self.clone(), kind: Some(kind) });
        self.changed.notify_waiters();
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let mut state = self.lock();
                while let Some(mut candidate) = state.idle[k].pop_front() {
                    if candidate.is_alive() {
                        return (Some(candidate), counted);
                    }
                    // Its directory is removed off the async threads.
                    tokio::task::spawn_blocking(move || drop(candidate));
                }
                if state.booting[k] == 0 {
                    return (None, counted);
                }
            }
            changed.await;
        }
    }

    /// Picks the kind most short of its target and counts it as booting,
    /// if warming may run now.
    fn start_boot(&self) -> Option<Kind> {
        let mut state = self.lock();
        if state.busy >= self.config.concurrency {
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
                let min = if kind.kept_idle() { self.config.min } else { 0 };
                let target = demand.clamp(min, self.config.max.max(min));
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

    fn put(&self, kind: Kind, child: Warm) {
        let mut state = self.lock();
        state.idle[kind as usize].push_back(child);
        state.booting[kind as usize] = state.booting[kind as usize].saturating_sub(1);
        drop(state);
        self.changed.notify_waiters();
    }

    async fn boot(&self, kind: Kind) -> Result<Warm, super::SandboxError> {
        match kind {
            Kind::Js => BootedChild::boot(&self.sandbox, Language::Javascript).await.map(Warm::Single),
            Kind::Python => BootedChild::boot(&self.sandbox, Language::Python).await.map(Warm::Single),
            Kind::Shared => {
                SharedChild::boot(&self.sandbox, shared::Kind::Python, ChildMode::Shared).await.map(Warm::Shared)
            }
        }
    }
}

/// Keeps the pool at its target until the runner is dropped.
async fn refill(pool: Weak<Pool>) {
    loop {
        let Some(strong) = pool.upgrade() else { return };
        match strong.start_boot() {
            Some(kind) => match strong.boot(kind).await {
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
