-- quota: Prelude: over_quota(owner, max_active, per_second, n), count_submission(owner, n) and release_quota(job_key), an owner's quota counters.
-- KEYS: none of its own; it builds PREFIX .. 'active:' .. owner and PREFIX .. 'submissions:' .. owner .. ':' .. second (needs prefix.lua).
-- ARGV: none of its own.
--
-- `over_quota` says whether `n` more jobs would pass the quota (-1 queued
-- plus running, -2 submissions this second), `count_submission` counts
-- them in, and `release_quota` counts a job out when it is final.
local function over_quota(owner, max_active, per_second, n)
  max_active = tonumber(max_active)
  per_second = tonumber(per_second)
  if max_active > 0 and tonumber(redis.call('GET', PREFIX .. 'active:' .. owner) or '0') + n > max_active then
    return -1
  end
  if per_second > 0 then
    local key = PREFIX .. 'submissions:' .. owner .. ':' .. redis.call('TIME')[1]
    if tonumber(redis.call('GET', key) or '0') + 1 > per_second then return -2 end
  end
  return 0
end
local function count_submission(owner, n)
  redis.call('INCRBY', PREFIX .. 'active:' .. owner, n)
  local key = PREFIX .. 'submissions:' .. owner .. ':' .. redis.call('TIME')[1]
  redis.call('INCR', key)
  redis.call('EXPIRE', key, 2)
end
local function release_quota(job_key)
  local owner = redis.call('HGET', job_key, 'owner')
  if owner then
    local key = PREFIX .. 'active:' .. owner
    if redis.call('DECR', key) <= 0 then redis.call('DEL', key) end
  end
end
