package redis

import goredis "github.com/redis/go-redis/v9"

// The lock is a hash {owner, token} with a TTL; the fencing counter and the
// wake-up channel share its hash tag, so all three live in one Cluster slot.
// Every write checks owner and token, so a late renewal or release never
// touches a newer owner's hold.

// acquireScript: KEYS lock, fence; ARGV owner, ttl ms.
// Returns {1, token} or {0, remaining ttl ms}.
//
// The token is at least the server's clock in milliseconds, so tokens keep
// increasing even when a restart without persistence lost the counter
// (unless one name was granted more than 1000 times a second for long).
// Milliseconds keep tokens below 2^41, leaving the high bits to the
// switcher's epoch. Strings carry it: Lua prints large numbers in exponent
// form unless told otherwise.
var acquireScript = goredis.NewScript(`
if redis.call('exists', KEYS[1]) == 1 then
  return {0, redis.call('pttl', KEYS[1])}
end
local token = redis.call('incr', KEYS[2])
local now = redis.call('time')
local floor = now[1] .. string.format('%03d', math.floor(tonumber(now[2]) / 1000))
if token < tonumber(floor) then
  redis.call('set', KEYS[2], floor)
  token = floor
else
  token = string.format('%d', token)
end
redis.call('hset', KEYS[1], 'owner', ARGV[1], 'token', token)
redis.call('pexpire', KEYS[1], ARGV[2])
return {1, token}
`)

// renewScript: KEYS lock; ARGV owner, token, ttl ms. Returns 1, or 0 when
// the hold is gone.
var renewScript = goredis.NewScript(`
local v = redis.call('hmget', KEYS[1], 'owner', 'token')
if v[1] == ARGV[1] and v[2] == ARGV[2] then
  redis.call('pexpire', KEYS[1], ARGV[3])
  return 1
end
return 0
`)

// releaseScript: KEYS lock, channel; ARGV owner, token, publish command
// (PUBLISH, or SPUBLISH on Cluster). Returns 1, or 0 when the hold is gone.
var releaseScript = goredis.NewScript(`
local v = redis.call('hmget', KEYS[1], 'owner', 'token')
if v[1] == ARGV[1] and v[2] == ARGV[2] then
  redis.call('del', KEYS[1])
  redis.call(ARGV[3], KEYS[2], '1')
  return 1
end
return 0
`)

// forceReleaseScript: KEYS lock, channel; ARGV publish command. Removes the
// hold whoever owns it and wakes the waiters. Returns {owner, token} of the
// removed hold, or an empty array when the name was free.
var forceReleaseScript = goredis.NewScript(`
local v = redis.call('hmget', KEYS[1], 'owner', 'token')
if not v[1] then
  return {}
end
redis.call('del', KEYS[1])
redis.call(ARGV[1], KEYS[2], '1')
return v
`)
