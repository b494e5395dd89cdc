-- KEYS writer, readers, waiting writers, fence, waiting readers; ARGV
-- owner, ttl ms, fence idle ms, mode ('r' or 'w'), ticket (0: none yet),
-- register ('1' when the caller will wait), the caller's own write hold
-- "<token>:<owner>" for a downgrade (empty otherwise).
--
-- Returns the token (> 0) when granted, else {ms to wait at most, ticket}
-- (see waiting). A writer gets in when nobody holds the lock; a reader when
-- no writer holds it and no writer with a lower ticket waits; a downgrade
-- at once, with the writer's token (see doc.go).
local ttl, ticket = tonumber(ARGV[2]), tonumber(ARGV[5])
local w = redis.call('get', KEYS[1])
local now, wait
if ARGV[4] == 'w' then
  if not w and redis.call('exists', KEYS[2]) == 1 then
    now = clock()
    prune(KEYS[2], now)
  end
  if not w and redis.call('exists', KEYS[2]) == 0 then
    local t = fence(KEYS[4], ARGV[3])
    redis.call('set', KEYS[1], ms(t) .. ':' .. ARGV[1], 'px', ARGV[2])
    if ticket > 0 then
      redis.call('zrem', KEYS[3], ms(ticket) .. ':' .. ARGV[1])
    end
    return t
  end
  now = now or clock()
  if w then
    wait = redis.call('pttl', KEYS[1])
  else
    wait = tonumber(redis.call('zrange', KEYS[2], -1, -1, 'withscores')[2]) - now
  end
  return waiting(ARGV[6], KEYS[3], KEYS[4], ARGV[3], ticket, ARGV[1], now, ttl, wait)
end
now = clock()
local t
if w and w == ARGV[7] then
  t = tonumber(string.match(w, '^(%d+):'))
elseif w then
  wait = redis.call('pttl', KEYS[1])
else
  local first, exp = 0, 0
  if redis.call('exists', KEYS[3]) == 1 then
    prune(KEYS[3], now)
    first, exp = firstWriter(KEYS[3])
  end
  if first == 0 or (ticket > 0 and ticket < first) then
    t = fence(KEYS[4], ARGV[3])
  else
    wait = exp - now
  end
end
if t then
  redis.call('zadd', KEYS[2], ms(now + ttl), ms(t) .. ':' .. ARGV[1])
  touch(KEYS[2])
  if ticket > 0 then
    redis.call('zrem', KEYS[5], ms(ticket) .. ':' .. ARGV[1])
  end
  return t
end
return waiting(ARGV[6], KEYS[5], KEYS[4], ARGV[3], ticket, ARGV[1], now, ttl, wait)
