-- session_create: Creates a session, `starting`, unless its owner already holds the per-token cap of live sessions; replies 1, or 0 when over the cap.
-- KEYS: 1 session hash, 2 owner's session set.
-- ARGV: 1 the table {owner, language, idle_timeout_ms, expires_at_ms (Unix ms), created_at, per_token (the cap, 0: none), ttl_s (the result TTL), prefix}.
--
-- Needs prefix.lua, now_ms.lua, session_prune.lua.
-- In the table, idle_timeout_ms, expires_at_ms and ttl_s are decimal
-- strings, handed to Redis as they are; per_token is a number.
local a = cjson.decode(ARGV[1])
local now = now_ms()
prune(KEYS[2], now, a.ttl_s)
if a.per_token > 0 and redis.call('SCARD', KEYS[2]) >= a.per_token then return 0 end
redis.call('HSET', KEYS[1], 'owner', a.owner, 'language', a.language, 'status', 'starting', 'worker', '',
  'created_at', a.created_at, 'last_used_ms', now, 'idle_timeout_ms', a.idle_timeout_ms,
  'expires_at_ms', a.expires_at_ms, 'execs', 0, 'checkpoints', '[]')
-- Gone by itself at the latest a result TTL after its lifetime ends, even
-- if no worker or caller is left to end it.
redis.call('EXPIRE', KEYS[1], math.ceil((tonumber(a.expires_at_ms) - now) / 1000) + tonumber(a.ttl_s))
redis.call('SADD', KEYS[2], string.match(KEYS[1], '[^:]+$'))
return 1
