-- session_recover: For a session whose worker died: `restoring` from its latest checkpoint still stored, or `lost`; replies 'restore:<id>', 'lost' or 'changed'.
-- KEYS: 1 session hash, 2 owner's session set, 3 every live session (a set).
-- ARGV: 1 the table {dead (the worker that died), ttl_s (a decimal string), prefix}, a table because prefix.lua reads its prefix from one.
--
-- Needs prefix.lua; each checkpoint key is PREFIX .. 'checkpoint:' .. id.
local a = cjson.decode(ARGV[1])
local status, worker, checkpoints = unpack(redis.call('HMGET', KEYS[1], 'status', 'worker', 'checkpoints'))
if not status or worker ~= a.dead or status == 'closed' or status == 'expired' or status == 'lost' then
  return 'changed'
end
local list = cjson.decode(checkpoints or '[]')
local now = redis.call('TIME')[1]
for i = #list, 1, -1 do
  if redis.call('EXISTS', PREFIX .. 'checkpoint:' .. list[i].id) == 1 then
    redis.call('HSET', KEYS[1], 'status', 'restoring', 'worker', '')
    return 'restore:' .. list[i].id
  end
end
redis.call('HSET', KEYS[1], 'status', 'lost', 'ended_reason', 'its worker stopped and it had no checkpoint')
redis.call('EXPIRE', KEYS[1], a.ttl_s)
local id = string.match(KEYS[1], '[^:]+$')
redis.call('SREM', KEYS[2], id)
redis.call('SREM', KEYS[3], id)
return 'lost'
