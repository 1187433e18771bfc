//! Finds out which isolation layers this host allows, by running a real
//! program under each candidate set, strongest first.

use runbox_common::{JobSpec, Language, Status};
use tokio_util::sync::CancellationToken;

use super::{BootedChild, Isolation, Live, NetworkIsolation, Sandbox, SandboxError};

/// The uid children run as when the worker is root: `nobody`.
const UNPRIVILEGED_UID: u32 = 65534;

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
