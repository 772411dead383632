-- lease: Ranked counting (after prelude.lua). Positions are ranks in a sorted
-- set per interval, and the server carries each token's score from the
-- previous interval, so the order of interval k is a function of the order of
-- k-1 alone.
-- ARGV[5] = token (32 hex digits), ARGV[6] = phase to use if the token is not
--           in k-1 (its last known (i + 0.5)/n, or 2 for a newcomer).
-- Reply: {1, k, sec, usec, rank of the token in k-1 or -1, size of k-1}
local rank = redis.call('ZRANK', KEYS[2], ARGV[5])
local size = redis.call('ZCARD', KEYS[2])
local score
if rank then
  score = (rank + 0.5) / size
else
  score = tonumber(ARGV[6])
  rank = -1
end
redis.call('ZADD', KEYS[1], 'NX', score, ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, k, sec, usec, rank, size}
