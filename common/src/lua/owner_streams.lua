-- owner_streams: Prelude: depth(streams), admit(stream, streams, group) and announce(ready, wake, owner, jobs, keep), which keep the owner streams.
-- KEYS: none of its own; its functions take the keys they touch.
-- ARGV: none of its own.
--
-- `depth` counts queued plus running jobs in every owner stream; `admit`
-- makes sure an owner's stream has the workers' group before jobs go in;
-- `announce` puts the owner in the ready ring, if not there already, and
-- leaves a wake-up token per job (at most `keep` are kept) for workers
-- blocked in `Queue::claim`.
local function depth(streams)
  local n = 0
  for _, stream in ipairs(redis.call('SMEMBERS', streams)) do n = n + redis.call('XLEN', stream) end
  return n
end
local function admit(stream, streams, group)
  if redis.call('SADD', streams, stream) == 1 or redis.call('EXISTS', stream) == 0 then
    redis.pcall('XGROUP', 'CREATE', stream, group, '0', 'MKSTREAM')
  end
end
local function announce(ready, wake, owner, jobs, keep)
  if not redis.call('LPOS', ready, owner) then redis.call('RPUSH', ready, owner) end
  for _ = 1, math.min(jobs, keep) do redis.call('RPUSH', wake, '1') end
  redis.call('LTRIM', wake, -keep, -1)
end
