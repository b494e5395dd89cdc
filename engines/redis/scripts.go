package redis

import goredis "github.com/redis/go-redis/v9"

// luaScript is a script the engine runs by its SHA (EVALSHA), with its
// body kept for a server that lacks it: that one command goes again as
// EVAL, to the node that serves its keys, which caches the script too.
// SCRIPT LOAD would not do: a ClusterClient sends it to every master and
// fails if one of them is down.
type luaScript struct {
	*goredis.Script
	src string
}

func newScript(src string) *luaScript {
	return &luaScript{Script: goredis.NewScript(src), src: src}
}

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
var acquireScript = newScript(fenceLua + `
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

// renewScript renews a chunk of holds in one call. KEYS the holds' keys,
// all in one Cluster slot; ARGV three per hold: its kind ('s': a string
// "<token>:<owner>" with a TTL, the mutex's or a writer's; 'z': an entry of
// a sorted set scored by its expiry, a reader's or a permit's), the string
// or the entry, the TTL in ms. Returns the positions (from 1) of the holds
// that are gone: an empty list when all were renewed.
var renewScript = newScript(familyLua + `
local lost, now, touched = {}, nil, {}
for i, key in ipairs(KEYS) do
  local v, ttl = ARGV[3 * i - 1], ARGV[3 * i]
  if ARGV[3 * i - 2] == 's' then
    if redis.call('get', key) == v then
      redis.call('pexpire', key, ttl)
    else
      lost[#lost + 1] = i
    end
  else
    now = now or clock()
    local s = redis.call('zscore', key, v)
    if s and tonumber(s) > now then
      redis.call('zadd', key, ms(now + ttl), v)
      touched[key] = true
    else
      lost[#lost + 1] = i
    end
  end
end
for key in pairs(touched) do
  touch(key)
end
return lost
`)

// releaseScript: KEYS lock; ARGV token, owner, the subscriber count
// subcommand of PUBSUB (NUMSUB, or SHARDNUMSUB on Cluster), the publish
// command (PUBLISH, or SPUBLISH). Returns 1, or 0 when the hold is gone.
//
// It publishes only when someone listens on the channel: Redis counts the
// subscribers itself, and a waiter that dies takes its subscription (its
// connection) with it, so the count never stays up for a dead waiter.
var releaseScript = newScript(`
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
var forceReleaseScript = newScript(`
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
