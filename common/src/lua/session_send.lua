-- session_send: Writes a session job and pushes it onto its worker's inbox, idle -> busy when the task needs it; replies 'sent', 'busy', 'moved' or 'gone'.
-- KEYS: 1 session hash, 2 job hash, 3 the worker's inbox.
-- ARGV: 1 the table {worker (the one expected to hold it), id (the job's), owner, language, created_at, needs_idle (boolean; a destroy does not)}; then, large and so not escaped again inside the table: 2 payload, 3 signature.
--
-- Needs now_ms.lua.
local a = cjson.decode(ARGV[1])
local status, worker = unpack(redis.call('HMGET', KEYS[1], 'status', 'worker'))
if not status or status == 'closed' or status == 'expired' or status == 'lost' then return 'gone' end
if worker ~= a.worker then return 'moved' end
if a.needs_idle then
  if status ~= 'idle' then return 'busy' end
  redis.call('HSET', KEYS[1], 'status', 'busy', 'last_used_ms', now_ms())
end
redis.call('HSET', KEYS[2], 'status', 'queued', 'owner', a.owner, 'language', a.language, 'created_at', a.created_at,
  'payload', ARGV[2], 'sig', ARGV[3], 'session', string.match(KEYS[1], '[^:]+$'), 'sent_ms', now_ms())
redis.call('LPUSH', KEYS[3], a.id)
return 'sent'
