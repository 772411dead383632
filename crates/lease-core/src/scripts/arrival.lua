-- lease: Arrival counting, the original n-and-i protocol.
-- KEYS[1] = P{N}:k, KEYS[2] = P{N}:k-1 for the interval k the caller expects.
-- ARGV[1] = interval in ms, ARGV[2] = key TTL in ms, ARGV[3] = expected k.
-- Reply: {1, k, sec, usec, index in k (0-based), count of k-1 or -1}
--     or {0, k, sec, usec} when the server's interval is not the expected one
--        (nothing is written; the caller re-aims with the server time).
local t = redis.call('TIME')
local sec = tonumber(t[1])
local usec = tonumber(t[2])
local k = math.floor((sec * 1000 + math.floor(usec / 1000)) / tonumber(ARGV[1]))
if k ~= tonumber(ARGV[3]) then
  return {0, k, sec, usec}
end
local x = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local prev = redis.call('GET', KEYS[2])
if prev then
  prev = tonumber(prev)
else
  prev = -1
end
return {1, k, sec, usec, x - 1, prev}
