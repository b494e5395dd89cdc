-- KEYS holds, count, waiters; ARGV the new count, and the last two of
-- release.lua. Stores the count and tells the waiters what the rule now
-- grants them (tellFree).
redis.call('set', KEYS[2], ARGV[1])
tellFree(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3])
return 1
