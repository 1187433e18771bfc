-- e2b_sandbox_put: Writes an E2B sandbox's record if it is still at the version its writer read; replies 1, or 0 when another write came first (or the record went).
-- KEYS: 1 the sandbox's hash, 2 the owner's set of sandbox ids.
-- ARGV: 1 record (JSON), 2 the version read (0: a new sandbox, written only if absent), 3 ttl s, 4 sandbox id.
local version = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if version ~= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'record', ARGV[1], 'version', version + 1)
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('SADD', KEYS[2], ARGV[4])
return 1
