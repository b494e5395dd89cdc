-- KEYS writer, readers, waiting writers; ARGV a token ('0': any), and the
-- last two of release.lua. Ends the holds with that token, the writer's
-- and the readers' (a downgrading owner's two share it), and wakes the
-- waiters as a release would: when the writer went, or the last reader
-- while no writer holds, "w<ticket>" of the first waiting writer. Returns
-- as inspect.lua (the writer's value when it was ended, and the readers it
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
if (w ~= '' or (#ended > 0 and redis.call('exists', KEYS[2]) == 0)) and redis.call('exists', KEYS[1]) == 0 then
  tellReaders(KEYS[1], KEYS[3], ARGV[2], ARGV[3])
end
return {now, w, left, ended}
