//! The sandbox: runs one program in a fresh, single-use, deny-all Deno child.
//!
//! How a run works:
//!
//! 1. A private directory (0700, outside any `package.json` tree) is made
//!    for the child; it becomes the child's working directory and DENO_DIR,
//!    and is removed when the run ends, whatever happened.
//! 2. Deno starts in its own process group with an empty environment,
//!    resource limits, every permission denied ([`command`]), and the
//!    isolation layers this host allows ([`Isolation`], found out once at
//!    start by [`probe`]).
//! 3. The language harness boots and says READY; the program and its stdin
//!    then arrive over the stdin pipe ([`child`]), never as a file.
//! 4. stdout and stderr are drained concurrently and capped ([`output`]);
//!    on timeout or cancellation the whole group gets SIGKILL. What the caps
//!    keep is also handed on as it arrives, for live subscribers ([`Live`]).
//!
//! Steps 1 to 3 can happen before the job exists: [`Runner`] keeps a warm
//! pool of booted children ([`pool`]).
//!
//! Python jobs (and JS or TS jobs that ask) take the shared lane instead
//! ([`shared`]): an owner's long-lived children run its jobs one after
//! another, each in a fresh interpreter, under the same limits; a job that
//! asked for a fresh child gets a single-use one.

mod channel;
mod child;
mod command;
#[cfg(test)]
mod fuzz;
mod home;
mod isolation;
mod listing;
mod live;
#[cfg(test)]
mod markers;
mod output;
mod pool;
mod probe;
mod returned;
mod runtime;
mod session;
mod shared;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use runbox_common::{JobSpec, Timeouts};

use crate::egress::EgressProxy;

pub use child::BootedChild;
pub use command::MAX_FILE_BYTES;
pub use isolation::{Isolation, NetworkIsolation};
pub use live::Live;
pub use pool::{HeldSlot, PoolConfig, RunReport, Runner};
pub use runtime::{DEFAULT_RUNTIME_DIR, Runtime, SNAPSHOT_FILE};
pub use session::{BootedSession, Replayed, Restore, SessionChild, SessionError};
pub use shared::{SharedLane, WarmConfig};

/// Errors that keep a run from starting. Once a child runs, every ending is
/// an [`Outcome`].
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("runtime not installed: {0}")]
    Runtime(String),
    #[error("could not make the job directory: {0}")]
    Io(#[from] std::io::Error),
    #[error("could not start deno: {0}")]
    Spawn(std::io::Error),
    #[error("the runtime failed to boot: {0}")]
    Boot(String),
}

/// The limits every run gets.
#[derive(Debug, Clone)]
pub struct Limits {
    /// The wall-clock limit of a job that names none, and the most one may ask for.
    pub timeouts: Timeouts,
    /// Cap on the V8 heap and on WebAssembly memory, each.
    pub memory_mb: u32,
    /// Bytes kept of stdout, and separately of stderr.
    pub max_output_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { timeouts: Timeouts::default(), memory_mb: 256, max_output_bytes: 1024 * 1024 }
    }
}

impl Limits {
    /// The wall-clock limit for `spec`: its own, within the maximum.
    pub fn timeout_for(&self, spec: &JobSpec) -> Duration {
        self.timeouts.for_job(spec.timeout_ms)
    }

    /// The memory cap for `spec`: its own where lower, never higher.
    pub fn memory_for(&self, spec: &JobSpec) -> u32 {
        spec.memory_mb.map_or(self.memory_mb, |asked| asked.clamp(1, self.memory_mb))
    }
}

/// Runs programs, one fresh child each.
#[derive(Clone)]
pub struct Sandbox {
    pub runtime: Runtime,
    pub limits: Limits,
    pub isolation: Isolation,
    /// Where job directories are made.
    pub work_dir: PathBuf,
    /// A DENO_DIR seeded with Deno's code cache, copied into each Python child's.
    pub cache_seed: Option<Arc<tempfile::TempDir>>,
    /// The egress proxy every child's socket leads to.
    pub egress: Arc<EgressProxy>,
}

impl Sandbox {
    /// Checks the runtime and works out which isolation layers this host
    /// allows, by running a real program under each.
    pub async fn new(
        runtime: Runtime,
        limits: Limits,
        work_dir: PathBuf,
        egress: Arc<EgressProxy>,
    ) -> Result<Sandbox, SandboxError> {
        let mut sandbox = Sandbox { runtime, limits, isolation: Isolation::NONE, work_dir, cache_seed: None, egress };
        sandbox.isolation = probe::probe(&sandbox).await?;
        match child::prime_cache(&sandbox).await {
            Ok(seed) => sandbox.cache_seed = Some(Arc::new(seed)),
            Err(e) => tracing::warn!(error = %e, "no code cache for children; they boot slower"),
        }
        Ok(sandbox)
    }
}
