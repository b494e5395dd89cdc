-- What the fair scripts share, after clock.lua: the queue of a fair
-- engine's mutex (see the # Fair mode section of doc.go), q scored by
-- rank (rank.lua: weight, then ticket; the member starts with it), qx by
-- the expiry of each place.

-- evict drops the waiters whose place has expired.
local function evict(q, qx, now)
  local dead = redis.call('zrange', qx, '-inf', ms(now), 'byscore')
  if #dead > 0 then
    for _, m in ipairs(dead) do
      redis.call('zrem', q, m)
    end
    redis.call('zremrangebyscore', qx, '-inf', ms(now))
  end
end
-- first is the member of the waiter ranked first, and its rank; nil when
-- none waits.
local function first(q)
  local f = redis.call('zrange', q, 0, 0, 'withscores')
  return f[1], tonumber(f[2])
end
-- wakeFirst tells the first waiter's process that its turn came:
-- "q<ticket>", which the other processes ignore.
local function wakeFirst(lock, q, numsub, publish)
  local f = first(q)
  local ch = lock .. ':wake'
  if f and listened(ch, numsub) then
    redis.call(publish, ch, 'q' .. string.match(f, '^(%d+):'))
  end
end
-- freed wakes the first live waiter, if any, of a lock just freed.
local function freed(lock, q, qx, numsub, publish)
  if redis.call('exists', q) == 1 then
    evict(q, qx, clock())
    wakeFirst(lock, q, numsub, publish)
  end
end
