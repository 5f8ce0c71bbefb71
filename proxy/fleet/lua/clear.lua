-- A clear of one domain: the next number, the domain's generation, the log entry and the hint.
-- KEYS: epoch seq gen leases acks members log waiting waitfor [purges floors pbytes figures]
-- ARGV: domain fresh_epoch by log_cap channel figures
-- The hint names the epoch, the number before this one and this one, and the domain: a
-- member that applied the one before can apply this one without a sync (0014 "Applying
-- hints"). ``figures`` is '1' when the members' acks must carry their figures (a hard purge
-- of all): then, and only then, KEYS[10] to KEYS[13] come with the call. The reply ends with the live
-- members, as the pending script's does: the first look at who must ack is free.
local nowus, nowms = clock()
local id, born = epoch(nowus, nowms, ARGV[2])
local previous = redis.call('GET', KEYS[2]) or '0'
local n = fmt(math.max(tonumber(previous) + 1, nowus))
redis.call('SET', KEYS[2], n)
redis.call('HSET', KEYS[3], ARGV[1], n)
redis.call('XADD', KEYS[7], 'MAXLEN', '~', ARGV[4], '*', 'number', n, 'domain', ARGV[1],
  'by', ARGV[3])
-- A clear whose acks must carry figures (a hard purge of all) says so with a fifth word.
local hint = id .. ' ' .. previous .. ' ' .. n .. ' ' .. ARGV[1]
if ARGV[6] == '1' then hint = hint .. ' clear' end
redis.call('PUBLISH', ARGV[5], hint)
local reply = live_view(nowms, {n, id, fmt(born), fmt(nowms)})
redis.call('DEL', KEYS[8])
for i = 5, #reply, 3 do redis.call('SADD', KEYS[8], reply[i]) end
redis.call('SET', KEYS[9], n)
if ARGV[6] == '1' then redis.call('HSET', KEYS[13], n, '0 0 0 0') end
return reply
