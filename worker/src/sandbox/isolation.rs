//! Defense in depth beyond Deno's permissions, where the host allows it.
//!
//! These layers are best effort: a host without the privilege for one (a
//! typical PaaS container) still runs jobs, and [`Isolation::layers`] says
//! what is active so start-up logs and `/v1/runtimes` can report it.

use serde::Serialize;

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
