-- session_create: Creates a session, `starting`, unless its owner already holds its share of live sessions or the fleet's session places are all taken; replies 1, 0 when over the owner's share, -1 when the fleet is full.
-- KEYS: 1 session hash, 2 owner's session set, 3 every live session (a set).
-- ARGV: 1 the table {owner, language, idle_timeout_ms, expires_at_ms (Unix ms), created_at, per_token (the owner's share, 0: none), capacity (the fleet's session places), ttl_s (the result TTL), prefix}.
--
-- Needs prefix.lua, now_ms.lua, session_prune.lua.
-- In the table, idle_timeout_ms, expires_at_ms and ttl_s are decimal
-- strings, handed to Redis as they are; per_token and capacity are numbers.
-- Sessions restored after their worker died are counted but not admitted
-- here (they were live already), so the count may pass the capacity for
-- a while after a worker is lost.
local a = cjson.decode(ARGV[1])
local now = now_ms()
prune(KEYS[2], KEYS[3], now, a.ttl_s)
prune(KEYS[3], KEYS[3], now, a.ttl_s)
if a.per_token > 0 and redis.call('SCARD', KEYS[2]) >= a.per_token then return 0 end
if redis.call('SCARD', KEYS[3]) >= a.capacity then return -1 end
redis.call('HSET', KEYS[1], 'owner', a.owner, 'language', a.language, 'status', 'starting', 'worker', '',
  'created_at', a.created_at, 'last_used_ms', now, 'idle_timeout_ms', a.idle_timeout_ms,
  'expires_at_ms', a.expires_at_ms, 'execs', 0, 'checkpoints', '[]')
-- Gone by itself at the latest a result TTL after its lifetime ends, even
-- if no worker or caller is left to end it.
redis.call('EXPIRE', KEYS[1], math.ceil((tonumber(a.expires_at_ms) - now) / 1000) + tonumber(a.ttl_s))
local id = string.match(KEYS[1], '[^:]+$')
redis.call('SADD', KEYS[2], id)
redis.call('SADD', KEYS[3], id)
return 1
