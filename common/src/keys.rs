//! Every Redis key and channel runbox uses, one function or constant each.
//! Nothing else in the workspace spells a key.
//!
//! Every key of one queue starts with `runbox:{queue}:`, whose braces are a
//! Redis Cluster hash tag: all of a queue's keys live in one slot, so each
//! Lua script, which touches many of them at once, runs on a cluster too.
//! A cluster spreads queues over its nodes, not one queue.

/// The consumer group every worker reads the job streams through.
pub const GROUP: &str = "workers";

/// Pub/sub channel carrying the id of each job as it reaches a final status.
pub const DONE_CHANNEL: &str = "runbox:done";

/// Pub/sub channel carrying the id of each running job whose live output
/// grew (see `live.rs`).
pub const OUTPUT_CHANNEL: &str = "runbox:output";

/// Pub/sub channel carrying the id of each running job to cancel.
pub const CANCEL_CHANNEL: &str = "runbox:cancel";

/// Hash of live workers: consumer name → JSON [`crate::WorkerInfo`].
pub const WORKERS: &str = "runbox:workers";

/// The consumer group api processes deliver callbacks through.
pub const CALLBACK_GROUP: &str = "deliverers";

/// The keys of one queue.
#[derive(Debug, Clone)]
pub struct QueueKeys {
    /// `runbox:{queue}:`, the start of every key below. Lua scripts get it
    /// as their last argument and build the keys they find on the way
    /// (a job's batch, an owner's quota counters) from it.
    pub prefix: String,
}

impl QueueKeys {
    pub fn new(queue: &str) -> QueueKeys {
        QueueKeys { prefix: format!("runbox:{{{queue}}}:") }
    }

    /// Prefix of each owner's job stream; Lua scripts append the owner.
    /// Every owner (api token name) has its own stream of jobs waiting for,
    /// or held by, a worker, so that workers can take turns between owners.
    /// Entries are deleted once their result is written, so the streams'
    /// lengths add up to the queue depth (queued plus running).
    pub fn jobs_stream_prefix(&self) -> String {
        format!("{}jobs:", self.prefix)
    }

    /// The job stream of `owner`.
    pub fn jobs_stream(&self, owner: &str) -> String {
        format!("{}{owner}", self.jobs_stream_prefix())
    }

    /// Set of every owner stream that may hold entries: what the depth,
    /// takeover and clean-up go through.
    pub fn streams(&self) -> String {
        format!("{}streams", self.prefix)
    }

    /// List of the owners with jobs no worker has claimed yet, in the order
    /// workers take their turns (see `Queue::claim`).
    pub fn ready_owners(&self) -> String {
        format!("{}ready", self.prefix)
    }

    /// List an enqueue pushes a token onto, to wake a worker blocked on it.
    pub fn wake(&self) -> String {
        format!("{}wake", self.prefix)
    }

    /// Prefix of every job hash; Lua scripts append a job id to it.
    pub fn job_prefix(&self) -> String {
        format!("{}job:", self.prefix)
    }

    /// The hash holding one job's spec, status and result.
    pub fn job(&self, id: &str) -> String {
        format!("{}{id}", self.job_prefix())
    }

    /// Prefix of every batch hash; Lua scripts append a batch id to it.
    pub fn batch_prefix(&self) -> String {
        format!("{}batch:", self.prefix)
    }

    /// The hash holding one batch: owner, size, how many jobs are done, job ids.
    pub fn batch(&self, id: &str) -> String {
        format!("{}{id}", self.batch_prefix())
    }

    /// Remembers which job or batch (`kind`) an `Idempotency-Key` of
    /// `owner` created.
    pub fn idempotency(&self, kind: &str, owner: &str, key: &str) -> String {
        format!("{}idempotency:{kind}:{owner}:{key}", self.prefix)
    }

    /// The stream of finished jobs and batches whose owner asked for a
    /// callback; the api delivers them. Lua scripts spell it as the prefix
    /// plus `callbacks`.
    pub fn callbacks(&self) -> String {
        format!("{}callbacks", self.prefix)
    }

    /// The stream of what job `id` wrote so far, in chunks, while it runs
    /// (see `live.rs`).
    pub fn output(&self, id: &str) -> String {
        format!("{}output:{id}", self.prefix)
    }

    /// The hash of one session: owner, status, the worker holding it, its
    /// checkpoints. Lua scripts spell it as the prefix plus `session:{id}`.
    pub fn session(&self, id: &str) -> String {
        format!("{}session:{id}", self.prefix)
    }

    /// Set of the live sessions of `owner`: what the per-token cap counts.
    pub fn owner_sessions(&self, owner: &str) -> String {
        format!("{}sessions:{owner}", self.prefix)
    }

    /// Set of every live session, whoever owns it: what the fleet's session
    /// capacity counts. Lua scripts spell it as the prefix plus `live-sessions`.
    pub fn live_sessions(&self) -> String {
        format!("{}live-sessions", self.prefix)
    }

    /// The stream of sessions' start jobs (group [`GROUP`]): a worker reads
    /// it only while it has a session place free, so a session never takes
    /// a job slot, and a start whose worker died is taken over like a job.
    pub fn session_starts(&self) -> String {
        format!("{}session-starts", self.prefix)
    }

    /// List of session job ids for the sessions `worker` holds: only that
    /// worker reads it.
    pub fn inbox(&self, worker: &str) -> String {
        format!("{}inbox:{worker}", self.prefix)
    }

    /// The hash of one checkpoint: its compressed data, owner, language and
    /// session. Lua scripts spell it as the prefix plus `checkpoint:{id}`.
    pub fn checkpoint(&self, id: &str) -> String {
        format!("{}checkpoint:{id}", self.prefix)
    }

    /// One sandbox of the E2B-compatible API, as JSON the api's adapter
    /// shapes: which sessions it is made of, its tokens, its deadline.
    pub fn e2b_sandbox(&self, id: &str) -> String {
        format!("{}e2b-sandbox:{id}", self.prefix)
    }

    /// Set of the E2B sandbox ids of `owner`, for listing.
    pub fn e2b_sandboxes(&self, owner: &str) -> String {
        format!("{}e2b-sandboxes:{owner}", self.prefix)
    }
}

// Spelled by Lua scripts from the prefix, owner and second (see the
// `lua/quota.lua` script prelude): `active:{owner}`, each owner's
// count of queued plus running jobs, and `submissions:{owner}:{second}`,
// its per-second submission counters.

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_a_queue_shares_its_hash_tag() {
        let keys = QueueKeys::new("eval");
        for key in [
            keys.jobs_stream("alice"),
            keys.streams(),
            keys.ready_owners(),
            keys.wake(),
            keys.job("j"),
            keys.batch("b"),
            keys.idempotency("job", "alice", "k"),
            keys.callbacks(),
            keys.output("j"),
            keys.session("s"),
            keys.owner_sessions("alice"),
            keys.live_sessions(),
            keys.session_starts(),
            keys.inbox("w"),
            keys.checkpoint("c"),
        ] {
            assert!(key.starts_with("runbox:{eval}:"), "{key}");
        }
    }
}
