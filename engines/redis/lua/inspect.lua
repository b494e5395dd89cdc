-- KEYS a string, then sorted sets. Returns the server time, the string's
-- value (empty when absent) and PTTL, and each set with its scores.
local r = {clock(), redis.call('get', KEYS[1]) or '', redis.call('pttl', KEYS[1])}
for i = 2, #KEYS do
  r[#r + 1] = redis.call('zrange', KEYS[i], 0, -1, 'withscores')
end
return r
