-- KEYS the holds' locks on this node; ARGV four per hold: owner, the
-- grant's token, this node's token (as in release.lua), life ms. Returns
-- one 1 (renewed) or 0 (gone from this node) per hold.
local r = {}
for i, key in ipairs(KEYS) do
  local o, v = ARGV[4 * i - 3], redis.call('get', key)
  if v == ARGV[4 * i - 2] .. ':' .. o or v == ARGV[4 * i - 1] .. ':' .. o then
    redis.call('pexpire', key, ARGV[4 * i])
    r[i] = 1
  else
    r[i] = 0
  end
end
return r
