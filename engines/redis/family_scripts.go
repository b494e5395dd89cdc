package redis

// The read-write lock of a name lives under <lock>:rw, with the mutex's
// hash tag:
//
//	<lock>:rw        the writer: a string "<token>:<owner>" with a TTL
//	<lock>:rw:r      the readers: a sorted set of "<token>:<owner>" scored by
//	                 the server time (ms) at which each read hold expires
//	<lock>:rw:ww     the waiting writers: a sorted set of "<ticket>:<owner>"
//	                 scored by the time their intent expires unless refreshed
//	<lock>:rw:wr     the waiting readers, as the waiting writers: a record
//	                 for operators, which no grant consults
//	<lock>:rw:fence  the fencing counter, readers' and writers' alike
//	<lock>:rw:wake   the wake-up channel
//
// The semaphore lives under <lock>:sem:
//
//	<lock>:sem       the permit holds: a sorted set of
//	                 "<token>:<permits>:<owner>" scored by their expiry
//	<lock>:sem:n     the permit count, a string without TTL
//	<lock>:sem:fence the fencing counter
//	<lock>:sem:w     the permit waiters: a sorted set of
//	                 "<ticket>:<permits>:<owner>" scored by the time their
//	                 entry expires unless refreshed; a record for operators,
//	                 which no grant consults
//	<lock>:sem:wake  the wake-up channel
//
// The scripts drop the entries whose expiry has passed before they count
// them (a writer prunes the readers, a semaphore grant the holds), and keep
// the TTL of a sorted set at its latest score, so that a name left idle
// leaves nothing but the semaphore's count behind. A ticket is a value of
// the fencing counter taken by a waiter when it first finds the lock (or
// the permits) taken and will wait: it orders the waiters, names a
// waiter's entry, and a grant's token is always higher. A waiter refreshes
// its entry at every attempt, at least every TTL/3, and removes it when it
// is granted or gives up: the entry of a waiter whose process died
// expires with its TTL.

// clockLua defines what the family's and the fair mutex's scripts share:
// the server clock in ms, ms (an integer as a string: Lua prints large
// numbers in exponent form) and listened.
const clockLua = `
local function clock()
  local t = redis.call('time')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end
local function ms(n)
  return string.format('%d', n)
end
-- listened tells whether ch has subscribers: a release publishes only
-- then (see releaseScript), and works out its message only then.
local function listened(ch, numsub)
  return redis.call('pubsub', numsub, ch)[2] > 0
end
`

// familyLua is the prelude of the family's scripts: the server clock, the
// fencing counter (fenceLua), pruning, and the wake-up publication.
const familyLua = fenceLua + clockLua + `
-- touch keeps a sorted set's TTL at its latest score.
local function touch(key)
  local top = redis.call('zrange', key, -1, -1, 'withscores')
  if top[2] then
    redis.call('pexpireat', key, top[2])
  end
end
local function prune(key, now)
  redis.call('zremrangebyscore', key, '-inf', now)
end
-- firstWriter is the lowest ticket among the waiting writers and the
-- expiry of its intent; 0 when none waits.
local function firstWriter(ww)
  local first, exp = 0, 0
  local all = redis.call('zrange', ww, 0, -1, 'withscores')
  for i = 1, #all, 2 do
    local t = tonumber(string.match(all[i], '^(%d+):'))
    if first == 0 or t < first then
      first, exp = t, tonumber(all[i + 1])
    end
  end
  return first, exp
end
-- permitsOut sums the permits of the holds in key.
local function permitsOut(key)
  local n = 0
  for _, m in ipairs(redis.call('zrange', key, 0, -1)) do
    n = n + tonumber(string.match(m, '^%d+:(%d+):'))
  end
  return n
end
-- tellFree tells the waiters of the semaphore whose holds are in key and
-- count in count how many permits are free: "p<free>".
local function tellFree(key, count, numsub, publish)
  local ch = key .. ':wake'
  if listened(ch, numsub) then
    prune(key, clock())
    local free = (tonumber(redis.call('get', count)) or 0) - permitsOut(key)
    if free > 0 then
      redis.call(publish, ch, 'p' .. ms(free))
    end
  end
end
`

// waitLua defines what the acquire scripts add to familyLua: enlist, which
// records a waiter. Kept out of familyLua, whose every function costs each
// script that includes it a closure per call.
const waitLua = `
-- enlist draws a waiter's ticket from the counter fk (idle: its idle
-- time) unless it has one, records or refreshes its entry
-- "<ticket>:<rest>" in the sorted set key, expiring ttl ms from now unless
-- refreshed, and returns the ticket and the time to wait at most before
-- the next refresh, from wait.
local function enlist(key, fk, idle, ticket, rest, now, ttl, wait)
  if ticket == 0 then
    ticket = fence(fk, idle)
  end
  prune(key, now)
  redis.call('zadd', key, ms(now + ttl), ms(ticket) .. ':' .. rest)
  touch(key)
  return ticket, math.min(wait, math.floor(ttl / 3))
end
`

// forceLua defines what the force scripts add to familyLua: forced, the
// entries of a sorted set whose token is given, or all of them.
const forceLua = `
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
`

// rwAcquireScript: KEYS writer, readers, waiting writers, fence, waiting
// readers; ARGV owner,
// ttl ms, fence idle ms, mode ('r' or 'w'), ticket (0: none yet), register
// ('1' when the caller will wait), the caller's own write hold
// "<token>:<owner>" for a downgrade (empty otherwise).
//
// Returns the token (> 0) when granted, else {ms to wait at most, ticket}.
// A writer gets in when nobody holds the lock; one that will wait records
// its intent under its ticket, refreshed by every attempt (it waits at most
// ttl/3 between them), and removed when it is granted. A reader gets in
// when no writer holds it and no writer with a lower ticket waits (so new
// readers queue behind a waiting writer, and readers that queued first go
// before it); a downgrade, whose owner holds the write side, at once, with
// the writer's token. A reader that will wait is recorded the same way
// among the waiting readers, which only operators read.
var rwAcquireScript = newScript(familyLua + waitLua + `
local ttl, ticket = tonumber(ARGV[2]), tonumber(ARGV[5])
local w = redis.call('get', KEYS[1])
local now, wait
if ARGV[4] == 'w' then
  if not w and redis.call('exists', KEYS[2]) == 1 then
    now = clock()
    prune(KEYS[2], now)
  end
  if not w and redis.call('exists', KEYS[2]) == 0 then
    local t = fence(KEYS[4], ARGV[3])
    redis.call('set', KEYS[1], ms(t) .. ':' .. ARGV[1], 'px', ARGV[2])
    if ticket > 0 then
      redis.call('zrem', KEYS[3], ms(ticket) .. ':' .. ARGV[1])
    end
    return t
  end
  now = now or clock()
  if w then
    wait = redis.call('pttl', KEYS[1])
  else
    wait = tonumber(redis.call('zrange', KEYS[2], -1, -1, 'withscores')[2]) - now
  end
  if wait < 0 then
    wait = ttl
  end
  if ARGV[6] == '1' then
    ticket, wait = enlist(KEYS[3], KEYS[4], ARGV[3], ticket, ARGV[1], now, ttl, wait)
  end
  return {math.max(wait, 1), ticket}
end
now = clock()
local t
if w and w == ARGV[7] then
  t = tonumber(string.match(w, '^(%d+):'))
elseif w then
  wait = redis.call('pttl', KEYS[1])
else
  local first, exp = 0, 0
  if redis.call('exists', KEYS[3]) == 1 then
    prune(KEYS[3], now)
    first, exp = firstWriter(KEYS[3])
  end
  if first == 0 or (ticket > 0 and ticket < first) then
    t = fence(KEYS[4], ARGV[3])
  else
    wait = exp - now
  end
end
if t then
  redis.call('zadd', KEYS[2], ms(now + ttl), ms(t) .. ':' .. ARGV[1])
  touch(KEYS[2])
  if ticket > 0 then
    redis.call('zrem', KEYS[5], ms(ticket) .. ':' .. ARGV[1])
  end
  return t
end
if wait < 0 then
  wait = ttl
end
if ARGV[6] == '1' then
  ticket, wait = enlist(KEYS[5], KEYS[4], ARGV[3], ticket, ARGV[1], now, ttl, wait)
end
return {math.max(wait, 1), ticket}
`)

// rwReleaseScript: KEYS writer, readers, waiting writers; ARGV mode, the
// hold's "<token>:<owner>", PUBSUB's subscriber count subcommand, the
// publish command. Returns 1, or 0 when the hold is gone.
//
// A read hold past its expiry that no script has pruned yet still counts
// as held: every grant prunes first, so nobody has acted on its expiry.
//
// A writer's release tells the readers which may go: "w<ticket>", the
// lowest ticket of a waiting writer ("w0": none waits). The last reader's
// release tells a waiting writer: "r".
var rwReleaseScript = newScript(familyLua + `
local ch = KEYS[1] .. ':wake'
if ARGV[1] == 'w' then
  if redis.call('get', KEYS[1]) ~= ARGV[2] then
    return 0
  end
  redis.call('del', KEYS[1])
  if listened(ch, ARGV[3]) then
    local first = 0
    if redis.call('exists', KEYS[3]) == 1 then
      prune(KEYS[3], clock())
      first = firstWriter(KEYS[3])
    end
    redis.call(ARGV[4], ch, 'w' .. ms(first))
  end
  return 1
end
if redis.call('zrem', KEYS[2], ARGV[2]) == 0 then
  return 0
end
if redis.call('exists', KEYS[3]) == 1 and redis.call('exists', KEYS[1]) == 0 then
  local now = clock()
  prune(KEYS[2], now)
  prune(KEYS[3], now)
  if redis.call('exists', KEYS[2]) == 0 and redis.call('exists', KEYS[3]) == 1 and listened(ch, ARGV[3]) then
    redis.call(ARGV[4], ch, 'r')
  end
end
return 1
`)

// rwUnwaitScript: KEYS writer, waiting writers; ARGV "<ticket>:<owner>",
// and the two of releaseScript. Withdraws a waiting writer's intent and
// tells the readers it held back. Returns 1.
var rwUnwaitScript = newScript(familyLua + `
local ch = KEYS[1] .. ':wake'
if redis.call('zrem', KEYS[2], ARGV[1]) == 1 and redis.call('exists', KEYS[1]) == 0 and listened(ch, ARGV[2]) then
  prune(KEYS[2], clock())
  redis.call(ARGV[3], ch, 'w' .. ms(firstWriter(KEYS[2])))
end
return 1
`)

// semAcquireScript: KEYS holds, count, fence, waiters; ARGV owner, ttl ms,
// fence idle ms, permits wanted, the opener's count, check ('1': fail when
// the stored count differs), ticket (0: none yet), register ('1' when the
// caller will wait).
//
// Stores the opener's count when none is stored. Returns the token (> 0)
// when granted, {ms to wait at most, ticket} when the permits are out, or
// the error "PERMITS <stored>" on a mismatch. A caller that will wait is
// recorded among the waiters, as rwAcquireScript's waiting readers.
var semAcquireScript = newScript(familyLua + waitLua + `
local limit = tonumber(redis.call('get', KEYS[2]))
if not limit then
  limit = tonumber(ARGV[5])
  redis.call('set', KEYS[2], ARGV[5])
end
if ARGV[6] == '1' and limit ~= tonumber(ARGV[5]) then
  return redis.error_reply('PERMITS ' .. ms(limit))
end
local now, ttl, ticket = clock(), tonumber(ARGV[2]), tonumber(ARGV[7])
prune(KEYS[1], now)
if permitsOut(KEYS[1]) + tonumber(ARGV[4]) <= limit then
  local t = fence(KEYS[3], ARGV[3])
  redis.call('zadd', KEYS[1], ms(now + ttl), ms(t) .. ':' .. ARGV[4] .. ':' .. ARGV[1])
  touch(KEYS[1])
  if ticket > 0 then
    redis.call('zrem', KEYS[4], ms(ticket) .. ':' .. ARGV[4] .. ':' .. ARGV[1])
  end
  return t
end
local first = redis.call('zrange', KEYS[1], 0, 0, 'withscores')[2]
local wait = ttl
if first then
  wait = tonumber(first) - now
end
if ARGV[8] == '1' then
  ticket, wait = enlist(KEYS[4], KEYS[3], ARGV[3], ticket, ARGV[4] .. ':' .. ARGV[1], now, ttl, wait)
end
return {math.max(wait, 1), ticket}
`)

// semReleaseScript: KEYS holds, count; ARGV the hold's member, and the two
// of releaseScript. Returns 1, or 0 when the hold is gone (as
// rwReleaseScript's readers). Tells the waiters how many permits are free:
// "p<free>".
var semReleaseScript = newScript(familyLua + `
if redis.call('zrem', KEYS[1], ARGV[1]) == 0 then
  return 0
end
tellFree(KEYS[1], KEYS[2], ARGV[2], ARGV[3])
return 1
`)

// semSetScript: KEYS holds, count; ARGV the new count, and the two of
// releaseScript. Stores the count and tells the waiters what is free.
var semSetScript = newScript(familyLua + `
redis.call('set', KEYS[2], ARGV[1])
tellFree(KEYS[1], KEYS[2], ARGV[2], ARGV[3])
return 1
`)

// familyInspectScript: KEYS a string, then sorted sets. Returns the server
// time, the string's value (empty when absent) and PTTL, and each set with
// its scores.
var familyInspectScript = newScript(familyLua + `
local r = {clock(), redis.call('get', KEYS[1]) or '', redis.call('pttl', KEYS[1])}
for i = 2, #KEYS do
  r[#r + 1] = redis.call('zrange', KEYS[i], 0, -1, 'withscores')
end
return r
`)

// rwForceScript: KEYS writer, readers, waiting writers; ARGV a token ('0':
// any), and the two of releaseScript. Ends the holds with that token, the
// writer's and the readers' (a downgrading owner's two share it), and
// wakes the waiters as a release would: when the writer went, or the last
// reader while no writer holds, "w<ticket>" of the first waiting writer.
// Returns as familyInspectScript (the writer's value when it was ended,
// and the readers it ended).
var rwForceScript = newScript(familyLua + forceLua + `
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
local ch = KEYS[1] .. ':wake'
if (w ~= '' or (#ended > 0 and redis.call('exists', KEYS[2]) == 0)) and
    redis.call('exists', KEYS[1]) == 0 and listened(ch, ARGV[2]) then
  local first = 0
  if redis.call('exists', KEYS[3]) == 1 then
    prune(KEYS[3], now)
    first = firstWriter(KEYS[3])
  end
  redis.call(ARGV[3], ch, 'w' .. ms(first))
end
return {now, w, left, ended}
`)

// semForceScript: KEYS holds, count; ARGV a token ('0': any), and the two
// of releaseScript. Ends the permit holds with that token and tells the
// waiters what is free. Returns as familyInspectScript (no string, and the
// holds it ended).
var semForceScript = newScript(familyLua + forceLua + `
local now = clock()
prune(KEYS[1], now)
local ended = forced(KEYS[1], ARGV[1])
if #ended > 0 then
  touch(KEYS[1])
  tellFree(KEYS[1], KEYS[2], ARGV[2], ARGV[3])
end
return {now, '', 0, ended}
`)
