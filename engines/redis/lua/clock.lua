-- clock is the server clock in ms.
local function clock()
  local t = redis.call('time')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end
-- ms writes an integer: Lua prints large numbers in exponent form.
local function ms(n)
  return string.format('%d', n)
end
-- listened tells whether ch has subscribers: a release publishes only
-- then (see release.lua), and works out its message only then.
local function listened(ch, numsub)
  return redis.call('pubsub', numsub, ch)[2] > 0
end
