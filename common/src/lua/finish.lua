-- finish: Writes a job's final status and result (the first final write wins), sets its TTL, acks and deletes its entry and publishes its id; replies write ms.
-- KEYS: 1 job hash, 2 the job's stream.
-- ARGV: 1 status, 2 result (JSON), 3 finished_at, 4 ttl s, 5 group, 6 entry id, 7 done channel, 8 job id, 9 boot ms, 10 child's end (Unix ms), 11 verdict or '', 12 batch prefix, 13 failed '1'/'0', 14 job prefix, 15 cancelled result (JSON), 16 prefix.
--
-- Needs prefix.lua, now_ms.lua, quota.lua, queue_callback.lua,
-- batch_progress.lua, cancel_queued.lua, stop_batch.lua.
-- Writes the final status only over queued/running, so a second delivery's
-- write, or a write racing a cancel, cannot change a finished job. A job
-- hash that does not exist (a forged entry) is created so the rejection is
-- visible.
local status = redis.call('HGET', KEYS[1], 'status')
local write_ms = math.max(0, now_ms() - tonumber(ARGV[10]))
if status == false or status == 'queued' or status == 'running' then
  redis.call('HSET', KEYS[1], 'status', ARGV[1], 'result', ARGV[2], 'finished_at', ARGV[3],
    'boot_ms', ARGV[9], 'write_ms', write_ms)
  if ARGV[11] ~= '' then redis.call('HSET', KEYS[1], 'verdict', ARGV[11]) end
  redis.call('HDEL', KEYS[1], 'cancel')
  release_quota(KEYS[1])
  queue_callback(KEYS[1], 'job', ARGV[8])
  local batch_key = batch_progress(KEYS[1], ARGV[12], ARGV[4], ARGV[7])
  if batch_key and ARGV[13] == '1' then
    stop_batch(batch_key, ARGV[12], ARGV[14], ARGV[5], ARGV[3], ARGV[15], ARGV[4], ARGV[7])
  end
end
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('XACK', KEYS[2], ARGV[5], ARGV[6])
redis.call('XDEL', KEYS[2], ARGV[6])
redis.call('PUBLISH', ARGV[7], ARGV[8])
return write_ms
