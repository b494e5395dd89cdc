-- fence(key, idle) is the next token of the counter key (see Algorithm in
-- doc.go): a new counter starts from the server clock in ms, and its key
-- expires at the clock time token+idle, moved every 256 tokens
-- (refreshEvery). Tokens stay below 2^41, leaving the high bits to the
-- switcher's epoch; string.format('%d') writes them, as Lua prints large
-- numbers in exponent form.
local function fence(key, idle)
  local t = redis.call('incr', key)
  if t == 1 then
    local now = redis.call('time')
    t = now[1] * 1000 + math.floor(now[2] / 1000)
    redis.call('set', key, string.format('%d', t), 'pxat', string.format('%d', t + idle))
  elseif t % 256 == 0 then
    redis.call('pexpireat', key, string.format('%d', t + idle))
  end
  return t
end
