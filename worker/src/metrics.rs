//! Every metric the worker exports, declared in one place. Labels are
//! bounded: language, status and lane only, never an id.

use prometheus::{Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts};
use runbox_common::{Language, Outcome};
use runbox_process::MetricsRegistry;

/// Latency buckets in seconds, from a warm JS job to the longest timeout.
const BUCKETS: [f64; 14] = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// Memory buckets in bytes, 1 MiB to 4 GiB by powers of two: a JS job in
/// a long-lived child uses a few MiB, a single-use Python child's whole
/// process a few hundred.
const MEMORY_BUCKETS: [f64; 13] = {
    let mut buckets = [0.0; 13];
    let mut i = 0;
    while i < buckets.len() {
        buckets[i] = (1u64 << (20 + i)) as f64;
        i += 1;
    }
    buckets
};

/// Where a job ran, as the `lane` label says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// A child of its own, which ran it and nothing else.
    SingleUse,
    /// One of its owner's long-lived children.
    Shared,
    /// A session's child.
    Session,
}

impl Lane {
    pub fn as_str(self) -> &'static str {
        match self {
            Lane::SingleUse => "single_use",
            Lane::Shared => "shared",
            Lane::Session => "session",
        }
    }
}

pub struct Metrics {
    registry: MetricsRegistry,
    /// Jobs that reached a final status on this worker, by language and status.
    pub jobs_finished: IntCounterVec,
    /// Verdicts of jobs that said what to expect, by language and verdict.
    pub verdicts: IntCounterVec,
    /// Wall-clock run time of each job in its child, by language.
    pub run_duration: HistogramVec,
    /// Time from enqueue until a worker started the job.
    pub queue_wait: Histogram,
    /// Time spent booting a child for a job (0 when a warm one was ready), by language.
    pub boot_duration: HistogramVec,
    /// Time from a child's end until its result was stored.
    pub write_back: Histogram,
    /// Jobs that ran in a long-lived child that had already run a job of
    /// their owner, by language.
    pub warm_jobs: IntCounterVec,
    /// CPU time (user + system) each job used, as runbox measured it, by
    /// language and lane.
    pub cpu: HistogramVec,
    /// Each job's peak memory, as runbox measured it (what each lane
    /// counts differs: see docs/api.md), by language and lane.
    pub peak_memory: HistogramVec,
    /// Job slots currently running a job.
    pub busy_slots: IntGauge,
    /// Sessions this worker holds open (each holds a slot).
    pub sessions: IntGauge,
    /// Jobs refused because their signature did not verify.
    pub rejected_signatures: IntCounter,
    /// Entries taken over from a worker that stopped answering.
    pub reclaimed: IntCounter,
    /// Redis operations that failed (each is retried).
    pub redis_errors: IntCounter,
}

impl Metrics {
    pub fn new() -> Metrics {
        let r = MetricsRegistry::new("runbox_worker");
        let buckets = || BUCKETS.to_vec();
        Metrics {
            jobs_finished: r.add(IntCounterVec::new(
                Opts::new("jobs_finished_total", "Jobs that reached a final status on this worker."),
                &["language", "status"],
            )),
            verdicts: r.add(IntCounterVec::new(
                Opts::new("verdicts_total", "Verdicts of jobs that said what to expect."),
                &["language", "verdict"],
            )),
            run_duration: r.add(HistogramVec::new(
                HistogramOpts::new("run_duration_seconds", "Wall-clock run time of each job in its child.")
                    .buckets(buckets()),
                &["language"],
            )),
            queue_wait: r.add(Histogram::with_opts(
                HistogramOpts::new("queue_wait_seconds", "Time from enqueue until a worker started the job.")
                    .buckets(buckets()),
            )),
            boot_duration: r.add(HistogramVec::new(
                HistogramOpts::new(
                    "boot_seconds",
                    "Time spent booting a child for a job (0 when a warm one was ready).",
                )
                .buckets(buckets()),
                &["language"],
            )),
            write_back: r.add(Histogram::with_opts(
                HistogramOpts::new("write_back_seconds", "Time from a child's end until its result was stored.")
                    .buckets(buckets()),
            )),
            warm_jobs: r.add(IntCounterVec::new(
                Opts::new(
                    "warm_jobs_total",
                    "Jobs that ran in a long-lived child that had already run a job of their owner.",
                ),
                &["language"],
            )),
            cpu: r.add(HistogramVec::new(
                HistogramOpts::new("cpu_seconds", "CPU time (user + system) each job used, as runbox measured it.")
                    .buckets(buckets()),
                &["language", "lane"],
            )),
            peak_memory: r.add(HistogramVec::new(
                HistogramOpts::new("peak_memory_bytes", "Each job's peak memory, as runbox measured it.")
                    .buckets(MEMORY_BUCKETS.to_vec()),
                &["language", "lane"],
            )),
            busy_slots: r.add(IntGauge::new("busy_slots", "Job slots currently running a job.")),
            sessions: r.add(IntGauge::new("sessions", "Sessions this worker holds open.")),
            rejected_signatures: r.add(IntCounter::new(
                "rejected_signatures_total",
                "Jobs refused because their signature did not verify.",
            )),
            reclaimed: r
                .add(IntCounter::new("reclaimed_total", "Entries taken over from a worker that stopped answering.")),
            redis_errors: r
                .add(IntCounter::new("redis_errors_total", "Redis operations that failed (each is retried).")),
            registry: r,
        }
    }

    /// Records what `outcome` measured of its job's CPU and memory, where
    /// it measured anything (nothing ran for a rejected job, say).
    pub fn observe_usage(&self, language: Language, lane: Lane, outcome: &Outcome) {
        let labels = [language.as_str(), lane.as_str()];
        if let Some(ms) = outcome.cpu_ms {
            self.cpu.with_label_values(&labels).observe(ms as f64 / 1000.0);
        }
        if let Some(bytes) = outcome.peak_memory_bytes {
            self.peak_memory.with_label_values(&labels).observe(bytes as f64);
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        self.registry.render()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}
