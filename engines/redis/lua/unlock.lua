-- unlock deletes the mutex's lock and wakes its waiters, publishing only
-- when someone listens on the channel (see Algorithm in doc.go).
local function unlock(lock, numsub, publish)
  redis.call('del', lock)
  local ch = lock .. ':wake'
  if redis.call('pubsub', numsub, ch)[2] > 0 then
    redis.call(publish, ch, '1')
  end
end
