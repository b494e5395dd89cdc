-- KEYS lock, queue, expiries; ARGV the last two of release.lua. Removes the
-- hold whoever owns it and wakes the first waiter. Returns the removed
-- "<token>:<owner>", or nil when the name was free.
local v = redis.call('get', KEYS[1])
if not v then
  return false
end
redis.call('del', KEYS[1])
freed(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2])
return v
