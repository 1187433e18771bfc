-- session_ready: Starting/restoring -> idle on the worker whose child is up; replies 1, or 0 when it was not waiting for one.
-- KEYS: 1 session hash.
-- ARGV: 1 worker, 2 restored-from checkpoint or ''.
--
-- Needs now_ms.lua.
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= 'starting' and status ~= 'restoring' then return 0 end
redis.call('HSET', KEYS[1], 'status', 'idle', 'worker', ARGV[1], 'last_used_ms', now_ms())
if ARGV[2] ~= '' then redis.call('HSET', KEYS[1], 'restored_from', ARGV[2]) end
return 1
