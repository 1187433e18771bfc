//! The Prometheus registry every binary exports its metrics through.

use prometheus::core::Collector;

/// A registry whose metrics carry one name prefix (`runbox_api`,
/// `runbox_worker`).
pub struct MetricsRegistry(prometheus::Registry);

impl MetricsRegistry {
    pub fn new(prefix: &str) -> MetricsRegistry {
        MetricsRegistry(must(prometheus::Registry::new_custom(Some(prefix.into()), None)))
    }

    /// Registers `metric`, made by a prometheus constructor, and returns it.
    pub fn add<M: Collector + Clone + 'static>(&self, metric: prometheus::Result<M>) -> M {
        let metric = must(metric);
        must(self.0.register(Box::new(metric.clone())));
        metric
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        prometheus::TextEncoder::new().encode_to_string(&self.0.gather()).unwrap_or_default()
    }
}

/// Metric definitions are constants: one that does not register is a bug in
/// the code, found by the first start-up, never by input.
fn must<T>(result: prometheus::Result<T>) -> T {
    result.unwrap_or_else(|e| panic!("invalid metric definition: {e}"))
}
