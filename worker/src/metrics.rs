//! Every metric the worker exports, declared in one place. Labels are
//! bounded: language and status only, never an id.

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry, TextEncoder,
};

/// Latency buckets in seconds, from a warm JS job to the longest timeout.
const BUCKETS: [f64; 14] = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

pub struct Metrics {
    registry: Registry,
    /// Jobs that reached a final status on this worker, by language and status.
    pub jobs_finished: IntCounterVec,
    /// Wall-clock run time of each job in its child, by language.
    pub run_duration: HistogramVec,
    /// Time from enqueue until a worker started the job.
    pub queue_wait: Histogram,
    /// Time spent booting a child for a job (0 when a warm one was ready), by language.
    pub boot_duration: HistogramVec,
    /// Time from a child's end until its result was stored.
    pub write_back: Histogram,
    /// Job slots currently running a job.
    pub busy_slots: IntGauge,
    /// Jobs refused because their signature did not verify.
    pub rejected_signatures: IntCounter,
    /// Entries taken over from a worker that stopped answering.
    pub reclaimed: IntCounter,
    /// Redis operations that failed (each is retried).
    pub redis_errors: IntCounter,
}

impl Metrics {
    pub fn new() -> Metrics {
        let registry = must(Registry::new_custom(Some("runbox_worker".into()), None));
        let jobs_finished = must(IntCounterVec::new(
            Opts::new("jobs_finished_total", "Jobs that reached a final status on this worker."),
            &["language", "status"],
        ));
        let run_duration = must(HistogramVec::new(
            HistogramOpts::new("run_duration_seconds", "Wall-clock run time of each job in its child.")
                .buckets(BUCKETS.to_vec()),
            &["language"],
        ));
        let queue_wait = must(Histogram::with_opts(
            HistogramOpts::new("queue_wait_seconds", "Time from enqueue until a worker started the job.")
                .buckets(BUCKETS.to_vec()),
        ));
        let boot_duration = must(HistogramVec::new(
            HistogramOpts::new("boot_seconds", "Time spent booting a child for a job (0 when a warm one was ready).")
                .buckets(BUCKETS.to_vec()),
            &["language"],
        ));
        let write_back = must(Histogram::with_opts(
            HistogramOpts::new("write_back_seconds", "Time from a child's end until its result was stored.")
                .buckets(BUCKETS.to_vec()),
        ));
        let busy_slots = must(IntGauge::new("busy_slots", "Job slots currently running a job."));
        let rejected_signatures =
            must(IntCounter::new("rejected_signatures_total", "Jobs refused because their signature did not verify."));
        let reclaimed =
            must(IntCounter::new("reclaimed_total", "Entries taken over from a worker that stopped answering."));
        let redis_errors =
            must(IntCounter::new("redis_errors_total", "Redis operations that failed (each is retried)."));
        let metrics = Metrics {
            jobs_finished,
            run_duration,
            queue_wait,
            boot_duration,
            write_back,
            busy_slots,
            rejected_signatures,
            reclaimed,
            redis_errors,
            registry,
        };
        let collectors: [Box<dyn prometheus::core::Collector>; 9] = [
            Box::new(metrics.jobs_finished.clone()),
            Box::new(metrics.run_duration.clone()),
            Box::new(metrics.queue_wait.clone()),
            Box::new(metrics.boot_duration.clone()),
            Box::new(metrics.write_back.clone()),
            Box::new(metrics.busy_slots.clone()),
            Box::new(metrics.rejected_signatures.clone()),
            Box::new(metrics.reclaimed.clone()),
            Box::new(metrics.redis_errors.clone()),
        ];
        for collector in collectors {
            must(metrics.registry.register(collector));
        }
        metrics
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        TextEncoder::new().encode_to_string(&self.registry.gather()).unwrap_or_default()
    }
}

/// Metric definitions are constants: one that does not register is a bug in
/// this file, found by the first start-up, never by input.
fn must<T>(result: prometheus::Result<T>) -> T {
    result.unwrap_or_else(|e| panic!("invalid metric definition: {e}"))
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}
