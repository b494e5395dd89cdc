package redis

import goredis "github.com/redis/go-redis/v9"

// The lock is a string "<token>:<owner>" with a TTL; the fencing counter and
// the wake-up channel (<lock>:wake) share its hash tag, so all three live in
// one Cluster slot. Every write checks owner and token, so a late renewal or
// release never touches a newer owner's hold. Replies are integers where
// they can be: go-redis reads them without allocating.

// acquireScript: KEYS lock, fence; ARGV owner, ttl ms, fence idle ms.
// Returns the token (> 0) when granted, else minus the milliseconds the
// current hold has left (<= 0).
//
// A grant is two commands: INCR of the counter, then SET NX of the lock (an
// attempt that finds the lock held costs a counter value, and a PTTL).
// The counter is floored at the server clock in milliseconds whenever it is
// new, and its key expires at the clock time token+idle, moved forward every
// refreshEvery tokens, so that it can only expire (or be lost in a restart
// without persistence) once the clock has passed every token it gave: the
// floor keeps tokens increasing while a name left idle leaves no key
// behind. That needs idle >= refreshEvery ms (WithFenceIdle checks it).
// Tokens stay near the clock in milliseconds, below 2^41, leaving the high
// bits to the switcher's epoch. string.format('%d') writes them: Lua prints
// large numbers in exponent form.
var acquireScript = goredis.NewScript(fenceLua + `
local t = fence(KEYS[2], ARGV[3])
if redis.call('set', KEYS[1], string.format('%d', t) .. ':' .. ARGV[1], 'nx', 'px', ARGV[2]) then
  return t
end
local p = redis.call('pttl', KEYS[1])
if p == -1 then
  p = tonumber(ARGV[2])
end
return -p
`)

// fenceLua defines fence(key, idle): the next token of the counter key,
// floored at the server clock in milliseconds when the counter is new, with
// the key's expiry at token+idle, moved every refreshEvery tokens.
const fenceLua = `
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
`

// refreshEvery is how many tokens apart fence moves the counter's expiry
// (the 256 in fenceLua).
const refreshEvery = 256

// renewScript: KEYS lock; ARGV token, owner, ttl ms. Returns 1, or 0 when
// the hold is gone.
var renewScript = goredis.NewScript(`
if redis.call('get', KEYS[1]) == ARGV[1] .. ':' .. ARGV[2] then
  return redis.call('pexpire', KEYS[1], ARGV[3])
end
return 0
`)

// releaseScript: KEYS lock; ARGV token, owner, the subscriber count
// subcommand of PUBSUB (NUMSUB, or SHARDNUMSUB on Cluster), the publish
// command (PUBLISH, or SPUBLISH). Returns 1, or 0 when the hold is gone.
//
// It publishes only when someone listens on the channel: Redis counts the
// subscribers itself, and a waiter that dies takes its subscription (its
// connection) with it, so the count never stays up for a dead waiter.
var releaseScript = goredis.NewScript(`
if redis.call('get', KEYS[1]) ~= ARGV[1] .. ':' .. ARGV[2] then
  return 0
end
redis.call('del', KEYS[1])
local ch = KEYS[1] .. ':wake'
if redis.call('pubsub', ARGV[3], ch)[2] > 0 then
  redis.call(ARGV[4], ch, '1')
end
return 1
`)

// forceReleaseScript: KEYS lock; ARGV as releaseScript's last two. Removes
// the hold whoever owns it and wakes the waiters. Returns the removed
// "<token>:<owner>", or nil when the name was free.
var forceReleaseScript = goredis.NewScript(`
local v = redis.call('get', KEYS[1])
if not v then
  return false
end
redis.call('del', KEYS[1])
local ch = KEYS[1] .. ':wake'
if redis.call('pubsub', ARGV[1], ch)[2] > 0 then
  redis.call(ARGV[2], ch, '1')
end
return v
`)
