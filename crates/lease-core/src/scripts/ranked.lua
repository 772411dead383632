-- lease: Ranked counting. Positions are ranks in a sorted set per interval,
-- and the server carries each token's score from the previous interval, so
-- the order of interval k is a function of the order of k-1 alone.
-- KEYS[1] = P{N}:k, KEYS[2] = P{N}:k-1 for the interval k the caller expects.
-- ARGV[1] = interval in ms, ARGV[2] = key TTL in ms, ARGV[3] = expected k,
-- ARGV[4] = token (32 hex digits), ARGV[5] = phase to use if the token is not
--           in k-1 (its last known (i + 0.5)/n, or 2 for a newcomer).
-- Reply: {1, k, sec, usec, rank of the token in k-1 or -1, size of k-1}
--     or {0, k, sec, usec} when the server's interval is not the expected one.
local t = redis.call('TIME')
local sec = tonumber(t[1])
local usec = tonumber(t[2])
local k = math.floor((sec * 1000 + math.floor(usec / 1000)) / tonumber(ARGV[1]))
if k ~= tonumber(ARGV[3]) then
  return {0, k, sec, usec}
end
local rank = redis.call('ZRANK', KEYS[2], ARGV[4])
local size = redis.call('ZCARD', KEYS[2])
local score
if rank then
  score = (rank + 0.5) / size
else
  score = tonumber(ARGV[5])
  rank = -1
end
redis.call('ZADD', KEYS[1], 'NX', score, ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, k, sec, usec, rank, size}
