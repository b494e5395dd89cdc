-- KEYS writer, readers, waiting writers, waiting readers; ARGV mode, the
-- waiter's "<ticket>:<owner>", and the last two of release.lua. Withdraws
-- a waiter and tells those it held back (tellWaiters). Returns 1.
local key = ARGV[1] == 'w' and KEYS[3] or KEYS[4]
if redis.call('zrem', key, ARGV[2]) == 1 and redis.call('exists', KEYS[1]) == 0 then
  tellWaiters(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[3], ARGV[4])
end
return 1
