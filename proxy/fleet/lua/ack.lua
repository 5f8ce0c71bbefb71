-- A member's ack, with the figures of each purge it applied (decision 0026). Recorded only
-- for a live member of the same epoch, and only for a number this server handed out (see the
-- sync). The figures are added to a purge's sums only while its control plane waits for them
-- (the field exists). KEYS[10] to KEYS[13] come with the call only when it carries figures.
-- KEYS: epoch seq gen leases acks members log waiting waitfor [purges floors pbytes figures]
-- ARGV: member epoch number figures...
-- (figures: number, entries, bytes, exact 1/0, of each purge applied)
if redis.call('HGET', KEYS[1], 'id') ~= ARGV[2] then return 0 end
if tonumber(ARGV[3]) > tonumber(redis.call('GET', KEYS[2]) or '0') then return 0 end
local _, nowms = clock()
if tonumber(redis.call('ZSCORE', KEYS[4], ARGV[1]) or '0') <= nowms then return 0 end
for i = 4, #ARGV - 3, 4 do
  local sums = redis.call('HGET', KEYS[13], ARGV[i])
  if sums then
    local r, e, b, x = string.match(sums, '^(%d+) (%d+) (%d+) (%d+)$')
    local inexact = tonumber(x) + (ARGV[i + 3] == '1' and 0 or 1)
    redis.call('HSET', KEYS[13], ARGV[i], fmt(tonumber(r) + 1) .. ' ' ..
      fmt(tonumber(e) + tonumber(ARGV[i + 1])) .. ' ' .. fmt(tonumber(b) + tonumber(ARGV[i + 2]))
      .. ' ' .. fmt(inexact))
  end
end
record_ack(ARGV[1], ARGV[3])
return 1
