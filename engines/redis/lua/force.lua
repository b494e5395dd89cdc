-- KEYS lock; ARGV as release.lua's last two. Removes the hold whoever owns
-- it and wakes the waiters. Returns the removed "<token>:<owner>", or nil
-- when the name was free.
local v = redis.call('get', KEYS[1])
if not v then
  return false
end
unlock(KEYS[1], ARGV[1], ARGV[2])
return v
