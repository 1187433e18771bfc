//! Records of the E2B-compatible API's sandboxes. A sandbox is a few
//! sessions under one id; its record is JSON the api's adapter shapes, kept
//! here as text, with the set of each owner's sandboxes beside it.

use std::time::Duration;

use redis::AsyncCommands;

use super::{Queue, QueueError};

impl Queue {
    /// Stores sandbox `id` of `owner` as `record`, kept for `ttl`.
    pub async fn put_e2b_sandbox(&self, id: &str, owner: &str, record: &str, ttl: Duration) -> Result<(), QueueError> {
        let owned = self.keys.e2b_sandboxes(owner);
        let _: () = redis::pipe()
            .set_ex(self.keys.e2b_sandbox(id), record, ttl.as_secs().max(1))
            .sadd(&owned, id)
            .ignore()
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    /// Sandbox `id`'s record, or None once deleted or expired.
    pub async fn e2b_sandbox(&self, id: &str) -> Result<Option<String>, QueueError> {
        Ok(self.conn.clone().get(self.keys.e2b_sandbox(id)).await?)
    }

    /// The records of `owner`'s sandboxes; the ids of expired ones are
    /// dropped from the set on the way.
    pub async fn owner_e2b_sandboxes(&self, owner: &str) -> Result<Vec<String>, QueueError> {
        let owned = self.keys.e2b_sandboxes(owner);
        let ids: Vec<String> = self.conn.clone().smembers(&owned).await?;
        let mut records = Vec::with_capacity(ids.len());
        for id in ids {
            match self.e2b_sandbox(&id).await? {
                Some(record) => records.push(record),
                None => {
                    let _: i64 = self.conn.clone().srem(&owned, &id).await?;
                }
            }
        }
        Ok(records)
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
