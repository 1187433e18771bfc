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
//! is revoked before READY), and an unbound one has run no job, so taking
//! it is the same as booting one for the job. It may have run the warm-up
//! program, runbox's own, each run in a realm of its own as a job's is.
//!
//! The pool refills in the background, one boot at a time, each started
//! only while a job slot is free, so warming takes little CPU from running
//! jobs. With nothing to boot, and once the runner has run no job (nor
//! session step) for [`WARM_UP_AFTER_IDLE`], it has its unbound shared
//! children run the warm-up program, one run at a time, the warmest child
//! first ([`SharedChild::warm_up`]): a new child's first jobs cost two to
//! three times a warm one's while V8 compiles CPython's hot functions, and
//! the runs pay that before a token's first job comes. A child out for a
//! run is not waited for: a job that finds no other boots its own, as it
//! would with no pool, since the run's compiles may take longer than a
//! boot.
//!
//! The pool's size follows demand: per kind, the most jobs that took (or
//! waited for) a child of that kind at once in the last minute, kept
//! between the configured minimum and maximum (the minimum does not apply to
//! single-use Python children, which only opted-out jobs use). A Python job
//! served by its owner's warm child takes nothing from here, so the pool
//! grows with new owners, not with every job.

use std::cmp::Reverse;
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

/// How long the runner must have run no job before the pool warms a child
/// (a run takes about a tenth of a second of one core). A boot is light
/// and may go on beside jobs; a warm-up run would take a core from a busy
/// lane's next jobs, between which the runner is idle for a moment.
const WARM_UP_AFTER_IDLE: Duration = Duration::from_millis(100);

/// Warm-up runs that failed in a row before the pool stops warming: a
/// program or child that fails every time would otherwise cost a boot and
/// a run each second for as long as the worker is idle.
const WARM_UP_FAILURES: u32 = 3;

/// Pool bounds, per kind of child, and what the owners' warm children may hold.
#[derive(Debug, Clone, Copy)]
pub struct PoolConfig {
    /// Warm children kept even when idle (JS; unbound Python).
    pub min: usize,
    /// Warm children at most; 0 turns the pool off (every fresh child boots cold).
    pub max: usize,
    /// Jobs that run at once; warming pauses while all are busy.
    pub concurrency: usize,
    /// Times an unbound shared Python child runs the warm-up program
    /// before a job takes it, while the runner is idle; 0 runs none, and
    /// at most [`PoolConfig::MAX_WARM_UP_RUNS`].
    pub warm_up_runs: u32,
    /// Owners' idle children (see [`WarmConfig`]).
    pub warm: WarmConfig,
}

impl PoolConfig {
    /// A new child's first jobs cost two to three times a warm one's while
    /// V8 compiles CPython's hot functions with TurboFan on its helper
    /// threads; after this many warm-up runs, and the compiles they start,
    /// its next jobs cost what a warm child's do (docs/performance.md).
    pub const WARM_UP_RUNS: u32 = 10;
    /// A child's warm-up runs count among the jobs it may run.
    pub const MAX_WARM_UP_RUNS: u32 = 100;
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

    /// Warm-up runs done: the pool hands out the warmest child first.
    fn warm_ups(&self) -> u32 {
        match self {
            Warm::Single(_) => 0,
            Warm::Shared(child) => child.warm_ups(),
        }
    }
}

/// Where in `idle` the warmest child that passes `eligible` waits, the
/// one that waited longest among equals.
fn warmest(idle: &VecDeque<Warm>, eligible: impl Fn(&Warm) -> bool) -> Option<usize> {
    (0..idle.len()).filter(|&at| eligible(&idle[at])).max_by_key(|&at| (idle[at].warm_ups(), Reverse(at)))
}

/// What a run produced, and what it cost before the program started.
#[derive(Debug)]
pub struct RunReport {
    pub outcome: Outcome,
    /// Time spent getting a booted child for this job: zero when a warm one
    /// was ready, the rest of its boot when one was on its way, a whole boot
    /// otherwise.
    pub boot: Duration,
    /// The child was booted for no job in particular: an owner's warm
    /// child, or the warm pool's (which may still have been booting).
    pub prebooted: bool,
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
    /// Unbound shared children out for a warm-up run.
    warming: usize,
    /// Warm-up runs that failed since the last that did not.
    warm_up_failures: u32,
    /// Jobs that took, or are waiting for, a child of each kind and are
    /// not done: the demand the pool's size follows.
    wanting: [usize; KINDS],
    /// Jobs running on this runner, in any lane: every one holds a slot,
    /// and warming pauses while they fill all of them.
    busy: usize,
    /// When the last job ended, if none has started since: warm-up runs
    /// wait for [`WARM_UP_AFTER_IDLE`] of it.
    idle_since: Option<Instant>,
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
            return RunReport { outcome, boot: Duration::ZERO, prebooted: true };
        }
        // Only Python children are pooled: a JS child boots in tens of
        // milliseconds.
        let (warm, demand) = match (&self.pool, kind) {
            (Some(pool), shared::Kind::Python) => pool.take(Kind::Shared).await,
            _ => (None, None),
        };
        let (child, boot, prebooted) = match warm {
            Some(Warm::Shared(child)) => (Ok(child), waited(waiting), true),
            _ => (SharedChild::boot(&self.sandbox, kind, ChildMode::Shared).await, waiting.elapsed(), false),
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
        RunReport { outcome, boot, prebooted }
    }

    /// Runs `spec` in a single-use child: a warm one if the pool has it.
    async fn run_single(&self, spec: &JobSpec, cancel: &CancellationToken, live: &Live) -> RunReport {
        let waiting = Instant::now();
        let (warm, demand) = match &self.pool {
            Some(pool) => pool.take(Kind::single(spec.language)).await,
            None => (None, None),
        };
        let (child, boot, prebooted) = match warm {
            Some(Warm::Single(child)) => (Ok(child), waited(waiting), true),
            _ => (BootedChild::boot(&self.sandbox, spec.language).await, waiting.elapsed(), false),
        };
        let outcome = match child {
            Ok(child) => child.run(spec, &self.sandbox, cancel, live).await,
            Err(e) => {
                tracing::error!(error = %e, language = %spec.language, "sandbox failed to start a child");
                Outcome::internal_error("runbox could not start the sandbox for this job")
            }
        };
        drop(demand);
        RunReport { outcome, boot, prebooted }
    }

    /// Counts work that holds a job slot outside [`Runner::run`] (a
    /// session's opening or step) until the guard is dropped, so that
    /// warming sees it as it sees a job.
    pub fn hold_slot(&self) -> HeldSlot {
        HeldSlot(self.pool.as_ref().map(|pool| pool.busy()))
    }

    /// Asks for a warm single-use child of `language`'s kind and waits
    /// until one is ready. For tests and benchmarks that must exercise the
    /// warm path.
    pub async fn wait_warm(&self, language: Language) {
        self.wait_for(Kind::single(language), |_| true).await;
    }

    /// Asks for an unbound shared Python child and waits until one is
    /// ready and has run its warm-up, so that a new owner's first Python
    /// job finds it warm. For tests and benchmarks.
    pub async fn wait_warm_shared(&self) {
        let runs = self.pool.as_ref().map_or(0, |pool| pool.config.warm_up_runs);
        self.wait_for(Kind::Shared, |warm| warm.warm_ups() >= runs).await;
    }

    async fn wait_for(&self, kind: Kind, ready: impl Fn(&Warm) -> bool) {
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
            if pool.lock().idle[k].iter().any(&ready) {
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

/// A job slot held outside [`Runner::run`] ([`Runner::hold_slot`]).
pub struct HeldSlot(#[allow(dead_code, reason = "held for its drop")] Option<Counted>);

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
            None => {
                state.busy = state.busy.saturating_sub(1);
                if state.busy == 0 {
                    state.idle_since = Some(Instant::now());
                }
            }
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
        let mut state = self.lock();
        state.busy += 1;
        state.idle_since = None;
        drop(state);
        Counted { pool: self.clone(), kind: None }
    }

    /// Counts a job's demand for `kind` (until the guard is dropped) and
    /// takes a live warm child of that kind: the warmest that is ready, or
    /// else one that is already booting (it is further along than a new
    /// boot would be). None when neither exists.
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
                while let Some(mut candidate) =
                    warmest(&state.idle[k], |_| true).and_then(|at| state.idle[k].remove(at))
                {
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
                let warming = if kind == Kind::Shared { state.warming } else { 0 };
                (kind, target.saturating_sub(state.idle[k].len() + state.booting[k] + warming))
            })
            .filter(|(_, short)| *short > 0)
            .max_by_key(|(_, short)| *short)
            .map(|(kind, _)| kind);
        if let Some(kind) = next {
            state.booting[kind as usize] += 1;
        }
        next
    }

    /// Takes the warmest unbound shared child that wants another warm-up
    /// run out of the idle ones, if the runner has run no job for
    /// [`WARM_UP_AFTER_IDLE`]. Else how long until that may change, if it
    /// may without a job's start or end.
    fn start_warm_up(&self) -> Result<SharedChild, Option<Duration>> {
        let mut state = self.lock();
        let runs = self.config.warm_up_runs;
        if state.busy > 0 || state.warm_up_failures >= WARM_UP_FAILURES {
            return Err(None);
        }
        let wants = |warm: &Warm| matches!(warm, Warm::Shared(child) if child.wants_warm_up(runs));
        let Some(at) = warmest(&state.idle[Kind::Shared as usize], wants) else { return Err(None) };
        let quiet_for = state.idle_since.map_or(WARM_UP_AFTER_IDLE, |since| since.elapsed());
        if quiet_for < WARM_UP_AFTER_IDLE {
            return Err(Some(WARM_UP_AFTER_IDLE - quiet_for));
        }
        let Some(Warm::Shared(child)) = state.idle[Kind::Shared as usize].remove(at) else { return Err(None) };
        state.warming += 1;
        Ok(child)
    }

    /// Ends a warm-up run: `child` back among the idle ones if it is fit
    /// for a job, else retired.
    fn warmed(&self, child: SharedChild, fit: bool) {
        let mut state = self.lock();
        state.warming = state.warming.saturating_sub(1);
        if fit {
            state.warm_up_failures = 0;
            state.idle[Kind::Shared as usize].push_back(Warm::Shared(child));
        } else {
            state.warm_up_failures += 1;
            if state.warm_up_failures >= WARM_UP_FAILURES {
                tracing::error!(
                    "{WARM_UP_FAILURES} warm-up runs in a row left their child unfit; the pool stops warming"
                );
            }
            shared::retire(vec![child]);
        }
        drop(state);
        self.changed.notify_waiters();
    }

    /// A boot of `kind` that gave no child has ended.
    fn gave_none(&self, kind: Kind) {
        let mut state = self.lock();
        state.booting[kind as usize] = state.booting[kind as usize].saturating_sub(1);
        drop(state);
        self.changed.notify_waiters();
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
                    strong.gave_none(kind);
                    tracing::warn!(error = %e, "could not warm a child; retrying in 1 s");
                    drop(strong);
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            },
            None => match strong.start_warm_up() {
                Ok(mut child) => {
                    let fit = child.warm_up(&strong.sandbox, strong.config.warm_up_runs).await;
                    strong.warmed(child, fit);
                    if !fit {
                        tracing::warn!("a warm-up run left its child unfit; it is retired, and warming waits 1 s");
                        drop(strong);
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
                Err(due) => {
                    // Wait for a job to start or end, or for the idle time
                    // a warm-up run waits for; the timeout also bounds a
                    // notification missed between the check and here.
                    let wait = due.map_or(Duration::from_millis(250), |due| due.min(Duration::from_millis(250)));
                    let changed = strong.changed.clone();
                    drop(strong);
                    let _ = tokio::time::timeout(wait, changed.notified()).await;
                }
            },
        }
    }
}
