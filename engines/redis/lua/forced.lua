-- forced removes from the sorted set key the entries whose token is tok
-- ('0': every entry), and returns them with their scores.
local function forced(key, tok)
  local ended = {}
  local all = redis.call('zrange', key, 0, -1, 'withscores')
  for i = 1, #all, 2 do
    if tok == '0' or string.match(all[i], '^(%d+):') == tok then
      redis.call('zrem', key, all[i])
      table.insert(ended, all[i])
      table.insert(ended, all[i + 1])
    end
  end
  return ended
end
