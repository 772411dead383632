-- lease: Arrival counting, the original n-and-i protocol (after prelude.lua).
-- Reply: {1, k, sec, usec, index in k (0-based), count of k-1 or -1}
refresh_rules()
local x = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local prev = redis.call('GET', KEYS[2])
if prev then
  prev = tonumber(prev)
else
  prev = -1
end
return {1, k, sec, usec, x - 1, prev}
