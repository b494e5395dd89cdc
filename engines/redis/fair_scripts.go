package redis

// A fair engine (WithFair) keeps the mutex's lock, counter and channel, and
// queues its waiters next to them, under the same hash tag:
//
//	<lock>:queue      the waiters: a sorted set of "<ticket>:<owner>" scored
//	                  by the ticket, so the first in line is the lowest
//	<lock>:queue:exp  the same members scored by the server time (ms) at
//	                  which each place expires unless refreshed
//
// A ticket is a value of the fencing counter, drawn by a waiter when it
// first finds the lock taken: tickets give the arrival order, and every
// later grant's token exceeds them. Both sets expire with their latest
// place, so a name left idle leaves nothing behind. A release tells the
// first waiter's process "q<ticket>": the other processes ignore it.

// fairLua is the prelude of the fair scripts: the fencing counter
// (fenceLua), clockLua's functions and the queue's own.
const fairLua = fenceLua + clockLua + `
-- evict drops the waiters whose place has expired.
local function evict(q, qx, now)
  local dead = redis.call('zrange', qx, '-inf', ms(now), 'byscore')
  if #dead > 0 then
    for _, m in ipairs(dead) do
      redis.call('zrem', q, m)
    end
    redis.call('zremrangebyscore', qx, '-inf', ms(now))
  end
end
-- first is the member of the first waiter in line; nil when none waits.
local function first(q)
  return redis.call('zrange', q, 0, 0)[1]
end
-- wakeFirst tells the first waiter's process that its turn came.
local function wakeFirst(lock, q, numsub, publish)
  local f = first(q)
  local ch = lock .. ':wake'
  if f and listened(ch, numsub) then
    redis.call(publish, ch, 'q' .. string.match(f, '^(%d+):'))
  end
end
-- freed wakes the first live waiter, if any, of a lock just freed.
local function freed(lock, q, qx, numsub, publish)
  if redis.call('exists', q) == 1 then
    evict(q, qx, clock())
    wakeFirst(lock, q, numsub, publish)
  end
end
`

// fairAcquireScript: KEYS lock, fence, queue, expiries; ARGV owner, ttl ms,
// fence idle ms, ticket (0: none yet), register ('1' when the caller will
// wait), place lifetime ms.
//
// Returns the token (> 0) when granted, else {ms to wait at most, ticket}.
// The lock is granted when it is free and nobody waits, or the caller is
// first in line (then it leaves the queue). A caller that will wait takes
// its place (drawing its ticket the first time) or refreshes it. The wait
// is the holder's time left, or, when the lock is free and another waiter
// is first, the time until that waiter's place expires.
var fairAcquireScript = newScript(fairLua + `
local ticket = tonumber(ARGV[4])
local me = ms(ticket) .. ':' .. ARGV[1]
local now, head
if redis.call('exists', KEYS[3]) == 1 then
  now = clock()
  evict(KEYS[3], KEYS[4], now)
  head = first(KEYS[3])
end
local left = redis.call('pttl', KEYS[1])
if left == -2 and (not head or head == me) then
  local t = fence(KEYS[2], ARGV[3])
  redis.call('set', KEYS[1], ms(t) .. ':' .. ARGV[1], 'px', ARGV[2])
  if head then
    redis.call('zrem', KEYS[3], me)
    redis.call('zrem', KEYS[4], me)
  end
  return t
end
if left == -2 then
  left = tonumber(redis.call('zscore', KEYS[4], head)) - now
elseif left == -1 then
  left = tonumber(ARGV[2])
end
if ARGV[5] == '1' then
  now = now or clock()
  if ticket == 0 then
    ticket = fence(KEYS[2], ARGV[3])
    me = ms(ticket) .. ':' .. ARGV[1]
  end
  local exp = ms(now + tonumber(ARGV[6]))
  redis.call('zadd', KEYS[3], ms(ticket), me)
  redis.call('zadd', KEYS[4], exp, me)
  redis.call('pexpireat', KEYS[3], exp)
  redis.call('pexpireat', KEYS[4], exp)
end
return {math.max(left, 1), ticket}
`)

// fairReleaseScript: KEYS lock, queue, expiries; ARGV token, owner, PUBSUB's
// subscriber count subcommand, the publish command. Returns 1, or 0 when
// the hold is gone. Wakes the first waiter in line.
var fairReleaseScript = newScript(fairLua + `
if redis.call('get', KEYS[1]) ~= ARGV[1] .. ':' .. ARGV[2] then
  return 0
end
redis.call('del', KEYS[1])
freed(KEYS[1], KEYS[2], KEYS[3], ARGV[3], ARGV[4])
return 1
`)

// fairForceScript: KEYS lock, queue, expiries; ARGV as fairReleaseScript's
// last two. Removes the hold whoever owns it and wakes the first waiter.
// Returns the removed "<token>:<owner>", or nil when the name was free.
var fairForceScript = newScript(fairLua + `
local v = redis.call('get', KEYS[1])
if not v then
  return false
end
redis.call('del', KEYS[1])
freed(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2])
return v
`)

// fairLeaveScript: KEYS lock, queue, expiries; ARGV the waiter's member,
// and fairReleaseScript's last two. Takes a waiter that gives up out of
// the queue; when it was first and the lock is free, wakes the next.
// Returns 1.
var fairLeaveScript = newScript(fairLua + `
local head = first(KEYS[2])
if redis.call('zrem', KEYS[2], ARGV[1]) == 1 then
  redis.call('zrem', KEYS[3], ARGV[1])
  if head == ARGV[1] and redis.call('exists', KEYS[1]) == 0 then
    freed(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3])
  end
end
return 1
`)

// fairRefreshScript: KEYS lock, queue, expiries; ARGV place lifetime ms,
// fairReleaseScript's last two, then the members of one process's
// waiters. Refreshes the places of those still queued, then evicts the
// expired ones; when that changed who is first while the lock is free,
// wakes the new first. Returns the members that were no longer queued:
// granted since, or evicted while their process stalled.
var fairRefreshScript = newScript(fairLua + `
local now = clock()
local exp = ms(now + tonumber(ARGV[1]))
local gone = {}
for i = 4, #ARGV do
  if redis.call('zscore', KEYS[2], ARGV[i]) then
    redis.call('zadd', KEYS[3], exp, ARGV[i])
  else
    gone[#gone + 1] = ARGV[i]
  end
end
if redis.call('exists', KEYS[2]) == 1 then
  redis.call('pexpireat', KEYS[2], exp)
  redis.call('pexpireat', KEYS[3], exp)
  local head = first(KEYS[2])
  evict(KEYS[2], KEYS[3], now)
  if first(KEYS[2]) ~= head and redis.call('exists', KEYS[1]) == 0 then
    wakeFirst(KEYS[1], KEYS[2], ARGV[2], ARGV[3])
  end
end
return gone
`)
