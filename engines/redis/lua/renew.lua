-- Renews a chunk of holds in one call, after clock.lua and family.lua.
-- KEYS the holds' keys, all in one Cluster slot; ARGV three per hold: its
-- kind ('s': a string "<token>:<owner>" with a TTL, the mutex's or a
-- writer's; 'z': an entry of a sorted set scored by its expiry, a reader's
-- or a permit's), the string or the entry, the TTL in ms. Returns the
-- positions (from 1) of the holds that are gone: empty when all were
-- renewed.
local lost, now, touched = {}, nil, {}
for i, key in ipairs(KEYS) do
  local v, ttl = ARGV[3 * i - 1], ARGV[3 * i]
  if ARGV[3 * i - 2] == 's' then
    if redis.call('get', key) == v then
      redis.call('pexpire', key, ttl)
    else
      lost[#lost + 1] = i
    end
  else
    now = now or clock()
    local s = redis.call('zscore', key, v)
    if s and tonumber(s) > now then
      redis.call('zadd', key, ms(now + ttl), v)
      touched[key] = true
    else
      lost[#lost + 1] = i
    end
  end
end
for key in pairs(touched) do
  touch(key)
end
return lost
