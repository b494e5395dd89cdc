-- What the family's scripts share, after clock.lua. Every function here
-- costs each script that includes it a closure per call.

-- touch keeps a sorted set's TTL at its latest score.
local function touch(key)
  local top = redis.call('zrange', key, -1, -1, 'withscores')
  if top[2] then
    redis.call('pexpireat', key, top[2])
  end
end
local function prune(key, now)
  redis.call('zremrangebyscore', key, '-inf', now)
end
-- firstWriter is the lowest ticket among the waiting writers and the
-- expiry of its intent; 0 when none waits.
local function firstWriter(ww)
  local first, exp = 0, 0
  local all = redis.call('zrange', ww, 0, -1, 'withscores')
  for i = 1, #all, 2 do
    local t = tonumber(string.match(all[i], '^(%d+):'))
    if first == 0 or t < first then
      first, exp = t, tonumber(all[i + 1])
    end
  end
  return first, exp
end
-- permitsOut sums the permits of the holds in key.
local function permitsOut(key)
  local n = 0
  for _, m in ipairs(redis.call('zrange', key, 0, -1)) do
    n = n + tonumber(string.match(m, '^%d+:(%d+):'))
  end
  return n
end
-- tellFree tells the waiters of the semaphore whose holds are in key and
-- count in count how many permits are free: "p<free>".
local function tellFree(key, count, numsub, publish)
  local ch = key .. ':wake'
  if listened(ch, numsub) then
    prune(key, clock())
    local free = (tonumber(redis.call('get', count)) or 0) - permitsOut(key)
    if free > 0 then
      redis.call(publish, ch, 'p' .. ms(free))
    end
  end
end
-- tellReaders tells the waiters of the read-write lock whose writer is w,
-- and waiting writers ww, which readers may go: "w<ticket>", the lowest
-- ticket of a waiting writer ("w0": none waits).
local function tellReaders(w, ww, numsub, publish)
  local ch = w .. ':wake'
  if listened(ch, numsub) then
    local first = 0
    if redis.call('exists', ww) == 1 then
      prune(ww, clock())
      first = firstWriter(ww)
    end
    redis.call(publish, ch, 'w' .. ms(first))
  end
end
