-- Phase 2 of a grant, after clock.lua. KEYS lock, fence; ARGV owner, this
-- node's token, the grant's token t, fence idle ms. Raises the counter to t,
-- so that every later majority, which shares a node with this one, draws a
-- token above t, and relabels this node's hold "<t>:<owner>". A counter
-- whose expiry (t + idle) the clock has passed is deleted instead: the
-- next one starts from the clock, past t (see fence.lua).
local t = tonumber(ARGV[3])
local c = tonumber(redis.call('get', KEYS[2]) or '0')
if c < t then
  if t + ARGV[4] > clock() then
    redis.call('set', KEYS[2], ms(t), 'pxat', ms(t + ARGV[4]))
  else
    redis.call('del', KEYS[2])
  end
end
if redis.call('get', KEYS[1]) == ARGV[2] .. ':' .. ARGV[1] then
  redis.call('set', KEYS[1], ARGV[3] .. ':' .. ARGV[1], 'keepttl')
end
return 1
