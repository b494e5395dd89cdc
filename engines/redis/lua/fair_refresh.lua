-- KEYS lock, queue, expiries; ARGV place lifetime ms, the last two of
-- release.lua, then the members of one process's waiters. Refreshes the
-- places of those still queued, then evicts the expired ones; when that
-- changed who is first while the lock is free, wakes the new first.
-- Returns the members that were no longer queued: granted since, or
-- evicted while their process stalled.
local now = clock()
local exp = ms(now + tonumber(ARGV[1]))
local gone = {}
for i = 4, #ARGV do
  if redis.call('zscore', KEYS[2], ARGV[i]) then
    redis.call('zadd', KEYS[3], exp, ARGV[i])
  else
    gone[#gone + 1] = ARGV[i]
  end
end
if redis.call('exists', KEYS[2]) == 1 then
  redis.call('pexpireat', KEYS[2], exp)
  redis.call('pexpireat', KEYS[3], exp)
  local head = first(KEYS[2])
  evict(KEYS[2], KEYS[3], now)
  if first(KEYS[2]) ~= head and redis.call('exists', KEYS[1]) == 0 then
    wakeFirst(KEYS[1], KEYS[2], ARGV[2], ARGV[3])
  end
end
return gone
