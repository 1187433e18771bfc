//! The runbox worker: runs untrusted programs in single-use Deno children.
//!
//! # Layout
//!
//! - [`sandbox`]: builds, runs and reaps one deny-all Deno child per job,
//!   and enforces the time, memory and output limits.
//! - [`config`]: the worker's settings, read from the environment once.

pub mod config;
pub mod sandbox;

pub use config::SandboxConfig;
pub use sandbox::{Sandbox, SandboxError};

/// Builds a sandbox from `config`, probing which isolation layers work here.
pub async fn sandbox(config: &SandboxConfig) -> Result<Sandbox, SandboxError> {
    let runtime = sandbox::Runtime::locate(&config.runtime_dir)?;
    if runtime.snapshot.is_none() {
        tracing::warn!(
            path = %runtime.dir.join(sandbox::SNAPSHOT_FILE).display(),
            "no Pyodide snapshot: Python boots from scratch (about 5x slower); run scripts/setup"
        );
    }
    let sandbox = Sandbox::new(runtime, config.limits.clone(), config.work_dir.clone()).await?;
    tracing::info!(layers = ?sandbox.isolation.layers(), "sandbox ready");
    Ok(sandbox)
}
