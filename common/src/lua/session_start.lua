-- session_start: Enqueues a session's start job on the session-starts stream, which workers read only with a session place free, unless its owner is over its job quota; replies 1, or -1/-2 (over quota, as enqueue).
-- KEYS: 1 session-starts stream, 2 job hash.
-- ARGV: 1 the table {id (the job's), owner, language, created_at, quota_max_active, quota_per_second, group, prefix}; then, large and so not escaped again inside the table: 2 payload, 3 signature.
--
-- Needs prefix.lua, quota.lua.
-- Not counted in the queue's depth: a start waits for a session place,
-- never a job slot, and the session's admission (session_create) already
-- checked that the fleet has one.
local a = cjson.decode(ARGV[1])
local over = over_quota(a.owner, a.quota_max_active, a.quota_per_second, 1)
if over ~= 0 then return over end
count_submission(a.owner, 1)
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.pcall('XGROUP', 'CREATE', KEYS[1], a.group, '0', 'MKSTREAM')
end
local entry = redis.call('XADD', KEYS[1], '*', 'id', a.id, 'payload', ARGV[2], 'sig', ARGV[3])
redis.call('HSET', KEYS[2], 'status', 'queued', 'owner', a.owner, 'language', a.language,
  'created_at', a.created_at, 'stream', KEYS[1], 'entry', entry)
return 1
