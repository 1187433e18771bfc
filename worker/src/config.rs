use std::path::PathBuf;
use std::time::Duration;

use runbox_common::{ConfigError, SharedConfig, Timeouts, env_or};

use crate::egress::EgressConfig;
use crate::sandbox::{DEFAULT_RUNTIME_DIR, Limits, PoolConfig, WarmConfig};

/// Sandbox settings, read from the environment once at start-up.
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// `RUNBOX_RUNTIME_DIR`: where `scripts/setup` installed Deno, Pyodide
    /// and the harnesses.
    pub runtime_dir: PathBuf,
    /// `RUNBOX_WORK_DIR`: where each job's private directory is made.
    pub work_dir: PathBuf,
    pub limits: Limits,
    /// `RUNBOX_PYODIDE_PACKAGES_URL`: a mirror of Pyodide's packages, in
    /// place of its CDN.
    pub pyodide_packages_url: Option<String>,
    /// The egress proxy's caps (`RUNBOX_EGRESS_MAX_*`), secrets
    /// (`RUNBOX_EGRESS_SECRETS_FILE`) and extra roots (`RUNBOX_EGRESS_CA_FILE`).
    pub egress: EgressConfig,
}

impl SandboxConfig {
    pub fn from_env() -> Result<SandboxConfig, ConfigError> {
        let defaults = Limits::default();
        let limits = Limits {
            timeouts: Timeouts::from_env()?,
            memory_mb: env_or("RUNBOX_MEMORY_MB", defaults.memory_mb)?,
            max_output_bytes: env_or("RUNBOX_MAX_OUTPUT_BYTES", defaults.max_output_bytes)?,
        };
        if limits.memory_mb < 32 {
            return Err(ConfigError::Invalid {
                name: "RUNBOX_MEMORY_MB",
                value: limits.memory_mb.to_string(),
                reason: "at least 32 is needed for the runtime itself".into(),
            });
        }
        Ok(SandboxConfig {
            runtime_dir: env_or("RUNBOX_RUNTIME_DIR", PathBuf::from(DEFAULT_RUNTIME_DIR))?,
            work_dir: env_or("RUNBOX_WORK_DIR", std::env::temp_dir())?,
            limits,
            pyodide_packages_url: std::env::var("RUNBOX_PYODIDE_PACKAGES_URL").ok().filter(|url| !url.is_empty()),
            egress: EgressConfig::from_env()?,
        })
    }
}

/// Everything a queue worker needs, read from the environment once.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Redis, the queue, the signing key and the result TTL.
    pub shared: SharedConfig,
    /// `RUNBOX_WORKER_NAME`: this worker's consumer name; unique per process.
    pub name: String,
    /// `RUNBOX_WORKER_CONCURRENCY`: jobs run at once.
    pub concurrency: usize,
    /// `RUNBOX_WORKER_SESSIONS` (default twice the concurrency; 0 opens
    /// none): sessions held at once, each a process under the memory cap,
    /// in places of their own beside the job slots.
    pub sessions: usize,
    /// `RUNBOX_MAX_DELIVERIES`: deliveries after which a job is `worker_lost`.
    pub max_deliveries: u64,
    /// `RUNBOX_RECLAIM_IDLE_MS`: how long an entry may go without its
    /// worker's heartbeat (every 2 s) before another worker takes it over.
    pub reclaim_idle: Duration,
    /// `RUNBOX_SHUTDOWN_GRACE_MS`: on SIGTERM, how long running jobs may
    /// finish before they are killed and left for another worker.
    pub shutdown_grace: Duration,
    /// The warm pool (`RUNBOX_POOL_MIN`, `RUNBOX_POOL_MAX`) and the
    /// owners' warm children (`RUNBOX_WARM_PER_OWNER`, `RUNBOX_WARM_MAX`,
    /// `RUNBOX_WARM_IDLE_MS`).
    pub pool: PoolConfig,
    /// `RUNBOX_METRICS_PORT`: serve `/metrics` and `/healthz` here if set.
    pub metrics_port: Option<u16>,
    /// `RUNBOX_LIVE_OUTPUT` (default true): send each running job's output
    /// to Redis as it is written, for `GET /v1/jobs/{id}/events`. Off, a
    /// job's events come only once it has ended, from its result.
    pub live_output: bool,
    pub sandbox: SandboxConfig,
    /// Checkpoint size cap and TTL.
    pub checkpoints: CheckpointLimits,
}

impl WorkerConfig {
    pub fn from_env() -> Result<WorkerConfig, ConfigError> {
        let sandbox = SandboxConfig::from_env()?;
        let default_concurrency = std::thread::available_parallelism().map_or(2, usize::from);
        let concurrency = env_or("RUNBOX_WORKER_CONCURRENCY", default_concurrency)?;
        if concurrency == 0 {
            return Err(ConfigError::Invalid {
                name: "RUNBOX_WORKER_CONCURRENCY",
                value: "0".into(),
                reason: "must be at least 1".into(),
            });
        }
        let host =
            nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()).unwrap_or_else(|| "worker".into());
        let suffix = uuid::Uuid::new_v4().simple().to_string();
        Ok(WorkerConfig {
            shared: SharedConfig::from_env()?,
            checkpoints: CheckpointLimits::from_env()?,
            name: env_or("RUNBOX_WORKER_NAME", format!("{host}-{}", &suffix[..8]))?,
            concurrency,
            sessions: env_or("RUNBOX_WORKER_SESSIONS", 2 * concurrency)?,
            max_deliveries: env_or("RUNBOX_MAX_DELIVERIES", 3)?,
            reclaim_idle: Duration::from_millis(env_or("RUNBOX_RECLAIM_IDLE_MS", 10_000)?),
            shutdown_grace: Duration::from_millis(env_or("RUNBOX_SHUTDOWN_GRACE_MS", 30_000)?),
            pool: PoolConfig::from_env(concurrency)?,
            metrics_port: match std::env::var("RUNBOX_METRICS_PORT") {
                Ok(port) if !port.trim().is_empty() => Some(env_or("RUNBOX_METRICS_PORT", 0)?),
                _ => None,
            },
            live_output: env_or("RUNBOX_LIVE_OUTPUT", true)?,
            sandbox,
        })
    }
}

/// The bounds on the checkpoints a worker stores for its sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointLimits {
    /// `RUNBOX_CHECKPOINT_TTL_S`: how long a checkpoint is kept.
    pub ttl: Duration,
    /// `RUNBOX_CHECKPOINT_MAX_MB`: the largest checkpoint stored, compressed.
    pub max_bytes: u64,
}

impl Default for CheckpointLimits {
    fn default() -> Self {
        CheckpointLimits { ttl: Duration::from_secs(24 * 3600), max_bytes: 64 * 1024 * 1024 }
    }
}

impl CheckpointLimits {
    pub fn from_env() -> Result<CheckpointLimits, ConfigError> {
        let d = CheckpointLimits::default();
        Ok(CheckpointLimits {
            ttl: Duration::from_secs(env_or("RUNBOX_CHECKPOINT_TTL_S", d.ttl.as_secs())?),
            max_bytes: env_or("RUNBOX_CHECKPOINT_MAX_MB", d.max_bytes >> 20)? << 20,
        })
    }
}

impl PoolConfig {
    /// `RUNBOX_POOL_MIN` (default 1) and `RUNBOX_POOL_MAX` (default
    /// `concurrency`; 0 turns the pool off), per kind of child,
    /// `RUNBOX_POOL_WARM_UP_RUNS` (default 10; 0 runs none), and the
    /// owners' warm children ([`WarmConfig::from_env`]).
    pub fn from_env(concurrency: usize) -> Result<PoolConfig, ConfigError> {
        Ok(PoolConfig {
            min: env_or("RUNBOX_POOL_MIN", 1)?,
            max: env_or("RUNBOX_POOL_MAX", concurrency)?,
            concurrency,
            warm_up_runs: warm_up_runs()?,
            warm: WarmConfig::from_env(concurrency)?,
        })
    }
}

/// `RUNBOX_POOL_WARM_UP_RUNS`, within [`PoolConfig::MAX_WARM_UP_RUNS`].
fn warm_up_runs() -> Result<u32, ConfigError> {
    let runs = env_or("RUNBOX_POOL_WARM_UP_RUNS", PoolConfig::WARM_UP_RUNS)?;
    if runs > PoolConfig::MAX_WARM_UP_RUNS {
        return Err(ConfigError::Invalid {
            name: "RUNBOX_POOL_WARM_UP_RUNS",
            value: runs.to_string(),
            reason: format!("must be at most {}", PoolConfig::MAX_WARM_UP_RUNS),
        });
    }
    Ok(runs)
}

impl WarmConfig {
    /// `RUNBOX_WARM_MAX` (default `concurrency`: an owner that fills every
    /// slot finds each of its children warm again), `RUNBOX_WARM_PER_OWNER`
    /// (default `RUNBOX_WARM_MAX`) and `RUNBOX_WARM_IDLE_MS` (default 3000).
    pub fn from_env(concurrency: usize) -> Result<WarmConfig, ConfigError> {
        let max = env_or("RUNBOX_WARM_MAX", concurrency)?;
        let idle_ms: u64 = env_or("RUNBOX_WARM_IDLE_MS", 3000)?;
        if idle_ms == 0 {
            return Err(ConfigError::Invalid {
                name: "RUNBOX_WARM_IDLE_MS",
                value: "0".into(),
                reason: "must be at least 1; set RUNBOX_WARM_MAX=0 to keep no child warm".into(),
            });
        }
        Ok(WarmConfig { per_owner: env_or("RUNBOX_WARM_PER_OWNER", max)?, max, idle: Duration::from_millis(idle_ms) })
    }
}
