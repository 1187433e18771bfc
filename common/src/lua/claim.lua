-- claim: Claims up to ARGV[4] new entries for a consumer, one from each owner in the ready ring in turn; replies [[stream, [entry-id, [field, value, ...]]], ...].
-- KEYS: 1 ready ring.
-- ARGV: 1 jobs stream prefix, 2 group, 3 consumer, 4 count.
--
-- Each turn moves the owner at the head of the ring to the tail and reads
-- one new entry of its stream. An owner with nothing new leaves the ring
-- until its next enqueue.
local claimed = {}
while #claimed < tonumber(ARGV[4]) do
  local owner = redis.call('LMOVE', KEYS[1], KEYS[1], 'LEFT', 'RIGHT')
  if not owner then break end
  local stream = ARGV[1] .. owner
  local read = function()
    return redis.pcall('XREADGROUP', 'GROUP', ARGV[2], ARGV[3], 'COUNT', 1, 'STREAMS', stream, '>')
  end
  local reply = read()
  if type(reply) == 'table' and reply.err then
    -- Redis lost the group (a restart without persistence): make it again.
    redis.call('XGROUP', 'CREATE', stream, ARGV[2], '0', 'MKSTREAM')
    reply = read()
  end
  local entry = reply and reply[1] and reply[1][2][1]
  if entry then
    table.insert(claimed, {stream, entry})
  else
    redis.call('LREM', KEYS[1], -1, owner)
  end
end
return claimed
