-- Sets KEYS[1] to ARGV[2] if it holds ARGV[1] ('0': absent).
if (redis.call('GET', KEYS[1]) or '0') ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1
