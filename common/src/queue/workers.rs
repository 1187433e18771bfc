//! The registry of live workers: the [`keys::WORKERS`] hash of what each
//! last reported, kept by heartbeats, and the forgetting of dead ones.

use redis::{AsyncCommands, RedisResult, Value};

use super::{Queue, QueueError};
use crate::{WorkerInfo, keys};

impl Queue {
    /// Records that a worker is alive, with what it reports about itself.
    pub async fn heartbeat(&self, info: &WorkerInfo) -> Result<(), QueueError> {
        let json = serde_json::to_string(info).map_err(|e| QueueError::Protocol(e.to_string()))?;
        let _: i64 = self.conn.clone().hset(keys::WORKERS, &info.name, json).await?;
        Ok(())
    }

    /// Removes worker `name` from the live set.
    pub async fn forget_worker(&self, name: &str) -> Result<(), QueueError> {
        let _: i64 = self.conn.clone().hdel(keys::WORKERS, name).await?;
        Ok(())
    }

    /// Forgets every worker whose last heartbeat (`seen_at_ms` in what it
    /// reported) is older than `dead_before_ms` and that holds no entry:
    /// its consumer leaves the group and its entry the workers hash. One
    /// that still holds entries is left until they are taken over.
    pub async fn forget_dead_workers(&self, dead_before_ms: u64) -> Result<Vec<String>, QueueError> {
        let all: std::collections::HashMap<String, String> = self.conn.clone().hgetall(keys::WORKERS).await?;
        let silent: Vec<String> = all
            .into_iter()
            .filter(|(_, info)| {
                serde_json::from_str::<WorkerInfo>(info).map_or(0, |info| info.seen_at_ms) < dead_before_ms
            })
            .map(|(name, _)| name)
            .collect();
        if silent.is_empty() {
            return Ok(Vec::new());
        }
        let mut streams = self.owner_streams().await?;
        streams.push(self.keys.session_starts());
        let mut forgotten = Vec::new();
        for name in silent {
            let mut holds_entries = false;
            for stream in &streams {
                let pending: RedisResult<Value> = redis::cmd("XPENDING")
                    .arg(stream)
                    .arg(keys::GROUP)
                    .arg("-")
                    .arg("+")
                    .arg(1)
                    .arg(&name)
                    .query_async(&mut self.conn.clone())
                    .await;
                holds_entries |= matches!(&pending, Ok(Value::Array(rows)) if !rows.is_empty());
            }
            if holds_entries {
                continue;
            }
            for stream in &streams {
                // A stream without the group has no consumer to delete.
                let _: RedisResult<Value> = redis::cmd("XGROUP")
                    .arg("DELCONSUMER")
                    .arg(stream)
                    .arg(keys::GROUP)
                    .arg(&name)
                    .query_async(&mut self.conn.clone())
                    .await;
            }
            let _: i64 = self.conn.clone().hdel(keys::WORKERS, &name).await?;
            forgotten.push(name);
        }
        Ok(forgotten)
    }

    /// What every registered worker last reported. An entry that does not
    /// parse (a worker of another version) is left out.
    pub async fn workers(&self) -> Result<Vec<WorkerInfo>, QueueError> {
        let all: std::collections::HashMap<String, String> = self.conn.clone().hgetall(keys::WORKERS).await?;
        Ok(all.values().filter_map(|info| serde_json::from_str(info).ok()).collect())
    }
}
