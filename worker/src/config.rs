use std::path::PathBuf;
use std::time::Duration;

use runbox_common::{ConfigError, env_or};

use crate::sandbox::{DEFAULT_RUNTIME_DIR, Limits};

/// Sandbox settings, read from the environment once at start-up.
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// `RUNBOX_RUNTIME_DIR`: where `scripts/setup` installed Deno, Pyodide
    /// and the harnesses.
    pub runtime_dir: PathBuf,
    /// `RUNBOX_WORK_DIR`: where each job's private directory is made.
    pub work_dir: PathBuf,
    pub limits: Limits,
}

impl SandboxConfig {
    pub fn from_env() -> Result<SandboxConfig, ConfigError> {
        let defaults = Limits::default();
        let limits = Limits {
            default_timeout: Duration::from_millis(env_or(
                "RUNBOX_DEFAULT_TIMEOUT_MS",
                millis(defaults.default_timeout),
            )?),
            max_timeout: Duration::from_millis(env_or("RUNBOX_MAX_TIMEOUT_MS", millis(defaults.max_timeout))?),
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
        if limits.default_timeout > limits.max_timeout {
            return Err(ConfigError::Invalid {
                name: "RUNBOX_DEFAULT_TIMEOUT_MS",
                value: millis(limits.default_timeout).to_string(),
                reason: "must not exceed RUNBOX_MAX_TIMEOUT_MS".into(),
            });
        }
        Ok(SandboxConfig {
            runtime_dir: env_or("RUNBOX_RUNTIME_DIR", PathBuf::from(DEFAULT_RUNTIME_DIR))?,
            work_dir: env_or("RUNBOX_WORK_DIR", std::env::temp_dir())?,
            limits,
        })
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
