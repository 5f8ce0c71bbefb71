"""The fleet's data in Valkey, and the only code that talks to it (docs/decisions/0014).

Every step of the protocol is one Lua script, so it is atomic in Valkey: a clear, a sync, an
ack, the pending read, and the read of members for the Nodes page. Scripts are registered
once and called with EVALSHA (``register_script`` loads them again after a restart, whose
script cache is empty). All keys share the ``{cdn}`` hash tag, so every script's keys live in
one slot of a cluster. Valkey exceptions are translated here, and nowhere else, into
``FleetUnavailable``; every call has a timeout, and after a failure the connections are
dropped, so the next call starts on a fresh one (a black-holed connection never answers).
With ``replicas`` > 0, a clear and a sync are each followed by ``WAIT replicas`` on the same
connection, and count only when that many replicas have them (0014 "Failover").

Numbers (clear numbers, generations) are microseconds of Valkey's clock or above, so they
are formatted with ``%.0f`` in Lua: its numbers are doubles, exact to 2^53 (year 2255 in
microseconds), and its default formatting would print them in exponent notation.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import valkey.asyncio
import valkey.exceptions

from proxy.core.lease import FleetView, LiveMember, SyncResult
from proxy.core.purge.fleet import KEPT_BYTES, KEPT_RECORDS, NO_FIGURES, Figures, PurgeRecord
from proxy.core.purge.purges import Purge
from proxy.errors import FleetUnavailable, NotReplicated, PurgeUnsupported, WireError
from proxy.fleet import purge_scripts
from proxy.wire.fleet import (
    pack_dry_ask,
    pack_record,
    record_head,
    unpack_figures,
    unpack_record,
)

KEYS = (
    "{cdn}:epoch",  # KEYS[1] hash: id, born (Valkey ms)
    "{cdn}:seq",  # KEYS[2] the number of the last clear
    "{cdn}:gen",  # KEYS[3] hash: domain -> the number of its last clear
    "{cdn}:leases",  # KEYS[4] sorted set: member -> lease expiry (Valkey ms)
    "{cdn}:acks",  # KEYS[5] hash: member -> last applied number in this epoch
    "{cdn}:members",  # KEYS[6] hash: member -> JSON for the Nodes page
    "{cdn}:log",  # KEYS[7] stream: one entry per clear
    "{cdn}:waiting",  # KEYS[8] set: the live members the latest clear waits for
    "{cdn}:waitfor",  # KEYS[9] the latest clear's number
    # Purges other than clears (decision 0026, proxy/fleet/purge_scripts.py):
    "{cdn}:purges",  # KEYS[10] sorted set: "number domain kind soft items" by number
    "{cdn}:floors",  # KEYS[11] hash: domain -> highest number of a record no longer kept
    "{cdn}:pbytes",  # KEYS[12] the bytes of the records kept
    "{cdn}:figures",  # KEYS[13] hash: number -> "reported entries bytes inexact" from acks
)
# The keys of the clear's own scripts (KEYS[1] to KEYS[9]): a call that touches no purge
# key passes only these, since the client packs and the server copies every key of every
# call, and a clear makes one call per worker (decision 0026, "The cost of a clear").
CLEAR_KEYS = KEYS[:9]
CLEARS = "{cdn}:clears"  # pub/sub hint: "epoch previous number domain" of each clear
ACKED = "{cdn}:acked"  # pub/sub hint: the number of a clear every member waited for acked
DRY = "{cdn}:dry"  # pub/sub: "id member", a dry run asked of a member (decision 0026)
DRY_ANSWERS_AT_ONCE = 1000  # answers one LPOP takes
LOG_CAP = 10_000

_PRELUDE = """
local function fmt(n) return string.format('%.0f', n) end
local function clock()
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return us, math.floor(us / 1000)
end
-- The epoch of the data set. None means the data was lost (or never made): start a new one
-- whose numbers begin at Valkey's time in microseconds, so they never go back.
local function epoch(nowus, nowms, fresh)
  local e = redis.call('HMGET', KEYS[1], 'id', 'born')
  if e[1] then return e[1], tonumber(e[2]) end
  local seq = tonumber(redis.call('GET', KEYS[2]) or '0')
  redis.call('HSET', KEYS[1], 'id', fresh, 'born', fmt(nowms))
  redis.call('SET', KEYS[2], fmt(math.max(seq, nowus)))
  return fresh, nowms
end
-- Drops expired members (their lease is over: they are fenced), then appends every live
-- member's name, lease expiry and ack to the reply.
local function live_view(nowms, reply)
  local expired = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', fmt(nowms))
  for _, m in ipairs(expired) do
    redis.call('ZREM', KEYS[4], m)
    redis.call('HDEL', KEYS[5], m)
    redis.call('HDEL', KEYS[6], m)
    redis.call('SREM', KEYS[8], m)
  end
  local live = redis.call('ZRANGE', KEYS[4], 0, -1, 'WITHSCORES')
  for i = 1, #live, 2 do
    reply[#reply + 1] = live[i]
    reply[#reply + 1] = live[i + 1]
    reply[#reply + 1] = redis.call('HGET', KEYS[5], live[i]) or '0'
  end
  return reply
end
-- Records a member's ack. The latest clear keeps the set of live members it waits for; the
-- ack that empties the set publishes one hint with the clear's number, so the control plane
-- hears once per clear, however many members there are (0014 "Ack hints").
local function record_ack(member, number)
  redis.call('HSET', KEYS[5], member, number)
  local waitfor = tonumber(redis.call('GET', KEYS[9]) or '0')
  if waitfor > 0 and tonumber(number) >= waitfor and redis.call('SREM', KEYS[8], member) == 1
      and redis.call('SCARD', KEYS[8]) == 0 then
    redis.call('PUBLISH', '@ACKED@', fmt(waitfor))
  end
end
""".replace("@ACKED@", ACKED)

# ARGV: domain, fresh epoch id, control plane name, log cap, channel. The hint names the
# epoch, the number before this one and this one, and the domain: a member that applied the
# one before can apply this one without a sync (0014 "Applying hints"). The reply ends with
# the live members, as the pending script's does: the first look at who must ack is free.
_CLEAR = (
    _PRELUDE
    + """
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
"""
)

_PURGE = _PRELUDE + purge_scripts.PURGE_BODY

# ARGV: member, lease ms, member's epoch, member's applied number, fresh epoch id, info JSON,
# domains... Registers (renews) and reads in one step: a clear comes either before (and its
# generation is read here) or after (and waits for this member's ack).
_SYNC = (
    _PRELUDE
    + """
local nowus, nowms = clock()
local id, born = epoch(nowus, nowms, ARGV[5])
redis.call('ZADD', KEYS[4], fmt(nowms + tonumber(ARGV[2])), ARGV[1])
local seq = redis.call('GET', KEYS[2])
-- An ack counts only under the epoch the member has adopted (0014: acks carry the epoch),
-- and only up to this server's last clear: after a failover to a replica that missed the
-- last clears, a member may have applied numbers this server never handed out.
local ack = '0'
if ARGV[3] == id and tonumber(ARGV[4]) <= tonumber(seq or '0') then ack = ARGV[4] end
record_ack(ARGV[1], ack)
redis.call('HSET', KEYS[6], ARGV[1], ARGV[6])
local reply = {id, seq, '0'}
if (ARGV[3] ~= id or seq ~= ARGV[4]) then
  reply[3] = '1'
  if #ARGV >= 7 then
    local gens = redis.call('HMGET', KEYS[3], unpack(ARGV, 7))
    for i = 1, #ARGV - 6 do reply[#reply + 1] = gens[i] or '0' end
    -- Purges (decision 0026): each domain's floor, then the records of the member's
    -- domains above what it applied. A member of another epoch clears everything: none.
    local floors = redis.call('HMGET', KEYS[11], unpack(ARGV, 7))
    for i = 1, #ARGV - 6 do reply[#reply + 1] = floors[i] or '0' end
    if ARGV[3] == id then
      local mine = {}
      for i = 7, #ARGV do mine[ARGV[i]] = true end
      for _, r in ipairs(redis.call('ZRANGEBYSCORE', KEYS[10], '(' .. ARGV[4], '+inf')) do
        if mine[string.match(r, '^%d+ (%S+)')] then reply[#reply + 1] = r end
      end
    end
  end
end
return reply
"""
)

# ARGV: member, epoch, number, then number, entries, bytes, exact (1/0) of each purge applied
# (decision 0026). Recorded only for a live member of the same epoch, and only for a number
# this server handed out (see the sync). The figures are added to a purge's sums only while
# its control plane waits for them (the field exists).
_ACK = (
    _PRELUDE
    + """
if redis.call('HGET', KEYS[1], 'id') ~= ARGV[2] then return 0 end
if tonumber(ARGV[3]) > tonumber(redis.call('GET', KEYS[2]) or '0') then return 0 end
local nowus, nowms = clock()
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
"""
)

# ARGV: fresh epoch id. Drops expired members (their lease is over: they are fenced), then
# returns the epoch, its birth, Valkey's time, and every live member's expiry and ack.
_PENDING = (
    _PRELUDE
    + """
local nowus, nowms = clock()
local id, born = epoch(nowus, nowms, ARGV[1])
return live_view(nowms, {id, fmt(born), fmt(nowms)})
"""
)

# Read only: every member with its info, lease expiry and ack, for the Nodes page.
_MEMBERS = """
local t = redis.call('TIME')
local reply = {string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))}
local all = redis.call('HGETALL', KEYS[6])
for i = 1, #all, 2 do
  reply[#reply + 1] = all[i]
  reply[#reply + 1] = all[i + 1]
  reply[#reply + 1] = redis.call('ZSCORE', KEYS[4], all[i]) or '0'
  reply[#reply + 1] = redis.call('HGET', KEYS[5], all[i]) or '0'
end
return reply
"""

# What the client raises when Valkey is unreachable, slow, or answers with an error.
_FAILURES = (valkey.exceptions.ValkeyError, OSError, TimeoutError)


@dataclass(frozen=True, slots=True)
class ClearRecord:
    """A recorded clear: its number and epoch, and the fleet as the clear script saw it."""

    number: int
    epoch: str
    view: FleetView
    generation: int = 0  # a purge: the domain's fleet generation (a clear: its number)


@dataclass(frozen=True, slots=True)
class MemberRow:
    member: str
    info: str  # JSON the member wrote at its last sync
    expires_ms: int  # 0: no live lease
    ack: int


@dataclass(frozen=True, slots=True)
class MembersView:
    now_ms: int
    members: tuple[MemberRow, ...]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _int(value: Any) -> int:
    return int(float(_text(value)))  # scores come back as "1.7e+12" from some servers


def _view(reply: Sequence[Any]) -> FleetView:
    """The scripts' view of the fleet: epoch, birth, Valkey's time, then each live member's
    name, lease expiry and ack."""
    rest = reply[3:]
    live = tuple(
        LiveMember(member=_text(rest[i]), expires_ms=_int(rest[i + 1]), ack=_int(rest[i + 2]))
        for i in range(0, len(rest), 3)
    )
    return FleetView(
        epoch=_text(reply[0]), born_ms=_int(reply[1]), now_ms=_int(reply[2]), live=live
    )


def connect(url: str, *, timeout: float) -> valkey.asyncio.Valkey:
    """A client for ``redis://``, ``rediss://`` or ``unix://`` URLs. The socket timeouts bound
    each read and connect; the scripts' own timeout bounds the whole call."""
    client: valkey.asyncio.Valkey = valkey.asyncio.Valkey.from_url(
        url, socket_timeout=timeout, socket_connect_timeout=timeout
    )
    return client


class FleetScripts:
    """The protocol's steps as calls, each bounded by ``timeout`` seconds."""

    def __init__(self, client: valkey.asyncio.Valkey, *, timeout: float, replicas: int = 0) -> None:
        self.client = client
        self.timeout = timeout
        self.replicas = replicas
        # WAIT's own bound: half the call's, so the server answers with the count of
        # replicas before the client gives up on the connection.
        self._wait_ms = max(1, round(timeout * 500))
        self._clear = client.register_script(_CLEAR)
        self._sync = client.register_script(_SYNC)
        self._ack = client.register_script(_ACK)
        self._pending = client.register_script(_PENDING)
        self._members = client.register_script(_MEMBERS)
        self._purge = client.register_script(_PURGE)
        self._records = client.register_script(purge_scripts.RECORDS)
        self._figures = client.register_script(purge_scripts.FIGURES)

    async def clear(self, domain: str, *, by: str, figures: bool = False) -> ClearRecord:
        """``figures``: the members' acks of this clear carry their figures (a purge of all)."""
        args = (domain, _fresh_epoch(), by, LOG_CAP, CLEARS, "1" if figures else "0")
        keys = KEYS if figures else CLEAR_KEYS  # KEYS[13]: the figures' hash
        reply = await self._call(self._clear, args, replicated=True, keys=keys)
        view = _view(reply[1:])
        return ClearRecord(number=_int(reply[0]), epoch=view.epoch, view=view)

    async def purge(self, domain: str, purge: Purge, *, by: str) -> ClearRecord:
        """A purge other than a hard ``all`` (decision 0026): numbered, logged, kept as a
        record and published as a clear is, without moving the domain's generation."""
        kind, soft, items = pack_record(purge)
        args = (domain, _fresh_epoch(), by, LOG_CAP, CLEARS, kind, soft, items)
        reply = await self._call(self._purge, (*args, KEPT_RECORDS, KEPT_BYTES), replicated=True)
        if _text(reply[0]) == "unable":
            raise PurgeUnsupported(_int(reply[1]))
        view = _view(reply[2:])
        number, generation = _int(reply[0]), _int(reply[1])
        return ClearRecord(number=number, epoch=view.epoch, view=view, generation=generation)

    async def records(self, lowest: int, highest: int) -> tuple[PurgeRecord | None, ...]:
        """The purge records numbered from ``lowest`` to ``highest`` (None: unreadable)."""
        reply = await self._call(self._records, (lowest, highest))
        return tuple(_record(_text(r)) for r in reply)

    async def figures(self, number: int) -> Figures:
        """What the members reported with their acks of purge ``number``, taken away.
        WireError if what Valkey holds cannot be read."""
        reply = await self._call(self._figures, (number,))
        return NO_FIGURES if reply is None else unpack_figures(_text(reply))

    async def sync(
        self,
        *,
        member: str,
        lease_ms: int,
        epoch: str | None,
        applied: int,
        info: str,
        domains: Sequence[str],
    ) -> SyncResult:
        args = (member, lease_ms, epoch or "", applied, _fresh_epoch(), info, *domains)
        reply = await self._call(self._sync, args, replicated=True)
        epoch_id, seq = _text(reply[0]), _int(reply[1])
        if _text(reply[2]) != "1":
            return SyncResult(epoch=epoch_id, seq=seq, generations=None)
        count = len(domains)
        generations = {d: _int(g) for d, g in zip(domains, reply[3 : 3 + count], strict=True)}
        floors = dict(
            zip(domains, (_int(f) for f in reply[3 + count : 3 + 2 * count]), strict=True)
        )
        # An unreadable record: the domain is cleared instead (its floor says so).
        records = []
        for text in reply[3 + 2 * count :]:
            record = _record(_text(text))
            if record is None:
                number, domain = record_head(_text(text))
                floors[domain] = max(floors.get(domain, 0), seq if number is None else number)
            else:
                records.append(record)
        return SyncResult(epoch_id, seq, generations, purges=tuple(records), floors=floors)

    async def ack(
        self,
        *,
        member: str,
        epoch: str,
        number: int,
        figures: Sequence[int] = (),
    ) -> bool:
        """``figures``: number, entries, bytes, exact (1/0) of each purge applied."""
        keys = KEYS if figures else CLEAR_KEYS  # KEYS[13]: the figures' hash
        return bool(await self._call(self._ack, (member, epoch, number, *figures), keys=keys))

    async def pending(self) -> FleetView:
        return _view(await self._call(self._pending, (_fresh_epoch(),), keys=CLEAR_KEYS))

    async def members(self) -> MembersView:
        reply = await self._call(self._members, (), keys=CLEAR_KEYS)
        rest = reply[1:]
        rows = tuple(
            MemberRow(_text(rest[i]), _text(rest[i + 1]), _int(rest[i + 2]), _int(rest[i + 3]))
            for i in range(0, len(rest), 4)
        )
        return MembersView(now_ms=_int(reply[0]), members=rows)

    async def ask_dry(self, members: Iterable[str], request: str, *, ttl: float) -> str | None:
        """Ask each of ``members`` for a dry run: the request waits under ``{cdn}:dry:<id>``
        for ``ttl`` seconds and each member is told on ``{cdn}:dry`` (``id member``). Its id,
        for ``dry_answers`` and ``end_dry``; None if nobody listens on the channel."""
        ident = secrets.token_hex(8)
        await self._command("SET", f"{DRY}:{ident}", request, "PX", round(ttl * 1000))
        for member in members:
            if not await self._command("PUBLISH", DRY, pack_dry_ask(ident, member)):
                await self.end_dry(ident)
                return None
        return ident

    async def dry_answers(self, ident: str) -> list[str]:
        """The answers to dry run ``ident`` that came since the last call (each taken once)."""
        reply = await self._command("LPOP", f"{DRY}:{ident}:answer", DRY_ANSWERS_AT_ONCE)
        return [] if reply is None else [_text(answer) for answer in reply]

    async def end_dry(self, ident: str) -> None:
        await self._command("DEL", f"{DRY}:{ident}", f"{DRY}:{ident}:answer")

    async def take_dry(self, ident: str) -> str | None:
        """The dry-run request ``ident`` (a member's side; every member asked reads it)."""
        reply = await self._command("GET", f"{DRY}:{ident}")
        return None if reply is None else _text(reply)

    async def answer_dry(self, ident: str, answer: str) -> None:
        key = f"{DRY}:{ident}:answer"
        await self._command("RPUSH", key, answer)
        await self._command("PEXPIRE", key, round(max(self.timeout, 1.0) * 10_000))

    async def _command(self, *args: object) -> Any:
        """One plain command within ``timeout``, its failures translated as a script's."""
        try:
            async with asyncio.timeout(self.timeout):
                return await self.client.execute_command(*args)  # type: ignore[no-untyped-call]
        except _FAILURES as exc:
            await self.reset()
            raise FleetUnavailable(f"valkey: {type(exc).__name__}: {exc}") from exc

    def hints(self, channel: str, *more: str) -> Hints:
        return Hints(self.client, channel, *more, timeout=self.timeout)

    async def reset(self) -> None:
        """Drop every connection (a timed-out one may still carry a late reply); the next
        call connects afresh."""
        try:
            async with asyncio.timeout(self.timeout):
                await self.client.connection_pool.disconnect()
        except _FAILURES:
            pass

    async def aclose(self) -> None:
        try:
            async with asyncio.timeout(self.timeout):
                await self.client.aclose()
        except _FAILURES:
            pass

    async def _call(
        self,
        script: Any,
        args: Sequence[object],
        *,
        replicated: bool = False,
        keys: Sequence[str] = KEYS,
    ) -> Any:
        """One script call within ``timeout``. A connection the server closed (Valkey
        restarted since the pool last used it) is dropped and the call made once more on a
        fresh one, within the same timeout: every script may run twice (a clear twice is
        two clears of the domain; a sync or an ack twice changes nothing). ``replicated``:
        the write counts only once ``replicas`` replicas have it (else NotReplicated).
        ``keys``: those the script may touch (every call on one slot: all are ``{cdn}``)."""
        run = self._replicated if replicated and self.replicas else self._plain
        try:
            async with asyncio.timeout(self.timeout):
                try:
                    return await run(script, keys, args)
                except valkey.exceptions.ConnectionError:
                    await self.client.connection_pool.disconnect()
                    return await run(script, keys, args)
        except _FAILURES as exc:
            await self.reset()
            raise FleetUnavailable(f"valkey: {type(exc).__name__}: {exc}") from exc

    async def _plain(self, script: Any, keys: Sequence[str], args: Sequence[object]) -> Any:
        return await script(keys=keys, args=args)

    async def _replicated(self, script: Any, keys: Sequence[str], args: Sequence[object]) -> Any:
        """The script, then ``WAIT``, in one pipeline without MULTI: both go out on the one
        connection the pipeline holds, which WAIT needs (it waits for the replication of
        *this connection's* writes). EVALSHA is sent as is (a pipeline that knows the script
        would ask SCRIPT EXISTS first, one more round trip); NOSCRIPT (a restarted or newly
        promoted server) loads it and runs the pair again: the script did not run."""
        for _ in range(2):
            pipe = self.client.pipeline(transaction=False)
            pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
            pipe.execute_command("WAIT", self.replicas, self._wait_ms)
            reply, copies = await pipe.execute(raise_on_error=False)
            if not isinstance(reply, valkey.exceptions.NoScriptError):
                break
            await self.client.script_load(script.script)
        for outcome in (reply, copies):
            if isinstance(outcome, Exception):
                raise outcome
        if int(copies) < self.replicas:
            raise NotReplicated(
                f"valkey: {int(copies)} of {self.replicas} replicas confirmed the write"
                f" within {self._wait_ms} ms"
            )
        return reply


class Hints:
    """A subscription to one hint channel. Hints may be lost (0014: pub/sub is only a
    hint); a lost connection shows as FleetUnavailable, and the caller subscribes again."""

    def __init__(self, client: valkey.asyncio.Valkey, *channels: str, timeout: float) -> None:
        self._pubsub = client.pubsub()
        self._channels = channels
        self._timeout = timeout

    async def subscribe(self) -> None:
        try:
            async with asyncio.timeout(self._timeout):
                await self._pubsub.subscribe(*self._channels)
        except _FAILURES as exc:
            raise FleetUnavailable(f"valkey: {type(exc).__name__}: {exc}") from exc

    async def next(self, within: float) -> str | None:
        """The next hint's text, or None if none arrived within ``within`` seconds (or the
        message was not a hint)."""
        message = await self.next_from(within)
        return None if message is None else message[1]

    async def next_from(self, within: float) -> tuple[str, str] | None:
        """The next hint's channel and text (several channels), as ``next``."""
        try:
            async with asyncio.timeout(within + self._timeout):
                message = await self._pubsub.get_message(
                    ignore_subscribe_messages=True, timeout=within
                )
        except _FAILURES as exc:
            raise FleetUnavailable(f"valkey: {type(exc).__name__}: {exc}") from exc
        if message is None or message.get("type") != "message":
            return None
        return _text(message["channel"]), _text(message["data"])

    async def aclose(self) -> None:
        try:
            async with asyncio.timeout(self._timeout):
                await self._pubsub.aclose()  # type: ignore[no-untyped-call]
        except _FAILURES:
            pass


def _record(text: str) -> PurgeRecord | None:
    """A purge record, or None if it cannot be read (its member clears the domain)."""
    try:
        return unpack_record(text)
    except WireError:
        return None


def _fresh_epoch() -> str:
    """128 random bits: the id of a new data set, used only if the script finds none."""
    return secrets.token_hex(16)
