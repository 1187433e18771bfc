-- session_end: Ends a session (closed, expired or lost) unless it has ended already; replies 1 when this call ended it.
-- KEYS: 1 session hash, 2 owner's session set, 3 every live session (a set).
-- ARGV: 1 final status, 2 reason, 3 ttl s, 4 worker or '' (a worker ends only a session it holds).
local status, worker = unpack(redis.call('HMGET', KEYS[1], 'status', 'worker'))
if not status or status == 'closed' or status == 'expired' or status == 'lost' then return 0 end
if ARGV[4] ~= '' and worker ~= ARGV[4] then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'ended_reason', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
local id = string.match(KEYS[1], '[^:]+$')
redis.call('SREM', KEYS[2], id)
redis.call('SREM', KEYS[3], id)
return 1
