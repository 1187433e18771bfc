-- start: Marks a job running on a worker unless it was cancelled or is final; replies the ms it waited in the queue, or -1 when it must not run.
-- KEYS: 1 job hash.
-- ARGV: 1 worker, 2 started_at, 3 stream entry id (starts with the enqueue time in ms), or '' for a
-- session's task from its worker's inbox, whose hash holds when it was sent (sent_ms).
--
-- Needs now_ms.lua. A job already `running` may start again: that is a
-- takeover of an entry whose worker died.
local status = redis.call('HGET', KEYS[1], 'status')
if (status == 'queued' or status == 'running') and redis.call('HGET', KEYS[1], 'cancel') ~= '1' then
  local since = tonumber(string.match(ARGV[3], '^(%d+)') or redis.call('HGET', KEYS[1], 'sent_ms') or '')
  local queued_ms = math.max(0, now_ms() - (since or now_ms()))
  redis.call('HSET', KEYS[1], 'status', 'running', 'worker', ARGV[1], 'started_at', ARGV[2], 'queue_ms', queued_ms)
  return queued_ms
end
return -1
