-- store_checkpoint: Stores a checkpoint and lists it on its session; replies 1, or 0 when the session is gone.
-- KEYS: 1 session hash, 2 checkpoint hash.
-- ARGV: 1 checkpoint info (JSON), 2 data (compressed), 3 ttl s.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[2], 'data', ARGV[2], 'owner', redis.call('HGET', KEYS[1], 'owner'),
  'language', redis.call('HGET', KEYS[1], 'language'), 'session', string.match(KEYS[1], '[^:]+$'))
redis.call('EXPIRE', KEYS[2], ARGV[3])
local list = cjson.decode(redis.call('HGET', KEYS[1], 'checkpoints') or '[]')
table.insert(list, cjson.decode(ARGV[1]))
redis.call('HSET', KEYS[1], 'checkpoints', cjson.encode(list))
return 1
