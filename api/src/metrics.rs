//! Every metric the api exports, declared in one place. Labels are bounded.

use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts};
use runbox_process::MetricsRegistry;

pub struct Metrics {
    registry: MetricsRegistry,
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
        let r = MetricsRegistry::new("runbox_api");
        Metrics {
            jobs_submitted: r.add(IntCounterVec::new(
                Opts::new("jobs_submitted_total", "Jobs accepted into the queue."),
                &["language"],
            )),
            queue_full: r
                .add(IntCounter::new("queue_full_total", "Submissions refused with 503 because the queue was full.")),
            queue_depth: r.add(IntGauge::new("queue_depth", "Queued plus running jobs.")),
            oldest_queued_age_seconds: r
                .add(IntGauge::new("oldest_queued_age_seconds", "Age of the oldest job no worker has claimed.")),
            waiters: r.add(IntGauge::new("waiters", "Requests waiting on a long-poll.")),
            workers: r.add(IntGauge::new("workers", "Live workers, by their last heartbeat.")),
            callbacks: r.add(IntCounterVec::new(
                Opts::new("callbacks_total", "Callback deliveries ended, by result."),
                &["result"],
            )),
            registry: r,
        }
    }

    pub fn render(&self) -> String {
        self.registry.render()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}
