-- KEYS lock; ARGV as release.lua's last two. Removes the hold whoever owns
-- it and wakes the waiters. Returns the removed "<token>:<owner>", or nil
-- when the name was free.
local v = redis.call('get', KEYS[1])
if not v then
  return false
end
redis.call('del', KEYS[1])
local ch = KEYS[1] .. ':wake'
if redis.call('pubsub', ARGV[1], ch)[2] > 0 then
  redis.call(ARGV[2], ch, '1')
end
return v
