-- enqueue_batch: Enqueues all n jobs of a batch and its batch hash, or none; replies as enqueue.lua, with the prior batch id for a used idempotency key.
-- KEYS: 1 owner stream, 2 streams set, 3 ready ring, 4 wake list, 5 batch hash, 6 .. 5+n job hashes, 6+n idempotency key (only when given).
-- ARGV: 1 cap, 2 owner, 3 created_at, 4 batch id, 5 job ids (JSON), 6 n, then per job i at 3+4i .. 6+4i: id, payload, signature, language; then 7+4n stop_on_failure '1'/'0', 8+4n idempotency ttl s (0 if none), 9+4n callback or '', 10+4n quota max active, 11+4n quota per second, 12+4n group, 13+4n wake tokens kept, 14+4n prefix.
--
-- Needs prefix.lua, owner_streams.lua, quota.lua.
local n = tonumber(ARGV[6])
local idempotency = KEYS[6 + n]
if idempotency then
  local prior = redis.call('GET', idempotency)
  if prior then return prior end
end
if depth(KEYS[2]) + n > tonumber(ARGV[1]) then return 0 end
local over = over_quota(ARGV[2], ARGV[10 + 4 * n], ARGV[11 + 4 * n], n)
if over ~= 0 then return over end
count_submission(ARGV[2], n)
admit(KEYS[1], KEYS[2], ARGV[12 + 4 * n])
for i = 1, n do
  local at = 6 + (i - 1) * 4
  local entry = redis.call('XADD', KEYS[1], '*', 'id', ARGV[at + 1], 'payload', ARGV[at + 2], 'sig', ARGV[at + 3])
  redis.call('HSET', KEYS[5 + i], 'status', 'queued', 'owner', ARGV[2], 'language', ARGV[at + 4],
    'created_at', ARGV[3], 'stream', KEYS[1], 'entry', entry, 'batch', ARGV[4])
end
redis.call('HSET', KEYS[5], 'owner', ARGV[2], 'created_at', ARGV[3], 'size', n, 'done', 0, 'jobs', ARGV[5],
  'stop_on_failure', ARGV[7 + 4 * n])
if ARGV[9 + 4 * n] ~= '' then redis.call('HSET', KEYS[5], 'callback', ARGV[9 + 4 * n]) end
if idempotency then redis.call('SET', idempotency, ARGV[4], 'EX', ARGV[8 + 4 * n]) end
announce(KEYS[3], KEYS[4], ARGV[2], n, tonumber(ARGV[13 + 4 * n]))
return 1
