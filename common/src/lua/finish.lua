-- finish: Writes a job's final status and result (the first final write wins), sets its TTL, acks and deletes its entry and publishes its id; replies write ms.
-- KEYS: 1 job hash, 2 the job's stream (absent for a session's task, from an inbox).
-- ARGV: 1 the table {status, finished_at, ttl_s, group, entry (its stream entry id; absent for a session's task), done_channel, id (the job's), boot_ms, ended_ms (the child's end, Unix ms), verdict (absent if none), batch_prefix, failed (boolean), job_prefix, prefix}; then, already JSON and so not escaped again inside the table: 2 result, 3 cancelled result.
--
-- Needs prefix.lua, now_ms.lua, quota.lua, queue_callback.lua,
-- batch_progress.lua, cancel_queued.lua, stop_batch.lua.
-- In the table, ttl_s and boot_ms are decimal strings, handed to Redis as
-- they are; ended_ms, only computed with, is a number.
-- Writes the final status only over queued/running, so a second delivery's
-- write, or a write racing a cancel, cannot change a finished job. A job
-- hash that does not exist (a forged entry) is created so the rejection is
-- visible.
local a = cjson.decode(ARGV[1])
local status = redis.call('HGET', KEYS[1], 'status')
local write_ms = math.max(0, now_ms() - a.ended_ms)
if status == false or status == 'queued' or status == 'running' then
  redis.call('HSET', KEYS[1], 'status', a.status, 'result', ARGV[2], 'finished_at', a.finished_at,
    'boot_ms', a.boot_ms, 'write_ms', write_ms)
  if a.verdict then redis.call('HSET', KEYS[1], 'verdict', a.verdict) end
  redis.call('HDEL', KEYS[1], 'cancel')
  release_quota(KEYS[1])
  queue_callback(KEYS[1], 'job', a.id)
  local batch_key = batch_progress(KEYS[1], a.batch_prefix, a.ttl_s, a.done_channel)
  if batch_key and a.failed then
    stop_batch(batch_key, a.batch_prefix, a.job_prefix, a.group, a.finished_at, ARGV[3], a.ttl_s, a.done_channel)
  end
end
redis.call('EXPIRE', KEYS[1], a.ttl_s)
if a.entry then
  redis.call('XACK', KEYS[2], a.group, a.entry)
  redis.call('XDEL', KEYS[2], a.entry)
end
redis.call('PUBLISH', a.done_channel, a.id)
return write_ms
