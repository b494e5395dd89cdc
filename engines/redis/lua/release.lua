-- KEYS lock; ARGV token, owner, the subscriber count subcommand of PUBSUB
-- (NUMSUB, or SHARDNUMSUB on Cluster), the publish command (PUBLISH, or
-- SPUBLISH). Returns 1, or 0 when the hold is gone.
if redis.call('get', KEYS[1]) ~= ARGV[1] .. ':' .. ARGV[2] then
  return 0
end
unlock(KEYS[1], ARGV[3], ARGV[4])
return 1
