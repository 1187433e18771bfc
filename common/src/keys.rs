//! Every Redis key and channel runbox uses, one function or constant each.
//! Nothing else in the workspace spells a key.

/// The consumer group every worker reads the job stream through.
pub const GROUP: &str = "workers";

/// Pub/sub channel carrying the id of each job as it reaches a final status.
pub const DONE_CHANNEL: &str = "runbox:done";

/// Pub/sub channel carrying the id of each running job to cancel.
pub const CANCEL_CHANNEL: &str = "runbox:cancel";

/// Hash of live workers: consumer name → JSON [`crate::WorkerInfo`].
pub const WORKERS: &str = "runbox:workers";

/// Prefix of each owner's job stream in `queue`; Lua scripts append the
/// owner. Every owner (api token name) has its own stream of jobs waiting
/// for, or held by, a worker, so that workers can take turns between
/// owners. Entries are deleted once their result is written, so the
/// streams' lengths add up to the queue depth (queued plus running).
pub fn jobs_stream_prefix(queue: &str) -> String {
    format!("runbox:{queue}:jobs:")
}

/// The job stream of `owner` in `queue`.
pub fn jobs_stream(queue: &str, owner: &str) -> String {
    format!("{}{owner}", jobs_stream_prefix(queue))
}

/// Set of every owner stream in `queue` that may hold entries: what the
/// depth, takeover and clean-up go through.
pub fn streams(queue: &str) -> String {
    format!("runbox:{queue}:streams")
}

/// List of the owners in `queue` with jobs no worker has claimed yet, in
/// the order workers take their turns (see `Queue::claim`).
pub fn ready_owners(queue: &str) -> String {
    format!("runbox:{queue}:ready")
}

/// List an enqueue pushes a token onto, to wake a worker blocked on it.
pub fn wake(queue: &str) -> String {
    format!("runbox:{queue}:wake")
}

/// Prefix of every job hash; Lua scripts append a job id to it.
pub const JOB_PREFIX: &str = "runbox:job:";

/// The hash holding one job's spec, status and result.
pub fn job(id: &str) -> String {
    format!("{JOB_PREFIX}{id}")
}

/// Prefix of every batch hash; Lua scripts append a batch id to it.
pub const BATCH_PREFIX: &str = "runbox:batch:";

/// The hash holding one batch: owner, size, how many jobs are done, job ids.
pub fn batch(id: &str) -> String {
    format!("{BATCH_PREFIX}{id}")
}

/// Remembers which job or batch (`kind`) an `Idempotency-Key` of `owner`
/// created.
pub fn idempotency(kind: &str, owner: &str, key: &str) -> String {
    format!("runbox:idempotency:{kind}:{owner}:{key}")
}

/// The stream of finished jobs and batches whose owner asked for a
/// callback; the api delivers them. Lua scripts spell it through
/// [`crate::queue`]'s script prelude.
pub const CALLBACKS: &str = "runbox:callbacks";

/// The consumer group api processes deliver callbacks through.
pub const CALLBACK_GROUP: &str = "deliverers";

/// Prefix of each owner's count of queued plus running jobs, for its quota;
/// Lua scripts append the owner.
pub const ACTIVE_PREFIX: &str = "runbox:active:";

/// Prefix of each owner's per-second submission counters; Lua scripts
/// append the owner, ":" and the second.
pub const SUBMISSIONS_PREFIX: &str = "runbox:submissions:";
