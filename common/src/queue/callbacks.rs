//! Callbacks: the scripts that give a job or batch its final status append
//! it to the queue's callback stream when its owner asked for one; the
//! api's deliverers read that stream as one consumer group.

use std::time::Duration;

use redis::Value;

use super::{Queue, QueueError, entry_fields, field};
use crate::keys;

/// A finished job or batch whose owner asked for a callback.
#[derive(Debug, Clone)]
pub struct CallbackDue {
    /// The entry in the queue's callback stream: also the delivery's stable id.
    pub entry: String,
    /// [`CallbackDue::JOB`] or [`CallbackDue::BATCH`].
    pub kind: String,
    pub id: String,
}

impl CallbackDue {
    pub const JOB: &str = "job";
    pub const BATCH: &str = "batch";
}

impl Queue {
    /// Creates the callback stream and its deliverers' group if needed.
    pub async fn ensure_callback_group(&self) -> Result<(), QueueError> {
        self.create_group(&self.keys.callbacks(), keys::CALLBACK_GROUP).await
    }

    /// Callbacks for `consumer` to deliver: up to `count` that another
    /// deliverer left pending longer than `stale` (it died), else new ones,
    /// waiting up to `block` for the first.
    pub async fn due_callbacks(
        &self,
        consumer: &str,
        count: usize,
        block: Duration,
        stale: Duration,
    ) -> Result<Vec<CallbackDue>, QueueError> {
        let reply: Value = redis::cmd("XAUTOCLAIM")
            .arg(self.keys.callbacks())
            .arg(keys::CALLBACK_GROUP)
            .arg(consumer)
            .arg(u64::try_from(stale.as_millis()).unwrap_or(u64::MAX))
            .arg("0-0")
            .arg("COUNT")
            .arg(count)
            .query_async(&mut self.conn.clone())
            .await?;
        if let Value::Array(parts) = reply
            && let Some(Value::Array(entries)) = parts.into_iter().nth(1)
            && !entries.is_empty()
        {
            return Ok(entries.into_iter().filter_map(parse_callback).collect());
        }
        let reply: Value = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(keys::CALLBACK_GROUP)
            .arg(consumer)
            .arg("COUNT")
            .arg(count)
            .arg("BLOCK")
            .arg(u64::try_from(block.as_millis()).unwrap_or(u64::MAX))
            .arg("STREAMS")
            .arg(self.keys.callbacks())
            .arg(">")
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(read_entries(reply).into_iter().filter_map(parse_callback).collect())
    }

    /// Ends a callback's delivery, whether it got through or was given up.
    pub async fn callback_done(&self, entry: &str) -> Result<(), QueueError> {
        let mut pipe = redis::pipe();
        let stream = self.keys.callbacks();
        pipe.cmd("XACK").arg(&stream).arg(keys::CALLBACK_GROUP).arg(entry).ignore();
        pipe.cmd("XDEL").arg(&stream).arg(entry).ignore();
        pipe.query_async::<()>(&mut self.conn.clone()).await?;
        Ok(())
    }

    /// The owner and callback URL of the job or batch a callback is for;
    /// None if it has expired.
    pub async fn callback_target(&self, due: &CallbackDue) -> Result<Option<(String, String)>, QueueError> {
        let key = if due.kind == CallbackDue::BATCH { self.keys.batch(&due.id) } else { self.keys.job(&due.id) };
        let (owner, url): (Option<String>, Option<String>) =
            redis::cmd("HMGET").arg(key).arg("owner").arg("callback").query_async(&mut self.conn.clone()).await?;
        Ok(owner.zip(url))
    }
}

/// The entries of an `XREADGROUP` reply: nil, or
/// `[[stream, [[entry, [field, value, ...]], ...]], ...]`.
fn read_entries(reply: Value) -> Vec<Value> {
    let Value::Array(streams) = reply else { return Vec::new() };
    let mut entries = Vec::new();
    for stream in streams {
        let Value::Array(mut parts) = stream else { continue };
        if let Some(Value::Array(found)) = parts.pop() {
            entries.extend(found);
        }
    }
    entries
}

/// Parses a callback entry, `[entry-id, [kind, k, id, i]]`.
fn parse_callback(value: Value) -> Option<CallbackDue> {
    let (entry, fields) = entry_fields(value)?;
    Some(CallbackDue { entry, kind: field(&fields, "kind")?, id: field(&fields, "id")? })
}
