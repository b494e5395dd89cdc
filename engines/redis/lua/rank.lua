-- A waiter's rank orders a queue (see Weights in doc.go): heavier first,
-- then by ticket. Tickets stay below 2^41 (fence.lua), so each weight (1
-- to 10) has a band of ranks of its own, and a rank is exact in a double.
-- Queues are kept and wake-ups name waiters by rank, as they did by
-- ticket: with every weight 1 the order is the tickets'.
local band = 2199023255552
local function rank(t, w)
  return (10 - w) * band + t
end
-- arriving is the rank of a caller without a place yet, of weight w: after
-- every waiter of its weight, before every lighter one. A TryLock ranks
-- as weight 1: last.
local function arriving(w)
  return rank(band - 1, w)
end
