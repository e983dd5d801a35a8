-- GCRA over every bucket of one call, all or none (see package doc).
-- KEYS[i]: the bucket's key. ARGV[2i-1], ARGV[2i]: its rate (tokens/s) and
-- burst (tokens). A bucket is a hash: base (integer microseconds, TIME when
-- written), debt (microseconds, TAT - base, >= 0), r and b (the limit it
-- last saw). Returns strings: "1" or "0" (all allowed), then for each bucket
-- the tokens it held before the take (%.17g), from which the caller
-- computes Remaining and Retry-After.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local n = #KEYS
local debts, ivals, out = {}, {}, {'1'}
local all = true
for i = 1, n do
  local rate, burst = tonumber(ARGV[2 * i - 1]), tonumber(ARGV[2 * i])
  local ival = 1000000 / rate -- emission interval T, microseconds
  local h = redis.call('HMGET', KEYS[i], 'base', 'debt', 'r', 'b')
  local debt = 0
  if h[1] then
    debt = math.max(0, tonumber(h[2]) - math.max(0, now - tonumber(h[1])))
    local orate, oburst = tonumber(h[3]), tonumber(h[4])
    if orate ~= rate or oburst ~= burst then
      local tokens = math.min(burst, oburst - debt * orate / 1000000)
      debt = math.max(0, (burst - tokens) * ival)
    end
  end
  local tokens = burst - debt / ival
  if tokens < 1 then all = false end
  debts[i], ivals[i] = debt, ival
  out[i + 1] = string.format('%.17g', tokens)
end
if not all then
  out[1] = '0'
  return out
end
for i = 1, n do
  local debt = debts[i] + ivals[i]
  redis.call('HSET', KEYS[i], 'base', string.format('%d', now), 'debt', string.format('%.17g', debt),
    'r', ARGV[2 * i - 1], 'b', ARGV[2 * i])
  redis.call('PEXPIRE', KEYS[i], string.format('%d', math.min(math.ceil(debt / 1000) + 1, 70368744177664)))
end
return out
