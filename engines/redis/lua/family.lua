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

-- The grant rule, stated once for the scripts. It mirrors package
-- internal/lockrule (waiters ranked by weight, then first come, first
-- served: with every weight 1 writers and large permit requests never
-- starve), and the model tests (model_test.go) check the engine against
-- that package as the oracle: change both together. A name's queue is
-- its holds, then its waiters by rank (rank.lua), which their entries
-- start with (the rule grants nobody ranked behind a waiter but a
-- downgrade, which rw_acquire.lua grants at once); a request without a
-- place yet ranks as arriving(its weight) says.
--
-- writerGoes: a writer of rank t when nothing is held (a downgrade is a
-- read hold) and no waiter ranks before it, first being the lowest rank
-- of the waiters, readers and writers (0: none).
local function writerGoes(held, first, t)
  return not held and (first == 0 or t <= first)
end
-- readerGoes: a reader of rank t when no writer holds and no writer that
-- waits ranks before it, firstWriter being the lowest waiting writer's.
local function readerGoes(writer, firstWriter, t)
  return not writer and (firstWriter == 0 or t < firstWriter)
end
-- permitsGo: a request of permits when they, the permits out and those
-- asked for by the waiters ranked before it (ahead) fit the count.
local function permitsGo(out, ahead, permits, count)
  return out + ahead + permits <= count
end

-- first prunes the waiters of the sorted sets given and returns their
-- lowest rank, 0 when none waits.
local function first(now, ...)
  local low = 0
  for _, key in ipairs({...}) do
    prune(key, now)
    for _, m in ipairs(redis.call('zrange', key, 0, -1)) do
      local t = tonumber(string.match(m, '^(%d+):'))
      if low == 0 or t < low then
        low = t
      end
    end
  end
  return low
end
-- soonest is the earliest expiry of the entries of the sorted sets given,
-- as a wait from now: a waiter held back by an entry that expires tries
-- again then, as an expiry publishes nothing; -1 (the TTL) when none has
-- any.
local function soonest(now, ...)
  local low
  for _, key in ipairs({...}) do
    local e = tonumber(redis.call('zrange', key, 0, 0, 'withscores')[2])
    if e and (not low or e < low) then
      low = e
    end
  end
  return low and low - now or -1
end
-- permitsOut sums the permits of the holds in key.
local function permitsOut(key)
  local n = 0
  for _, m in ipairs(redis.call('zrange', key, 0, -1)) do
    n = n + tonumber(string.match(m, '^%d+:(%d+):'))
  end
  return n
end
-- permitWaiters prunes the permit waiters of key and returns their ranks
-- and permits, {rank, permits} in rank order.
local function permitWaiters(key, now)
  prune(key, now)
  local q = {}
  for _, m in ipairs(redis.call('zrange', key, 0, -1)) do
    local t, n = string.match(m, '^(%d+):(%d+):')
    q[#q + 1] = {tonumber(t), tonumber(n)}
  end
  table.sort(q, function(a, b) return a[1] < b[1] end)
  return q
end
-- tellFree tells the permit waiters of the semaphore (holds in key, count
-- in count, waiters in wk) whom the rule now grants, first ranked first:
-- "b<rank>", the waiters below the first it does not grant (0: all);
-- nothing when it grants none.
local function tellFree(key, count, wk, numsub, publish)
  local ch = key .. ':wake'
  if listened(ch, numsub) then
    local now = clock()
    prune(key, now)
    local out, limit, ahead, stop = permitsOut(key), tonumber(redis.call('get', count)) or 0, 0, 0
    for _, e in ipairs(permitWaiters(wk, now)) do
      if not permitsGo(out, ahead, e[2], limit) then
        stop = e[1]
        break
      end
      ahead = ahead + e[2]
    end
    if ahead > 0 then
      redis.call(publish, ch, 'b' .. ms(stop))
    end
  end
end
-- tellWaiters tells the waiters of the read-write lock whose writer is w
-- (absent: the caller checked), readers r, waiting writers ww and waiting
-- readers wr, whom the rule now grants: the readers before the first
-- waiting writer, "b<its ticket>" ("b0": none waits), or the first
-- waiting writer when nothing is held, "q<its ticket>".
local function tellWaiters(w, r, ww, wr, numsub, publish)
  local ch = w .. ':wake'
  if listened(ch, numsub) then
    local now = clock()
    local fw, fr = first(now, ww), first(now, wr)
    if fr > 0 and readerGoes(false, fw, fr) then
      redis.call(publish, ch, 'b' .. ms(fw))
    elseif fw > 0 then
      prune(r, now)
      if writerGoes(redis.call('exists', r) == 1, fw, fw) then
        redis.call(publish, ch, 'q' .. ms(fw))
      end
    end
  end
end
