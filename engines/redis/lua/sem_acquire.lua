-- KEYS holds, count, fence, waiters; ARGV owner, ttl ms, fence idle ms,
-- permits wanted, the opener's count, check ('1': fail when the stored
-- count differs), ticket (its rank; 0: none yet), register ('1' when the
-- caller will wait), weight (1 for a TryLock).
--
-- Stores the opener's count when none is stored. Returns the token (> 0)
-- when granted (permitsGo: its permits, those out and those of the
-- waiters ranked before it fit the count), {ms to wait at most, ticket}
-- otherwise, or the error "PERMITS <stored>" on a mismatch. A caller that
-- will wait is recorded among the waiters, in line by its rank.
local limit = tonumber(redis.call('get', KEYS[2]))
if not limit then
  limit = tonumber(ARGV[5])
  redis.call('set', KEYS[2], ARGV[5])
end
if ARGV[6] == '1' and limit ~= tonumber(ARGV[5]) then
  return redis.error_reply('PERMITS ' .. ms(limit))
end
local now, ttl, ticket, permits = clock(), tonumber(ARGV[2]), tonumber(ARGV[7]), tonumber(ARGV[4])
local weight = tonumber(ARGV[9])
local me = ticket > 0 and ticket or arriving(weight)
prune(KEYS[1], now)
local out, ahead = permitsOut(KEYS[1]), 0
if permitsGo(out, 0, permits, limit) and redis.call('exists', KEYS[4]) == 1 then
  for _, e in ipairs(permitWaiters(KEYS[4], now)) do
    if e[1] >= me then
      break
    end
    ahead = ahead + e[2]
  end
end
if permitsGo(out, ahead, permits, limit) then
  local t = fence(KEYS[3], ARGV[3])
  redis.call('zadd', KEYS[1], ms(now + ttl), ms(t) .. ':' .. ARGV[4] .. ':' .. ARGV[1])
  touch(KEYS[1])
  if ticket > 0 then
    redis.call('zrem', KEYS[4], ms(ticket) .. ':' .. ARGV[4] .. ':' .. ARGV[1])
  end
  return t
end
return waiting(ARGV[8], KEYS[4], KEYS[3], ARGV[3], ticket, weight, ARGV[4] .. ':' .. ARGV[1], now, ttl, soonest(now, KEYS[1], KEYS[4]))
