-- KEYS holds, count; ARGV the new count, and the last two of release.lua.
-- Stores the count and tells the waiters what is free.
redis.call('set', KEYS[2], ARGV[1])
tellFree(KEYS[1], KEYS[2], ARGV[2], ARGV[3])
return 1
