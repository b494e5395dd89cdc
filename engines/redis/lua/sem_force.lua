-- KEYS holds, count, waiters; ARGV a token ('0': any), and the last two
-- of release.lua. Ends the permit holds with that token and tells the
-- waiters what the rule now grants them (tellFree). Returns as
-- inspect.lua (no string, and the holds it ended).
local now = clock()
prune(KEYS[1], now)
local ended = forced(KEYS[1], ARGV[1])
if #ended > 0 then
  touch(KEYS[1])
  tellFree(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3])
end
return {now, '', 0, ended}
