//! What every handler shares: the settings, the queue, the waiters and
//! the metrics.

use std::sync::Arc;

use runbox_common::{Queue, QueueError};

use crate::config::ApiConfig;
use crate::metrics::Metrics;
use crate::waiters::{self, Waiters};

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub(crate) config: Arc<ApiConfig>,
    pub(crate) queue: Queue,
    pub(crate) waiters: Arc<Waiters>,
    /// Subscribers to running jobs' live output, woken as it grows.
    pub(crate) watchers: Arc<Waiters>,
    pub(crate) metrics: Arc<Metrics>,
    /// Cancelled on shutdown: long-polls stop waiting and answer.
    pub(crate) stopping: tokio_util::sync::CancellationToken,
}

impl AppState {
    /// Connects (lazily) to Redis and starts the completion listener.
    pub fn new(config: ApiConfig) -> Result<AppState, QueueError> {
        let queue = Queue::connect(&config.shared.redis, &config.shared.queue)?;
        let (waiters, watchers) = (Arc::new(Waiters::default()), Arc::new(Waiters::default()));
        tokio::spawn(waiters::listen(queue.clone(), waiters.clone(), watchers.clone()));
        Ok(AppState {
            config: Arc::new(config),
            queue,
            waiters,
            watchers,
            metrics: Arc::new(Metrics::new()),
            stopping: tokio_util::sync::CancellationToken::new(),
        })
    }
}

#[cfg(test)]
impl AppState {
    /// An api whose one token (named `alice`) is `token` and whose Redis
    /// is nowhere: what needs no Redis works, and what does answers 503.
    pub(crate) fn for_tests(token: &str) -> AppState {
        use runbox_common::{RedisTarget, SharedConfig, SigningKey};

        use crate::config::{ApiLimits, McpHosts, SessionLimits};
        let config = ApiConfig {
            tokens: crate::tokens::Tokens::parse(&format!("alice:{token}")).expect("tokens"),
            shared: SharedConfig {
                redis: RedisTarget { urls: vec!["redis://127.0.0.1:1".into()], cluster: false },
                queue: "tests".into(),
                signing_key: SigningKey::new("tests-signing-key-0123456789abcdef").expect("a key"),
                result_ttl: std::time::Duration::from_secs(60),
            },
            port: 0,
            limits: ApiLimits::default(),
            callbacks: crate::callback_urls::CallbackConfig::default(),
            quotas: crate::quotas::Quotas::default(),
            sessions: SessionLimits::default(),
            mcp_hosts: McpHosts::parse(McpHosts::DEFAULT).expect("hosts"),
            egress: crate::egress::EgressConfig::default(),
        };
        AppState::new(config).expect("a lazy connection")
    }
}
