-- start: Marks a job running on a worker unless it was cancelled or is final; replies the ms it waited in the queue, or -1 when it must not run.
-- KEYS: 1 job hash.
-- ARGV: 1 worker, 2 started_at, 3 stream entry id (starts with the enqueue time in ms).
--
-- Needs now_ms.lua. A job already `running` may start again: that is a
-- takeover of an entry whose worker died.
local status = redis.call('HGET', KEYS[1], 'status')
if (status == 'queued' or status == 'running') and redis.call('HGET', KEYS[1], 'cancel') ~= '1' then
  local queued_ms = math.max(0, now_ms() - tonumber(string.match(ARGV[3], '^(%d+)')))
  redis.call('HSET', KEYS[1], 'status', 'running', 'worker', ARGV[1], 'started_at', ARGV[2], 'queue_ms', queued_ms)
  return queued_ms
end
return -1
