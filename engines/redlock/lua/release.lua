-- After unlock.lua. KEYS lock; ARGV owner, the grant's token, this node's
-- token (the hold reads "<either>:<owner>": phase 2 may not have relabelled
-- it), PUBSUB's subscriber count subcommand, the publish command. Returns
-- 1, or 0 when the hold is gone from this node.
local v = redis.call('get', KEYS[1])
if v ~= ARGV[2] .. ':' .. ARGV[1] and v ~= ARGV[3] .. ':' .. ARGV[1] then
  return 0
end
unlock(KEYS[1], ARGV[4], ARGV[5])
return 1
