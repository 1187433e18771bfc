-- batch_progress: Prelude: batch_progress(job_key, prefix, ttl, channel) counts a job that just reached its final status in its batch, if any; returns the batch key.
-- KEYS: none of its own; the batch key is the batch prefix plus the job hash's `batch` (needs queue_callback.lua).
-- ARGV: none of its own.
local function batch_progress(job_key, prefix, ttl, channel)
  local batch = redis.call('HGET', job_key, 'batch')
  if not batch then return nil end
  local key = prefix .. batch
  local done = redis.call('HINCRBY', key, 'done', 1)
  local size = tonumber(redis.call('HGET', key, 'size') or '0')
  if done >= size then redis.call('EXPIRE', key, ttl) end
  if done == size then queue_callback(key, 'batch', batch) end
  redis.call('PUBLISH', channel, batch)
  return key
end
