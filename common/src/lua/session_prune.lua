-- session_prune: Prelude: prune(owner_set, now, ttl) drops an owner's ended or expired sessions from its set and ends as expired those idle past their timeout or lifetime.
-- KEYS: none of its own; each session key is PREFIX .. 'session:' .. id (needs prefix.lua).
-- ARGV: none of its own.
--
-- It ends only sessions whose worker is no longer there to notice (a
-- worker ends its own).
local function prune(owner_set, now, ttl)
  for _, id in ipairs(redis.call('SMEMBERS', owner_set)) do
    local key = PREFIX .. 'session:' .. id
    local status, last, idle, expires = unpack(redis.call('HMGET', key, 'status', 'last_used_ms', 'idle_timeout_ms', 'expires_at_ms'))
    if not status or status == 'closed' or status == 'expired' or status == 'lost' then
      redis.call('SREM', owner_set, id)
    elseif now > tonumber(last) + tonumber(idle) or now > tonumber(expires) then
      local reason = now > tonumber(expires) and 'lifetime' or 'idle'
      redis.call('HSET', key, 'status', 'expired', 'ended_reason', reason)
      redis.call('EXPIRE', key, ttl)
      redis.call('SREM', owner_set, id)
    end
  end
end
