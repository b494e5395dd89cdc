-- enlist draws a waiter's ticket from the counter fk (idle: its idle
-- time) unless it has one, records or refreshes its entry
-- "<ticket>:<rest>" in the sorted set key, expiring ttl ms from now unless
-- refreshed, and returns the ticket and the time to wait at most before
-- the next refresh, from wait.
local function enlist(key, fk, idle, ticket, rest, now, ttl, wait)
  if ticket == 0 then
    ticket = fence(fk, idle)
  end
  prune(key, now)
  redis.call('zadd', key, ms(now + ttl), ms(ticket) .. ':' .. rest)
  touch(key)
  return ticket, math.min(wait, math.floor(ttl / 3))
end
