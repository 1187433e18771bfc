-- cancel: Cancels a job: a queued one ends at once, a running one is flagged and its worker told; replies 'queued', 'running', 'final' or 'not_found'.
-- KEYS: 1 job hash.
-- ARGV: 1 the table {finished_at, ttl_s (a decimal string), group, done_channel, id (the job's), cancel_channel, batch_prefix, prefix}; then, already JSON and so not escaped again inside the table: 2 cancelled result.
--
-- Needs prefix.lua, quota.lua, queue_callback.lua, batch_progress.lua, cancel_queued.lua.
local a = cjson.decode(ARGV[1])
local status = redis.call('HGET', KEYS[1], 'status')
if status == false then return 'not_found' end
if status == 'queued' then
  cancel_queued(KEYS[1], a.id, a.group, a.finished_at, ARGV[2], a.ttl_s, a.done_channel, a.batch_prefix)
  return 'queued'
end
if status == 'running' then
  redis.call('HSET', KEYS[1], 'cancel', '1')
  redis.call('PUBLISH', a.cancel_channel, a.id)
  return 'running'
end
return 'final'
