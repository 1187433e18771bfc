-- session_create: Creates a session, `starting`, unless its owner already holds the per-token cap of live sessions; replies 1, or 0 when over the cap.
-- KEYS: 1 session hash, 2 owner's session set.
-- ARGV: 1 owner, 2 language, 3 idle timeout ms, 4 expires at (Unix ms), 5 created_at, 6 per-token cap (0: none), 7 result ttl s, 8 prefix.
--
-- Needs prefix.lua, now_ms.lua, session_prune.lua.
local now = now_ms()
prune(KEYS[2], now, ARGV[7])
if tonumber(ARGV[6]) > 0 and redis.call('SCARD', KEYS[2]) >= tonumber(ARGV[6]) then return 0 end
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'language', ARGV[2], 'status', 'starting', 'worker', '',
  'created_at', ARGV[5], 'last_used_ms', now, 'idle_timeout_ms', ARGV[3], 'expires_at_ms', ARGV[4],
  'execs', 0, 'checkpoints', '[]')
-- Gone by itself at the latest a result TTL after its lifetime ends, even
-- if no worker or caller is left to end it.
redis.call('EXPIRE', KEYS[1], math.ceil((tonumber(ARGV[4]) - now) / 1000) + tonumber(ARGV[7]))
redis.call('SADD', KEYS[2], string.match(KEYS[1], '[^:]+$'))
return 1
