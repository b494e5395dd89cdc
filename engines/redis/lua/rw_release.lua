-- KEYS writer, readers, waiting writers, waiting readers; ARGV mode, the
-- hold's "<token>:<owner>", and the last two of release.lua. Returns 1, or
-- 0 when the hold is gone.
--
-- A read hold past its expiry that no script has pruned yet still counts
-- as held: every grant prunes first, so nobody has acted on its expiry.
--
-- A writer's release, or the last reader's while others wait, tells the
-- waiters whom the rule now grants (tellWaiters): a reader's that leaves
-- others grants nobody, as only a writer waits for readers.
if ARGV[1] == 'w' then
  if redis.call('get', KEYS[1]) ~= ARGV[2] then
    return 0
  end
  redis.call('del', KEYS[1])
  tellWaiters(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[3], ARGV[4])
  return 1
end
if redis.call('zrem', KEYS[2], ARGV[2]) == 0 then
  return 0
end
if redis.call('exists', KEYS[3], KEYS[4]) > 0 and redis.call('exists', KEYS[1]) == 0 then
  prune(KEYS[2], clock())
  if redis.call('exists', KEYS[2]) == 0 then
    tellWaiters(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[3], ARGV[4])
  end
end
return 1
