-- session_send: Writes a session job and pushes it onto its worker's inbox, idle -> busy when the task needs it; replies 'sent', 'busy', 'moved' or 'gone'.
-- KEYS: 1 session hash, 2 job hash, 3 the worker's inbox.
-- ARGV: 1 expected worker, 2 job id, 3 owner, 4 language, 5 payload, 6 signature, 7 created_at, 8 needs the session idle '1'/'0' (a destroy does not).
--
-- Needs now_ms.lua.
local status, worker = unpack(redis.call('HMGET', KEYS[1], 'status', 'worker'))
if not status or status == 'closed' or status == 'expired' or status == 'lost' then return 'gone' end
if worker ~= ARGV[1] then return 'moved' end
if ARGV[8] == '1' then
  if status ~= 'idle' then return 'busy' end
  redis.call('HSET', KEYS[1], 'status', 'busy', 'last_used_ms', now_ms())
end
redis.call('HSET', KEYS[2], 'status', 'queued', 'owner', ARGV[3], 'language', ARGV[4], 'created_at', ARGV[7],
  'payload', ARGV[5], 'sig', ARGV[6], 'session', string.match(KEYS[1], '[^:]+$'))
redis.call('LPUSH', KEYS[3], ARGV[2])
return 'sent'
