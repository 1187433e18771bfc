-- enqueue: Enqueues one job unless the queue is full, the owner is over quota or the idempotency key was used; replies 1, 0 (full), -1/-2 (over quota) or the prior job id.
-- KEYS: 1 owner stream, 2 streams set, 3 ready ring, 4 wake list, 5 job hash, 6 idempotency key (only when given).
-- ARGV: 1 cap, 2 job id, 3 payload, 4 signature, 5 owner, 6 language, 7 created_at, 8 idempotency ttl s (0 if none), 9 callback or '', 10 quota max active, 11 quota per second, 12 group, 13 wake tokens kept, 14 compat note or '', 15 prefix.
--
-- Needs prefix.lua, owner_streams.lua, quota.lua.
-- A second use of the idempotency key returns the first job's id and
-- queues nothing. ARGV[14], when not empty, is a compatible API's note,
-- kept in the job hash as `compat` so it lives and expires with the job.
if KEYS[6] then
  local prior = redis.call('GET', KEYS[6])
  if prior then return prior end
end
if depth(KEYS[2]) >= tonumber(ARGV[1]) then return 0 end
local over = over_quota(ARGV[5], ARGV[10], ARGV[11], 1)
if over ~= 0 then return over end
count_submission(ARGV[5], 1)
admit(KEYS[1], KEYS[2], ARGV[12])
local entry = redis.call('XADD', KEYS[1], '*', 'id', ARGV[2], 'payload', ARGV[3], 'sig', ARGV[4])
redis.call('HSET', KEYS[5], 'status', 'queued', 'owner', ARGV[5], 'language', ARGV[6],
  'created_at', ARGV[7], 'stream', KEYS[1], 'entry', entry)
if ARGV[9] ~= '' then redis.call('HSET', KEYS[5], 'callback', ARGV[9]) end
if ARGV[14] ~= '' then redis.call('HSET', KEYS[5], 'compat', ARGV[14]) end
if KEYS[6] then redis.call('SET', KEYS[6], ARGV[2], 'EX', ARGV[8]) end
announce(KEYS[3], KEYS[4], ARGV[5], 1, tonumber(ARGV[13]))
return 1
