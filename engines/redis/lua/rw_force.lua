-- KEYS writer, readers, waiting writers, waiting readers; ARGV a token
-- ('0': any), and the last two of release.lua. Ends the holds with that
-- token, the writer's and the readers' (a downgrading owner's two share
-- it), and wakes the waiters as a release would (tellWaiters). Returns as
-- inspect.lua (the writer's value when it was ended, and the readers it
-- ended).
local now = clock()
local w, left = redis.call('get', KEYS[1]) or '', 0
if w ~= '' and (ARGV[1] == '0' or string.match(w, '^(%d+):') == ARGV[1]) then
  left = redis.call('pttl', KEYS[1])
  redis.call('del', KEYS[1])
else
  w = ''
end
prune(KEYS[2], now)
local ended = forced(KEYS[2], ARGV[1])
touch(KEYS[2])
if (w ~= '' or #ended > 0) and redis.call('exists', KEYS[1]) == 0 then
  tellWaiters(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2], ARGV[3])
end
return {now, w, left, ended}
