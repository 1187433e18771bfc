//! Records of the E2B-compatible API's sandboxes. A sandbox is a few
//! sessions under one id; its record is JSON the api's adapter shapes, kept
//! here as text with a version, written only by a writer that read the
//! version it replaces (so two requests changing one sandbox at once cannot
//! lose either's change: the later one reads again), and with the set of
//! each owner's sandboxes beside it.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{AsyncCommands, Script};

use super::{Queue, QueueError};

static PUT_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/e2b_sandbox_put.lua")));

/// A sandbox's record as read: its JSON and the version to write over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxRecord {
    pub json: String,
    pub version: u64,
}

impl Queue {
    /// Writes sandbox `id` of `owner` as `json`, kept for `ttl`, if its
    /// record is still at `version` (0 for a new sandbox). False when
    /// another write came first, or the record went: read it again.
    pub async fn put_e2b_sandbox(
        &self,
        id: &str,
        owner: &str,
        json: &str,
        version: u64,
        ttl: Duration,
    ) -> Result<bool, QueueError> {
        let written: i64 = PUT_SCRIPT
            .key(self.keys.e2b_sandbox(id))
            .key(self.keys.e2b_sandboxes(owner))
            .arg(json)
            .arg(version)
            .arg(ttl.as_secs().max(1))
            .arg(id)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(written == 1)
    }

    /// Sandbox `id`'s record, or None once deleted or expired.
    pub async fn e2b_sandbox(&self, id: &str) -> Result<Option<SandboxRecord>, QueueError> {
        let (json, version): (Option<String>, Option<u64>) = redis::cmd("HMGET")
            .arg(self.keys.e2b_sandbox(id))
            .arg(&["record", "version"])
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(json.map(|json| SandboxRecord { json, version: version.unwrap_or(0) }))
    }

    /// The ids of `owner`'s sandboxes; those whose record expired are
    /// dropped from the set on the way.
    pub async fn owner_e2b_sandboxes(&self, owner: &str) -> Result<Vec<String>, QueueError> {
        let owned = self.keys.e2b_sandboxes(owner);
        let ids: Vec<String> = self.conn.clone().smembers(&owned).await?;
        let mut live = Vec::with_capacity(ids.len());
        for id in ids {
            let exists: bool = self.conn.clone().exists(self.keys.e2b_sandbox(&id)).await?;
            if exists {
                live.push(id);
            } else {
                let _: i64 = self.conn.clone().srem(&owned, &id).await?;
            }
        }
        Ok(live)
    }

    /// Forgets sandbox `id` of `owner`. True if it was there.
    pub async fn delete_e2b_sandbox(&self, id: &str, owner: &str) -> Result<bool, QueueError> {
        let (deleted, _): (i64, i64) = redis::pipe()
            .del(self.keys.e2b_sandbox(id))
            .srem(self.keys.e2b_sandboxes(owner), id)
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(deleted == 1)
    }
}
