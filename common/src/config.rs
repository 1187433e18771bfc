//! The settings the api and the workers share, read from the environment
//! once, at start-up, by both, with the same defaults.

use std::time::Duration;

use crate::env::{ConfigError, env_or, env_required};
use crate::{RedisTarget, SigningKey};

/// What the api and the workers must agree on, read by both from the same
/// variables, with the same defaults, by this one function. The timeout
/// bounds, which the sandbox needs without a queue too, are [`Timeouts`].
#[derive(Debug, Clone)]
pub struct SharedConfig {
    /// `REDIS_URL`, and `RUNBOX_REDIS_CLUSTER`.
    pub redis: RedisTarget,
    /// `RUNBOX_QUEUE`: the queue the api fills and the workers serve.
    pub queue: String,
    /// `RUNBOX_SIGNING_KEY`: the api signs every job with it; workers run
    /// only what verifies.
    pub signing_key: SigningKey,
    /// `RUNBOX_RESULT_TTL_S`: how long finished jobs and batches are kept.
    pub result_ttl: Duration,
}

impl SharedConfig {
    pub fn from_env() -> Result<SharedConfig, ConfigError> {
        Ok(SharedConfig {
            redis: redis_target()?,
            queue: env_or("RUNBOX_QUEUE", "default".to_owned())?,
            signing_key: SigningKey::new(env_required(
                "RUNBOX_SIGNING_KEY",
                "a secret of at least 32 bytes, the same for the api and every worker, distinct from every api token",
            )?)?,
            result_ttl: Duration::from_secs(env_or("RUNBOX_RESULT_TTL_S", 3600)?),
        })
    }
}

/// `REDIS_URL`: one URL, or with `RUNBOX_REDIS_CLUSTER=true` the
/// comma-separated seed nodes of a Redis Cluster.
fn redis_target() -> Result<RedisTarget, ConfigError> {
    let text = env_or("REDIS_URL", "redis://127.0.0.1:6379".to_owned())?;
    let urls: Vec<String> = text.split(',').map(str::trim).filter(|u| !u.is_empty()).map(str::to_owned).collect();
    let cluster = env_or("RUNBOX_REDIS_CLUSTER", false)?;
    if urls.len() > 1 && !cluster {
        return Err(ConfigError::Invalid {
            name: "REDIS_URL",
            value: text,
            reason: "several URLs are the seed nodes of a cluster: set RUNBOX_REDIS_CLUSTER=true".into(),
        });
    }
    Ok(RedisTarget { urls, cluster })
}

/// A job's wall-clock limit: `RUNBOX_DEFAULT_TIMEOUT_MS` for a job that
/// names none, and `RUNBOX_MAX_TIMEOUT_MS` at most. The api fills in the
/// default and refuses more than the maximum; a worker applies the same
/// bounds again to what it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub default: Duration,
    pub max: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts { default: Duration::from_secs(10), max: Duration::from_secs(60) }
    }
}

impl Timeouts {
    pub fn from_env() -> Result<Timeouts, ConfigError> {
        let d = Timeouts::default();
        let timeouts = Timeouts {
            default: Duration::from_millis(env_or("RUNBOX_DEFAULT_TIMEOUT_MS", millis(d.default))?),
            max: Duration::from_millis(env_or("RUNBOX_MAX_TIMEOUT_MS", millis(d.max))?),
        };
        if timeouts.default > timeouts.max {
            return Err(ConfigError::Invalid {
                name: "RUNBOX_DEFAULT_TIMEOUT_MS",
                value: millis(timeouts.default).to_string(),
                reason: "must not exceed RUNBOX_MAX_TIMEOUT_MS".into(),
            });
        }
        Ok(timeouts)
    }

    /// The limit of a job that asked for `asked_ms`, or for nothing.
    pub fn for_job(&self, asked_ms: Option<u64>) -> Duration {
        asked_ms.map_or(self.default, Duration::from_millis).min(self.max)
    }

    /// The longest `timeout_ms` a job may ask for.
    pub fn max_ms(&self) -> u64 {
        millis(self.max)
    }

    pub fn default_ms(&self) -> u64 {
        millis(self.default)
    }
}

pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
