-- A purge other than a clear (decision 0026). A purge is a clear in everything but what it
-- does to a member's store: the same next number (max(seq + 1, now_us)), the same log entry,
-- hint and set of members waited for. It does not move the domain's generation (only a clear
-- does); instead it adds its record to KEYS[10], where members read it: the hint names only
-- the kind. The records kept are bounded; the oldest go first, and each domain's floor
-- (KEYS[11]) keeps the highest number dropped, so a member that needed one clears the domain
-- instead. The reply is the clear script's, with the domain's generation after the number;
-- or 'unable N' (nothing written) when N live members do not say they apply purge records.
-- KEYS: epoch seq gen leases acks members log waiting waitfor purges floors pbytes figures
-- ARGV: domain fresh_epoch by log_cap channel kind soft items kept_records kept_bytes
local nowus, nowms = clock()
-- Every live member must apply purge records: one of a build older than decision 0026
-- would sync and ack this purge without applying it. Refused before anything is written.
local unable = 0
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '(' .. fmt(nowms), '+inf')) do
  local info = redis.call('HGET', KEYS[6], m) or ''
  if not string.find(info, '"purges":1', 1, true) then unable = unable + 1 end
end
if unable > 0 then return {'unable', fmt(unable)} end
local id, born = epoch(nowus, nowms, ARGV[2])
local previous = redis.call('GET', KEYS[2]) or '0'
local n = fmt(math.max(tonumber(previous) + 1, nowus))
redis.call('SET', KEYS[2], n)
local record = n .. ' ' .. ARGV[1] .. ' ' .. ARGV[6] .. ' ' .. ARGV[7] .. ' ' .. ARGV[8]
redis.call('ZADD', KEYS[10], n, record)
local size = redis.call('INCRBY', KEYS[12], #record)
while true do
  local count = redis.call('ZCARD', KEYS[10])
  if count <= 1 or (count <= tonumber(ARGV[9]) and size <= tonumber(ARGV[10])) then break end
  local oldest = redis.call('ZRANGE', KEYS[10], 0, 0)[1]
  redis.call('ZREM', KEYS[10], oldest)
  size = redis.call('DECRBY', KEYS[12], #oldest)
  local number, domain = string.match(oldest, '^(%d+) (%S+)')
  if tonumber(number) > tonumber(redis.call('HGET', KEYS[11], domain) or '0') then
    redis.call('HSET', KEYS[11], domain, number)
  end
  redis.call('HDEL', KEYS[13], number)
end
redis.call('XADD', KEYS[7], 'MAXLEN', '~', ARGV[4], '*', 'number', n, 'domain', ARGV[1],
  'by', ARGV[3], 'kind', ARGV[6], 'soft', ARGV[7])
redis.call('PUBLISH', ARGV[5],
  id .. ' ' .. previous .. ' ' .. n .. ' ' .. ARGV[1] .. ' ' .. ARGV[6])
local gen = redis.call('HGET', KEYS[3], ARGV[1]) or '0'
local reply = live_view(nowms, {n, gen, id, fmt(born), fmt(nowms)})
redis.call('DEL', KEYS[8])
for i = 6, #reply, 3 do redis.call('SADD', KEYS[8], reply[i]) end
redis.call('SET', KEYS[9], n)
-- The figures members send with their acks are summed here (the ack script), while the
-- control plane waits; it takes them away when it answers. A control plane that died
-- leaves its field behind: past 4,096 fields the oldest half goes.
if redis.call('HLEN', KEYS[13]) > 4096 then
  local fields = redis.call('HKEYS', KEYS[13])
  table.sort(fields, function(a, b) return tonumber(a) < tonumber(b) end)
  for i = 1, 2048 do redis.call('HDEL', KEYS[13], fields[i]) end
end
redis.call('HSET', KEYS[13], n, '0 0 0 0')
return reply
