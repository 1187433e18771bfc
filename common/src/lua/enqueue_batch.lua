-- enqueue_batch: Enqueues all n jobs of a batch and its batch hash, or none; replies as enqueue.lua, with the prior batch id for a used idempotency key.
-- KEYS: 1 owner stream, 2 streams set, 3 ready ring, 4 wake list, 5 batch hash, 6 .. 5+n job hashes, 6+n idempotency key (only when given).
-- ARGV: 1 the table {cap, owner, created_at, batch_id, stop_on_failure (boolean), idempotency_ttl_s (with the key only), callback (absent if none), quota_max_active, quota_per_second, group, wake_tokens, prefix}; then, large and so not in the table, which prefix.lua decodes too: 2 the jobs, a JSON array of {id, language, payload, signature}, the i-th for job hash KEYS[5+i]; 3 their ids, a JSON array, stored as it is as the batch's `jobs`.
--
-- Needs prefix.lua, owner_streams.lua, quota.lua.
-- In the table, idempotency_ttl_s is a decimal string, handed to Redis as
-- it is; the numbers it only compares with (cap, quotas, wake_tokens) are
-- numbers.
local a = cjson.decode(ARGV[1])
local jobs = cjson.decode(ARGV[2])
local n = #jobs
local idempotency = KEYS[6 + n]
if idempotency then
  local prior = redis.call('GET', idempotency)
  if prior then return prior end
end
if depth(KEYS[2]) + n > a.cap then return 0 end
local over = over_quota(a.owner, a.quota_max_active, a.quota_per_second, n)
if over ~= 0 then return over end
count_submission(a.owner, n)
admit(KEYS[1], KEYS[2], a.group)
for i, job in ipairs(jobs) do
  local entry = redis.call('XADD', KEYS[1], '*', 'id', job.id, 'payload', job.payload, 'sig', job.signature)
  redis.call('HSET', KEYS[5 + i], 'status', 'queued', 'owner', a.owner, 'language', job.language,
    'created_at', a.created_at, 'stream', KEYS[1], 'entry', entry, 'batch', a.batch_id)
end
redis.call('HSET', KEYS[5], 'owner', a.owner, 'created_at', a.created_at, 'size', n, 'done', 0, 'jobs', ARGV[3],
  'stop_on_failure', a.stop_on_failure and '1' or '0')
if a.callback then redis.call('HSET', KEYS[5], 'callback', a.callback) end
if idempotency then redis.call('SET', idempotency, a.batch_id, 'EX', a.idempotency_ttl_s) end
announce(KEYS[3], KEYS[4], a.owner, n, a.wake_tokens)
return 1
