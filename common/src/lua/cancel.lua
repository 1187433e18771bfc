-- cancel: Cancels a job: a queued one ends at once, a running one is flagged and its worker told; replies 'queued', 'running', 'final' or 'not_found'.
-- KEYS: 1 job hash.
-- ARGV: 1 finished_at, 2 cancelled result (JSON), 3 ttl s, 4 group, 5 done channel, 6 job id, 7 cancel channel, 8 batch prefix, 9 prefix.
--
-- Needs prefix.lua, quota.lua, queue_callback.lua, batch_progress.lua, cancel_queued.lua.
local status = redis.call('HGET', KEYS[1], 'status')
if status == false then return 'not_found' end
if status == 'queued' then
  cancel_queued(KEYS[1], ARGV[6], ARGV[4], ARGV[1], ARGV[2], ARGV[3], ARGV[5], ARGV[8])
  return 'queued'
end
if status == 'running' then
  redis.call('HSET', KEYS[1], 'cancel', '1')
  redis.call('PUBLISH', ARGV[7], ARGV[6])
  return 'running'
end
return 'final'
