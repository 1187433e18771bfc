-- now_ms: Prelude: now_ms(), Redis's clock in Unix milliseconds.
-- KEYS: none of its own.
-- ARGV: none of its own.
--
-- Times are measured on Redis's clock: the entry id starts with the
-- enqueue time in milliseconds.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
