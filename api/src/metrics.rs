//! Every metric the api exports, declared in one place. Labels are bounded.

use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry, TextEncoder};

pub struct Metrics {
    registry: Registry,
    /// Jobs accepted into the queue, by language.
    pub jobs_submitted: IntCounterVec,
    /// Submissions refused with 503 because the queue was full.
    pub queue_full: IntCounter,
    /// Queued plus running jobs, read from Redis at scrape time.
    pub queue_depth: IntGauge,
    /// Age in seconds of the oldest job no worker has claimed, at scrape time.
    pub oldest_queued_age_seconds: IntGauge,
    /// Requests waiting on a long-poll right now.
    pub waiters: IntGauge,
    /// Live workers, by their last heartbeat, at scrape time.
    pub workers: IntGauge,
    /// Callback deliveries ended, by result: `delivered` or `failed`.
    pub callbacks: IntCounterVec,
}

impl Metrics {
    pub fn new() -> Metrics {
        let registry = must(Registry::new_custom(Some("runbox_api".into()), None));
        let metrics = Metrics {
            jobs_submitted: must(IntCounterVec::new(
                Opts::new("jobs_submitted_total", "Jobs accepted into the queue."),
                &["language"],
            )),
            queue_full: must(IntCounter::new(
                "queue_full_total",
                "Submissions refused with 503 because the queue was full.",
            )),
            queue_depth: must(IntGauge::new("queue_depth", "Queued plus running jobs.")),
            oldest_queued_age_seconds: must(IntGauge::new(
                "oldest_queued_age_seconds",
                "Age of the oldest job no worker has claimed.",
            )),
            waiters: must(IntGauge::new("waiters", "Requests waiting on a long-poll.")),
            workers: must(IntGauge::new("workers", "Live workers, by their last heartbeat.")),
            callbacks: must(IntCounterVec::new(
                Opts::new("callbacks_total", "Callback deliveries ended, by result."),
                &["result"],
            )),
            registry,
        };
        let collectors: [Box<dyn prometheus::core::Collector>; 7] = [
            Box::new(metrics.jobs_submitted.clone()),
            Box::new(metrics.queue_full.clone()),
            Box::new(metrics.queue_depth.clone()),
            Box::new(metrics.oldest_queued_age_seconds.clone()),
            Box::new(metrics.waiters.clone()),
            Box::new(metrics.workers.clone()),
            Box::new(metrics.callbacks.clone()),
        ];
        for collector in collectors {
            must(metrics.registry.register(collector));
        }
        metrics
    }

    pub fn render(&self) -> String {
        TextEncoder::new().encode_to_string(&self.registry.gather()).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// Metric definitions are constants: one that does not register is a bug in
/// this file, found by the first start-up, never by input.
fn must<T>(result: prometheus::Result<T>) -> T {
    result.unwrap_or_else(|e| panic!("invalid metric definition: {e}"))
}
