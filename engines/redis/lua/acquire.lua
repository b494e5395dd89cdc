-- KEYS lock, fence; ARGV owner, ttl ms, fence idle ms (at least 256 ms:
-- WithFenceIdle checks it). Returns the token (> 0) when granted, else
-- minus the ms the current hold has left (<= 0).
local t = fence(KEYS[2], ARGV[3])
if redis.call('set', KEYS[1], string.format('%d', t) .. ':' .. ARGV[1], 'nx', 'px', ARGV[2]) then
  return t
end
local p = redis.call('pttl', KEYS[1])
if p == -1 then
  p = tonumber(ARGV[2])
end
return -p
