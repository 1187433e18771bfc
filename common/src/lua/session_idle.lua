-- session_idle: Busy -> idle after an exec or checkpoint, only on the worker that holds the session; replies 1, or 0 when it was not.
-- KEYS: 1 session hash.
-- ARGV: 1 worker, 2 execs run, 3 the checkpoint it was restored from meanwhile or ''.
--
-- Needs now_ms.lua.
local status, worker = unpack(redis.call('HMGET', KEYS[1], 'status', 'worker'))
if status ~= 'busy' or worker ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'status', 'idle', 'last_used_ms', now_ms())
redis.call('HINCRBY', KEYS[1], 'execs', tonumber(ARGV[2]))
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'restored_from', ARGV[3]) end
return 1
