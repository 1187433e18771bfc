-- session_prune: Prelude: prune(set, live, now, ttl) drops from `set` (an owner's sessions, or `live`, every live session) those that ended or expired, and ends as expired those idle past their timeout or lifetime, taking each off `live` and its owner's set too.
-- KEYS: none of its own; each session key is PREFIX .. 'session:' .. id, and its owner's set PREFIX .. 'sessions:' .. owner (needs prefix.lua).
-- ARGV: none of its own.
--
-- It ends only sessions whose worker is no longer there to notice (a
-- worker ends its own). A session whose hash is gone has no owner to read:
-- its owner's set loses it when that owner's set is pruned.
local function prune(set, live, now, ttl)
  for _, id in ipairs(redis.call('SMEMBERS', set)) do
    local key = PREFIX .. 'session:' .. id
    local status, owner, last, idle, expires =
      unpack(redis.call('HMGET', key, 'status', 'owner', 'last_used_ms', 'idle_timeout_ms', 'expires_at_ms'))
    local ended = not status or status == 'closed' or status == 'expired' or status == 'lost'
    if not ended and (now > tonumber(last) + tonumber(idle) or now > tonumber(expires)) then
      local reason = now > tonumber(expires) and 'lifetime' or 'idle'
      redis.call('HSET', key, 'status', 'expired', 'ended_reason', reason)
      redis.call('EXPIRE', key, ttl)
      ended = true
    end
    if ended then
      redis.call('SREM', set, id)
      redis.call('SREM', live, id)
      if owner then redis.call('SREM', PREFIX .. 'sessions:' .. owner, id) end
    end
  end
end
