-- KEYS holds, count, waiters; ARGV the hold's member, and the last two of
-- release.lua. Returns 1, or 0 when the hold is gone (as rw_release.lua's
-- readers). Tells the waiters what the rule now grants them (tellFree).
if redis.call('zrem', KEYS[1], ARGV[1]) == 0 then
  return 0
end
tellFree(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3])
return 1
