-- KEYS holds, count, fence, waiters; ARGV owner, ttl ms, fence idle ms,
-- permits wanted, the opener's count, check ('1': fail when the stored
-- count differs), ticket (0: none yet), register ('1' when the caller will
-- wait).
--
-- Stores the opener's count when none is stored. Returns the token (> 0)
-- when granted, {ms to wait at most, ticket} when the permits are out, or
-- the error "PERMITS <stored>" on a mismatch. A caller that will wait is
-- recorded among the waiters, as rw_acquire.lua's waiting readers.
local limit = tonumber(redis.call('get', KEYS[2]))
if not limit then
  limit = tonumber(ARGV[5])
  redis.call('set', KEYS[2], ARGV[5])
end
if ARGV[6] == '1' and limit ~= tonumber(ARGV[5]) then
  return redis.error_reply('PERMITS ' .. ms(limit))
end
local now, ttl, ticket = clock(), tonumber(ARGV[2]), tonumber(ARGV[7])
prune(KEYS[1], now)
if permitsOut(KEYS[1]) + tonumber(ARGV[4]) <= limit then
  local t = fence(KEYS[3], ARGV[3])
  redis.call('zadd', KEYS[1], ms(now + ttl), ms(t) .. ':' .. ARGV[4] .. ':' .. ARGV[1])
  touch(KEYS[1])
  if ticket > 0 then
    redis.call('zrem', KEYS[4], ms(ticket) .. ':' .. ARGV[4] .. ':' .. ARGV[1])
  end
  return t
end
local first = redis.call('zrange', KEYS[1], 0, 0, 'withscores')[2]
local wait = first and tonumber(first) - now or ttl
return waiting(ARGV[8], KEYS[4], KEYS[3], ARGV[3], ticket, ARGV[4] .. ':' .. ARGV[1], now, ttl, wait)
