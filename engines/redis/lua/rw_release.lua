-- KEYS writer, readers, waiting writers; ARGV mode, the hold's
-- "<token>:<owner>", and the last two of release.lua. Returns 1, or 0 when
-- the hold is gone.
--
-- A read hold past its expiry that no script has pruned yet still counts
-- as held: every grant prunes first, so nobody has acted on its expiry.
--
-- A writer's release tells the readers which may go (tellReaders); the
-- last reader's release tells a waiting writer: "r".
if ARGV[1] == 'w' then
  if redis.call('get', KEYS[1]) ~= ARGV[2] then
    return 0
  end
  redis.call('del', KEYS[1])
  tellReaders(KEYS[1], KEYS[3], ARGV[3], ARGV[4])
  return 1
end
if redis.call('zrem', KEYS[2], ARGV[2]) == 0 then
  return 0
end
if redis.call('exists', KEYS[3]) == 1 and redis.call('exists', KEYS[1]) == 0 then
  local now = clock()
  prune(KEYS[2], now)
  prune(KEYS[3], now)
  local ch = KEYS[1] .. ':wake'
  if redis.call('exists', KEYS[2]) == 0 and redis.call('exists', KEYS[3]) == 1 and listened(ch, ARGV[3]) then
    redis.call(ARGV[4], ch, 'r')
  end
end
return 1
