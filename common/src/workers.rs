//! What each worker publishes about itself with every heartbeat, in the
//! [`crate::keys::WORKERS`] hash: the api lists it in `/v1/runtimes`, and
//! workers read `seen_at_ms` to tell the dead from the living.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WorkerInfo {
    /// Its consumer name in the queue.
    pub name: String,
    pub deno: Option<String>,
    pub pyodide: Option<String>,
    /// The pinned Python packages every Python job can import (as the
    /// Pyodide bundle lists them).
    pub python_packages: serde_json::Value,
    /// The isolation layers this host allowed, beyond Deno's permissions.
    pub isolation: Vec<String>,
    pub concurrency: usize,
    pub pool_max: usize,
    pub memory_mb: u32,
    pub max_output_bytes: usize,
    /// Sessions it holds, each in a slot of its own.
    #[serde(default)]
    pub sessions: usize,
    /// When it last sent a heartbeat, in Unix milliseconds.
    pub seen_at_ms: u64,
}
