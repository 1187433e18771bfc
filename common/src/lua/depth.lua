-- depth: Replies the queue depth: queued plus running jobs in every owner stream.
-- KEYS: 1 streams set.
-- ARGV: none.
--
-- Needs owner_streams.lua.
return depth(KEYS[1])
