-- KEYS writer, waiting writers; ARGV "<ticket>:<owner>", and the last two
-- of release.lua. Withdraws a waiting writer's intent and tells the
-- readers it held back. Returns 1.
if redis.call('zrem', KEYS[2], ARGV[1]) == 1 and redis.call('exists', KEYS[1]) == 0 then
  tellReaders(KEYS[1], KEYS[2], ARGV[2], ARGV[3])
end
return 1
