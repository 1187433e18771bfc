//! The runbox worker: claims jobs from the queue and runs each untrusted
//! program in a single-use, deny-all Deno child.
//!
//! # Layout
//!
//! From the bottom up; each module uses only modules listed above it.
//!
//! - [`egress`]: the proxy outside the children, through which a job whose
//!   token has egress rules reaches the hosts they name, and nothing else.
//! - [`sandbox`]: builds, runs and reaps one Deno child per job, and
//!   enforces the time, memory and output limits. It knows nothing of Redis.
//! - `config`: settings, read from the environment once.
//! - `metrics`: every metric the worker exports.
//! - `backoff`: how long to wait before trying Redis again.
//! - `live`: sends each running job's output to Redis as it is written,
//!   for live subscribers.
//! - `held_sessions`: the sessions this worker holds (where each one's
//!   tasks go, how to end it) and the spare session children booted ahead.
//! - `worker`: the `Worker` handle every job and session task runs with,
//!   and the Redis writes both make: a job's result, and the retry of any
//!   write that must not be lost (`Worker::until_written`).
//! - `sessions`: opens, serves and ends sessions, and reads the inbox their
//!   execs, checkpoints and destroys arrive through.
//! - `service`: the queue side: claim, verify, run, write back, reclaim
//!   from dead workers, heartbeat, cancel, drain on shutdown; it starts the
//!   sessions' inbox.

mod backoff;
mod config;
pub mod egress;
mod held_sessions;
mod live;
mod metrics;
pub mod sandbox;
mod service;
mod sessions;
mod worker;

use std::future::Future;
use std::sync::Arc;

pub use config::{SandboxConfig, WorkerConfig};
pub use metrics::Metrics;
pub use sandbox::{Sandbox, SandboxError};

/// Why the worker could not run.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error(transparent)]
    Queue(#[from] runbox_common::QueueError),
    #[error("metrics server: {0}")]
    Metrics(std::io::Error),
}

/// Builds a sandbox from `config`, probing which isolation layers work here.
pub async fn sandbox(config: &SandboxConfig) -> Result<Sandbox, SandboxError> {
    let mut runtime = sandbox::Runtime::locate(&config.runtime_dir)?;
    if let Some(url) = &config.pyodide_packages_url {
        runtime.packages_url = format!("{}/", url.trim_end_matches('/'));
    }
    if runtime.snapshot.is_none() {
        tracing::warn!(
            path = %runtime.dir.join(sandbox::SNAPSHOT_FILE).display(),
            "no Pyodide snapshot: Python boots from scratch (about 5x slower); run scripts/setup"
        );
    }
    let egress = egress::EgressProxy::new(&config.egress)
        .map_err(|e| SandboxError::Runtime(format!("the egress proxy's HTTP client: {e}")))?;
    let sandbox = Sandbox::new(runtime, config.limits.clone(), config.work_dir.clone(), egress).await?;
    tracing::info!(layers = ?sandbox.isolation.layers(), "sandbox ready");
    Ok(sandbox)
}

/// Runs a queue worker until `shutdown` resolves, then drains gracefully.
pub async fn run(config: WorkerConfig, shutdown: impl Future<Output = ()>) -> Result<(), WorkerError> {
    let sandbox = sandbox(&config.sandbox).await?;
    let metrics = Arc::new(Metrics::new());
    if let Some(port) = config.metrics_port {
        let listener = tokio::net::TcpListener::bind(("0.0.0.0", port)).await.map_err(WorkerError::Metrics)?;
        // Port 0 binds any free port: the line says which (tests read it).
        if let Ok(addr) = listener.local_addr() {
            tracing::info!(%addr, "metrics listening");
        }
        let metrics = metrics.clone();
        let app = axum::Router::new()
            .route("/metrics", axum::routing::get(move || async move { metrics.render() }))
            .route("/healthz", axum::routing::get(|| async { "ok" }));
        tokio::spawn(async move { axum::serve(listener, app).await });
    }
    Ok(service::run(config, sandbox, metrics, shutdown).await?)
}
