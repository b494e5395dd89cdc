-- KEYS writer, waiting writers; ARGV "<ticket>:<owner>", and the last two
-- of release.lua. Withdraws a waiting writer's intent and tells the
-- readers it held back. Returns 1.
local ch = KEYS[1] .. ':wake'
if redis.call('zrem', KEYS[2], ARGV[1]) == 1 and redis.call('exists', KEYS[1]) == 0 and listened(ch, ARGV[2]) then
  prune(KEYS[2], clock())
  redis.call(ARGV[3], ch, 'w' .. ms(firstWriter(KEYS[2])))
end
return 1
