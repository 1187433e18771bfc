-- cancel_queued: Prelude: cancel_queued(job_key, id, group, finished_at, result, ttl, channel, batch_prefix) ends a queued job as cancelled: it never runs.
-- KEYS: none of its own; the stream and entry come from the job hash (needs quota.lua, queue_callback.lua, batch_progress.lua).
-- ARGV: none of its own.
--
-- Shared by a cancel request and by a batch that stops on its first failure.
local function cancel_queued(job_key, id, group, finished_at, result, ttl, channel, batch_prefix)
  local stream, entry = unpack(redis.call('HMGET', job_key, 'stream', 'entry'))
  redis.call('HSET', job_key, 'status', 'cancelled', 'finished_at', finished_at, 'result', result)
  redis.call('EXPIRE', job_key, ttl)
  release_quota(job_key)
  if stream and entry then
    redis.call('XACK', stream, group, entry)
    redis.call('XDEL', stream, entry)
  end
  redis.call('PUBLISH', channel, id)
  queue_callback(job_key, 'job', id)
  batch_progress(job_key, batch_prefix, ttl, channel)
end
