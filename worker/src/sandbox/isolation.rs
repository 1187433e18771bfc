//! Defense in depth beyond Deno's permissions, where the host allows it.
//!
//! These layers are best effort: a host without the privilege for one (a
//! typical PaaS container) still runs jobs, and [`Isolation::layers`] says
//! what is active so start-up logs and `/v1/runtimes` can report it.

use runbox_common::{JobSpec, Language, Status};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::{BootedChild, Live, Sandbox, SandboxError};

/// The uid children run as when the worker is root: `nobody`.
const UNPRIVILEGED_UID: u32 = 65534;

/// How the child is cut off from the network below Deno's own checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkIsolation {
    None,
    /// A new, empty network namespace: not even loopback is up.
    Namespace,
    /// The same, made from a new user namespace by an unprivileged worker.
    UserAndNetworkNamespace,
}

/// The isolation layers applied to every child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Isolation {
    pub network: NetworkIsolation,
    /// The uid the child drops to, when the worker runs as root.
    pub uid: Option<u32>,
}

impl Isolation {
    pub const NONE: Isolation = Isolation { network: NetworkIsolation::None, uid: None };

    /// Names of the active layers, Deno's own permission checks included.
    pub fn layers(&self) -> Vec<&'static str> {
        let mut layers = vec!["deno_permissions", "empty_environment", "process_group", "rlimits"];
        match self.network {
            NetworkIsolation::None => {}
            NetworkIsolation::Namespace => layers.push("network_namespace"),
            NetworkIsolation::UserAndNetworkNamespace => layers.push("user_and_network_namespace"),
        }
        if self.uid.is_some() {
            layers.push("unprivileged_uid");
        }
        layers
    }
}

/// Finds the strongest set of layers under which a real program runs and
/// prints the right answer. Fails only if a child cannot run at all.
pub async fn probe(sandbox: &Sandbox) -> Result<Isolation, SandboxError> {
    let root = nix::unistd::geteuid().is_root();
    let network = if root { NetworkIsolation::Namespace } else { NetworkIsolation::UserAndNetworkNamespace };
    let uid = root.then_some(UNPRIVILEGED_UID);
    let candidates = [
        Isolation { network, uid },
        Isolation { network: NetworkIsolation::None, uid },
        Isolation { network, uid: None },
        Isolation::NONE,
    ];
    let mut last_error = None;
    for candidate in candidates {
        match self_test(sandbox, candidate).await {
            Ok(()) => return Ok(candidate),
            Err(e) => {
                tracing::warn!(?candidate, error = %e, "isolation layer unavailable on this host");
                last_error = Some(e);
            }
        }
    }
    Err(last_error.unwrap_or_else(|| SandboxError::Boot("no isolation candidate".into())))
}

async fn self_test(sandbox: &Sandbox, isolation: Isolation) -> Result<(), SandboxError> {
    let trial = Sandbox { isolation, ..sandbox.clone() };
    let spec = JobSpec { timeout_ms: Some(10_000), ..JobSpec::new(Language::Javascript, "console.log(6 * 7)") };
    let child = BootedChild::boot(&trial, Language::Javascript).await?;
    let outcome = child.run(&spec, &trial, &CancellationToken::new(), &Live::default()).await;
    if outcome.status == Status::Completed && outcome.exit_code == Some(0) && outcome.stdout == "42\n" {
        Ok(())
    } else {
        Err(SandboxError::Boot(format!("self-test failed: {outcome:?}")))
    }
}
