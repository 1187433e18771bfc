-- queue_callback: Prelude: queue_callback(key, kind, id) queues the callback of a job or batch (`kind`) that just finished, if its owner asked for one.
-- KEYS: none of its own; it appends to PREFIX .. 'callbacks' (needs prefix.lua).
-- ARGV: none of its own.
local function queue_callback(key, kind, id)
  if redis.call('HEXISTS', key, 'callback') == 1 then
    redis.call('XADD', PREFIX .. 'callbacks', 'MAXLEN', '~', 100000, '*', 'kind', kind, 'id', id)
  end
end
