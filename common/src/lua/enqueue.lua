-- enqueue: Enqueues one job unless the queue is full, the owner is over quota or the idempotency key was used; replies 1, 0 (full), -1/-2 (over quota) or the prior job id.
-- KEYS: 1 owner stream, 2 streams set, 3 ready ring, 4 wake list, 5 job hash, 6 idempotency key (only when given).
-- ARGV: 1 the table {cap, id (the job's), owner, language, created_at, idempotency_ttl_s (with KEYS[6] only), callback (absent if none), quota_max_active, quota_per_second, group, wake_tokens, prefix}; then, large and so not escaped again inside the table: 2 payload, 3 signature, 4 compat note or ''.
--
-- Needs prefix.lua, owner_streams.lua, quota.lua.
-- In the table, idempotency_ttl_s is a decimal string, handed to Redis as
-- it is; the numbers it only compares with (cap, quotas, wake_tokens) are
-- numbers.
-- A second use of the idempotency key returns the first job's id and
-- queues nothing. ARGV[4], when not empty, is a compatible API's note,
-- kept in the job hash as `compat` so it lives and expires with the job.
local a = cjson.decode(ARGV[1])
if KEYS[6] then
  local prior = redis.call('GET', KEYS[6])
  if prior then return prior end
end
if depth(KEYS[2]) >= a.cap then return 0 end
local over = over_quota(a.owner, a.quota_max_active, a.quota_per_second, 1)
if over ~= 0 then return over end
count_submission(a.owner, 1)
admit(KEYS[1], KEYS[2], a.group)
local entry = redis.call('XADD', KEYS[1], '*', 'id', a.id, 'payload', ARGV[2], 'sig', ARGV[3])
redis.call('HSET', KEYS[5], 'status', 'queued', 'owner', a.owner, 'language', a.language,
  'created_at', a.created_at, 'stream', KEYS[1], 'entry', entry)
if a.callback then redis.call('HSET', KEYS[5], 'callback', a.callback) end
if ARGV[4] ~= '' then redis.call('HSET', KEYS[5], 'compat', ARGV[4]) end
if KEYS[6] then redis.call('SET', KEYS[6], a.id, 'EX', a.idempotency_ttl_s) end
announce(KEYS[3], KEYS[4], a.owner, 1, a.wake_tokens)
return 1
