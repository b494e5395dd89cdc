-- waiting answers an attempt that must wait at most wait ms (a negative
-- wait: ttl): {ms to wait, ticket}. A caller that will wait (register '1')
-- draws its ticket, its rank at weight w (rank.lua), from the counter fk
-- (idle: its idle time) unless it has one, records or refreshes its entry
-- "<ticket>:<rest>" in the sorted set
-- key, expiring ttl ms from now unless refreshed, and waits at most ttl/3
-- before its next attempt refreshes it.
local function waiting(register, key, fk, idle, ticket, w, rest, now, ttl, wait)
  if wait < 0 then
    wait = ttl
  end
  if register == '1' then
    if ticket == 0 then
      ticket = rank(fence(fk, idle), w)
    end
    prune(key, now)
    redis.call('zadd', key, ms(now + ttl), ms(ticket) .. ':' .. rest)
    touch(key)
    wait = math.min(wait, math.floor(ttl / 3))
  end
  return {math.max(wait, 1), ticket}
end
