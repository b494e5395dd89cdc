-- KEYS lock; ARGV token, owner, the subscriber count subcommand of PUBSUB
-- (NUMSUB, or SHARDNUMSUB on Cluster), the publish command (PUBLISH, or
-- SPUBLISH). Returns 1, or 0 when the hold is gone.
--
-- It publishes only when someone listens on the channel: Redis counts the
-- subscribers itself, and a waiter that dies takes its subscription (its
-- connection) with it, so the count never stays up for a dead waiter.
if redis.call('get', KEYS[1]) ~= ARGV[1] .. ':' .. ARGV[2] then
  return 0
end
redis.call('del', KEYS[1])
local ch = KEYS[1] .. ':wake'
if redis.call('pubsub', ARGV[3], ch)[2] > 0 then
  redis.call(ARGV[4], ch, '1')
end
return 1
