-- prefix: Prelude: PREFIX, the queue's key prefix (`QueueKeys::prefix`, `runbox:{queue}:`), for scripts that build keys.
-- KEYS: none of its own.
-- ARGV: the last one, ARGV[#ARGV], is the prefix in every script that opens with this file.
local PREFIX = ARGV[#ARGV]
