-- KEYS lock, queue, expiries; ARGV the waiter's member, and the last two
-- of release.lua. Takes a waiter that gives up out of the queue; when it
-- was first and the lock is free, wakes the next. Returns 1.
local head = first(KEYS[2])
if redis.call('zrem', KEYS[2], ARGV[1]) == 1 then
  redis.call('zrem', KEYS[3], ARGV[1])
  if head == ARGV[1] and redis.call('exists', KEYS[1]) == 0 then
    freed(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3])
  end
end
return 1
