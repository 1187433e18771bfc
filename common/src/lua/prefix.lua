-- prefix: Prelude: PREFIX, the queue's key prefix (`QueueKeys::prefix`, `runbox:{queue}:`), for scripts that build keys.
-- KEYS: none of its own.
-- ARGV: 1 is the script's argument table (a JSON object) in every script that opens with this file; PREFIX is its `prefix`.
local PREFIX = cjson.decode(ARGV[1]).prefix
