-- Drops expired members (their lease is over: they are fenced), then returns the epoch, its
-- birth, Valkey's time, and every live member's expiry and ack.
-- KEYS: epoch seq gen leases acks members log waiting waitfor
-- ARGV: fresh_epoch
local nowus, nowms = clock()
local id, born = epoch(nowus, nowms, ARGV[1])
return live_view(nowms, {id, fmt(born), fmt(nowms)})
