-- KEYS writer, readers, waiting writers, fence, waiting readers; ARGV
-- owner, ttl ms, fence idle ms, mode ('r' or 'w'), ticket (its rank; 0:
-- none yet), register ('1' when the caller will wait), the caller's own
-- write hold "<token>:<owner>" for a downgrade (empty otherwise), weight
-- (1 for a TryLock).
--
-- Returns the token (> 0) when granted, else {ms to wait at most, ticket}
-- (see waiting). Grants as family.lua's rule says: a writer when nothing
-- is held and no waiter ranks before it, a reader when no writer holds or
-- waits ranked before it, a downgrade at once, with the writer's token.
local ttl, ticket, weight = tonumber(ARGV[2]), tonumber(ARGV[5]), tonumber(ARGV[8])
local me = ticket > 0 and ticket or arriving(weight)
local w = redis.call('get', KEYS[1])
local now, wait
if ARGV[4] == 'w' then
  local go = not w
  if go and redis.call('exists', KEYS[2], KEYS[3], KEYS[5]) > 0 then
    now = clock()
    prune(KEYS[2], now)
    go = writerGoes(redis.call('exists', KEYS[2]) == 1, first(now, KEYS[3], KEYS[5]), me)
  end
  if go then
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
    wait = soonest(now, KEYS[2], KEYS[3], KEYS[5])
  end
  return waiting(ARGV[6], KEYS[3], KEYS[4], ARGV[3], ticket, weight, ARGV[1], now, ttl, wait)
end
now = clock()
local t
if w and w == ARGV[7] then
  t = tonumber(string.match(w, '^(%d+):'))
elseif w then
  wait = redis.call('pttl', KEYS[1])
else
  local fw = 0
  if redis.call('exists', KEYS[3]) == 1 then
    fw = first(now, KEYS[3])
  end
  if readerGoes(false, fw, me) then
    t = fence(KEYS[4], ARGV[3])
  else
    wait = soonest(now, KEYS[3])
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
return waiting(ARGV[6], KEYS[5], KEYS[4], ARGV[3], ticket, weight, ARGV[1], now, ttl, wait)
