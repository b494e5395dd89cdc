-- KEYS lock, fence, queue, expiries; ARGV owner, ttl ms, fence idle ms,
-- ticket (the caller's rank, rank.lua; 0: none yet), register ('1' when
-- the caller will wait), place lifetime ms, weight (1 for a TryLock).
--
-- Returns the token (> 0) when granted, else {ms to wait at most, ticket}.
-- The lock is granted when it is free and nobody waits, or the caller
-- ranks first (a queued caller then leaves the queue; a heavy arrival may
-- rank before every waiter). A caller that will wait takes its place
-- (drawing its ticket the first time) or refreshes it. The wait is the
-- holder's time left, or, when the lock is free and another waiter is
-- first, the time until that waiter's place expires. Both sets expire
-- with their latest place, so a name left idle leaves nothing behind.
local ticket, w = tonumber(ARGV[4]), tonumber(ARGV[7])
local me = ms(ticket) .. ':' .. ARGV[1]
local now, head, top
if redis.call('exists', KEYS[3]) == 1 then
  now = clock()
  evict(KEYS[3], KEYS[4], now)
  head, top = first(KEYS[3])
end
local left = redis.call('pttl', KEYS[1])
if left == -2 and (not head or (ticket > 0 and ticket or arriving(w)) <= top) then
  local t = fence(KEYS[2], ARGV[3])
  redis.call('set', KEYS[1], ms(t) .. ':' .. ARGV[1], 'px', ARGV[2])
  if head then
    redis.call('zrem', KEYS[3], me)
    redis.call('zrem', KEYS[4], me)
  end
  return t
end
if left == -2 then
  left = tonumber(redis.call('zscore', KEYS[4], head)) - now
elseif left == -1 then
  left = tonumber(ARGV[2])
end
if ARGV[5] == '1' then
  now = now or clock()
  if ticket == 0 then
    ticket = rank(fence(KEYS[2], ARGV[3]), w)
    me = ms(ticket) .. ':' .. ARGV[1]
  end
  local exp = ms(now + tonumber(ARGV[6]))
  redis.call('zadd', KEYS[3], ms(ticket), me)
  redis.call('zadd', KEYS[4], exp, me)
  redis.call('pexpireat', KEYS[3], exp)
  redis.call('pexpireat', KEYS[4], exp)
end
return {math.max(left, 1), ticket}
