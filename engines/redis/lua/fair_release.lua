-- KEYS lock, queue, expiries; ARGV token, owner, and the last two of
-- release.lua. Returns 1, or 0 when the hold is gone. Wakes the first
-- waiter in line.
if redis.call('get', KEYS[1]) ~= ARGV[1] .. ':' .. ARGV[2] then
  return 0
end
redis.call('del', KEYS[1])
freed(KEYS[1], KEYS[2], KEYS[3], ARGV[3], ARGV[4])
return 1
