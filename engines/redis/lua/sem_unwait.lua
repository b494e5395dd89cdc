-- KEYS holds, count, waiters; ARGV the waiter's
-- "<ticket>:<permits>:<owner>", and the last two of release.lua. Withdraws
-- a permit waiter and tells those it held back (tellFree). Returns 1.
if redis.call('zrem', KEYS[3], ARGV[1]) == 1 then
  tellFree(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3])
end
return 1
