//! What each worker publishes about itself with every heartbeat, in the
//! [`crate::keys::WORKERS`] hash: the api lists it in `/v1/runtimes`, and
//! workers read `seen_at_ms` to tell the dead from the living.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{EgressGrant, Language};

/// How often each worker writes its heartbeat.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(2);

/// How long a worker may go without a heartbeat before everyone takes it
/// for gone: four missed beats. The api stops listing it and brings its
/// sessions back elsewhere; workers forget it once it holds no entry.
pub const WORKER_SILENT_AFTER: Duration = Duration::from_secs(4 * HEARTBEAT_EVERY.as_secs());

/// `GET /v1/runtimes`: what can run, within which limits, and on which workers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Runtimes {
    pub languages: Vec<Language>,
    pub limits: RuntimeLimits,
    /// Workers with a recent heartbeat.
    pub workers: Vec<WorkerInfo>,
    /// The hosts the asking token's jobs may reach, and its secrets; absent
    /// for a token that may reach none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<EgressGrant>,
}

/// The limits this api enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RuntimeLimits {
    pub default_timeout_ms: u64,
    pub max_timeout_ms: u64,
    pub max_code_bytes: usize,
    pub max_stdin_bytes: usize,
    pub max_files_bytes: usize,
    pub max_queue: u64,
    pub max_batch: usize,
    pub max_batch_bytes: usize,
    pub max_wait_s: u64,
}

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
    /// Sessions it holds, each in a session place, apart from its job slots.
    #[serde(default)]
    pub sessions: usize,
    /// Sessions it may hold at once (`RUNBOX_WORKER_SESSIONS`); the fleet's
    /// session capacity is the sum over live workers. 0 from a worker that
    /// does not say.
    #[serde(default)]
    pub session_capacity: usize,
    /// When it last sent a heartbeat, in Unix milliseconds.
    pub seen_at_ms: u64,
}

impl WorkerInfo {
    /// Whether its last heartbeat, at `now_ms` (Unix milliseconds), is
    /// recent enough for it to count as live (see [`WORKER_SILENT_AFTER`]).
    pub fn is_live(&self, now_ms: u64) -> bool {
        u128::from(now_ms.saturating_sub(self.seen_at_ms)) < WORKER_SILENT_AFTER.as_millis()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_is_live_until_it_has_missed_four_heartbeats() {
        let info = WorkerInfo {
            name: "w".into(),
            deno: None,
            pyodide: None,
            python_packages: serde_json::Value::Null,
            isolation: Vec::new(),
            concurrency: 1,
            pool_max: 1,
            memory_mb: 256,
            max_output_bytes: 1024,
            sessions: 0,
            session_capacity: 0,
            seen_at_ms: 100_000,
        };
        let silent = u64::try_from(WORKER_SILENT_AFTER.as_millis()).expect("fits");
        assert_eq!(silent, 4 * u64::try_from(HEARTBEAT_EVERY.as_millis()).expect("fits"));
        assert!(info.is_live(100_000));
        assert!(info.is_live(100_000 + silent - 1));
        assert!(!info.is_live(100_000 + silent));
        // A clock behind the heartbeat's is not a silence.
        assert!(info.is_live(99_000));
    }
}
