-- stop_batch: Prelude: stop_batch(key, batch_prefix, job_prefix, group, finished_at, result, ttl, channel) cancels every job still queued of a batch that stops on its first failure.
-- KEYS: none of its own; job keys are the job prefix plus each id in the batch's `jobs` (needs cancel_queued.lua).
-- ARGV: none of its own.
--
-- Run after a failed job of such a batch.
local function stop_batch(key, batch_prefix, job_prefix, group, finished_at, result, ttl, channel)
  if redis.call('HGET', key, 'stop_on_failure') ~= '1' then return end
  for _, id in ipairs(cjson.decode(redis.call('HGET', key, 'jobs'))) do
    local job_key = job_prefix .. id
    if redis.call('HGET', job_key, 'status') == 'queued' then
      cancel_queued(job_key, id, group, finished_at, result, ttl, channel, batch_prefix)
    end
  end
end
