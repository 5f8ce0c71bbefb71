-- luacheck's settings for the fleet's scripts, as Valkey runs them (prelude.lua first):
-- Lua 5.1, with the script's KEYS and ARGV and the server's redis API as globals.
std = "lua51"
read_globals = {"KEYS", "ARGV", "redis"}
-- The prelude's functions: each script uses some of them.
ignore = {"211/fmt", "211/clock", "211/epoch", "211/live_view", "211/record_ack"}
