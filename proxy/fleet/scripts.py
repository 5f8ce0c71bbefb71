"""The fleet's data in Valkey, and the only code that talks to it (docs/decisions/0014).

Every step of the protocol is one Lua script, so it is atomic in Valkey: a clear, a purge, a
sync, an ack, the pending read, and the read of members for the Nodes page (proxy/fleet/lua/:
the ``.lua`` files, and the names of their keys and arguments). Scripts are registered
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
from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import valkey.asyncio
import valkey.exceptions

from proxy.core.lease import FleetView, LiveMember, SyncResult
from proxy.core.purge.fleet import KEPT_BYTES, KEPT_RECORDS, NO_FIGURES, Figures, PurgeRecord
from proxy.core.purge.purges import Purge
from proxy.errors import FleetUnavailable, NotReplicated, PurgeUnsupported, WireError
from proxy.fleet import lua
from proxy.fleet.lua import ACKED as ACKED
from proxy.fleet.settings import FleetSettings
from proxy.store.base import Position
from proxy.wire.fleet import (
    pack_dry_ask,
    pack_record,
    record_head,
    unpack_figures,
    unpack_record,
)

CLEARS = "{cdn}:clears"  # pub/sub hint: "epoch previous number domain" of each clear
PEER_KEY = "{cdn}:peer-key"  # the key fleet peers prove themselves with (decision 0047)
DRY = "{cdn}:dry"  # pub/sub: "id member", a dry run asked of a member (decision 0026)
DRY_ANSWERS_AT_ONCE = 1000  # answers one LPOP takes
LOG_CAP = 10_000

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


class _Numbered(TypedDict):
    """ARGV's first items in a clear and in a purge, which take the next number and log and
    publish it alike (purge.lua: "a purge is a clear in everything but what it does to a
    member's store")."""

    domain: str
    fresh_epoch: str
    by: str
    log_cap: int
    channel: str


def _numbered(domain: str, by: str) -> _Numbered:
    return _Numbered(
        domain=domain, fresh_epoch=_fresh_epoch(), by=by, log_cap=LOG_CAP, channel=CLEARS
    )


def connect(url: str, *, timeout: float) -> valkey.asyncio.Valkey:
    """A client for ``redis://``, ``rediss://`` or ``unix://`` URLs. The connect timeout
    bounds each connect; the scripts' own timeout (``asyncio.timeout``) bounds each whole
    call. No socket timeout: with one, the client sends each command through
    ``asyncio.wait_for``, which on Python 3.11 swallows a cancellation that comes as the
    send completes, and a member's sync loop then outlived its ``close()`` (it kept
    renewing its lease, and the event loop's shutdown waited for it for ever)."""
    client: valkey.asyncio.Valkey = valkey.asyncio.Valkey.from_url(
        url, socket_timeout=None, socket_connect_timeout=timeout
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
        self._registered = {s: client.register_script(s.source()) for s in lua.SCRIPTS}

    @classmethod
    def of(cls, settings: FleetSettings, *, replicated: bool = False) -> FleetScripts:
        """A new connection to the fleet's Valkey, each call bounded by the settings'
        timeout. ``replicated``: clears and purges wait for ``settings.replicas`` replicas
        (the member's and the control plane's; a reader's need not)."""
        return cls(
            connect(settings.url, timeout=settings.timeout),
            timeout=settings.timeout,
            replicas=settings.replicas if replicated else 0,
        )

    async def clear(self, domain: str, *, by: str, figures: bool = False) -> ClearRecord:
        """``figures``: the members' acks of this clear carry their figures (a purge of all)."""
        args = lua.CLEAR.args(**_numbered(domain, by), figures="1" if figures else "0")
        reply = await self._call(lua.CLEAR, args, replicated=True, figures=figures)
        view = _view(reply[1:])
        return ClearRecord(number=_int(reply[0]), epoch=view.epoch, view=view)

    async def purge(self, domain: str, purge: Purge, *, by: str) -> ClearRecord:
        """A purge other than a hard ``all`` (decision 0026): numbered, logged, kept as a
        record and published as a clear is, without moving the domain's generation."""
        kind, soft, items = pack_record(purge)
        args = lua.PURGE.args(
            **_numbered(domain, by),
            kind=kind,
            soft=soft,
            items=items,
            kept_records=KEPT_RECORDS,
            kept_bytes=KEPT_BYTES,
        )
        reply = await self._call(lua.PURGE, args, replicated=True)
        if _text(reply[0]) == "unable":
            raise PurgeUnsupported(_int(reply[1]))
        view = _view(reply[2:])
        number, generation = _int(reply[0]), _int(reply[1])
        return ClearRecord(number=number, epoch=view.epoch, view=view, generation=generation)

    async def position(self, domain: str) -> Position:
        """The fleet's latest number and ``domain``'s generation: two plain reads."""
        number = await self._command("GET", lua.KEY["seq"])
        generation = await self._command("HGET", lua.KEY["gen"], domain)
        return Position(
            number=0 if number is None else _int(number),
            generation=0 if generation is None else _int(generation),
        )

    async def records(self, lowest: int, highest: int) -> tuple[PurgeRecord | None, ...]:
        """The purge records numbered from ``lowest`` to ``highest`` (None: unreadable)."""
        reply = await self._call(lua.RECORDS, lua.RECORDS.args(lowest=lowest, highest=highest))
        return tuple(_record(_text(r)) for r in reply)

    async def figures(self, number: int) -> Figures:
        """What the members reported with their acks of purge ``number``, taken away.
        WireError if what Valkey holds cannot be read."""
        reply = await self._call(lua.FIGURES, lua.FIGURES.args(number=number))
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
        args = lua.SYNC.args(
            member=member,
            lease_ms=lease_ms,
            member_epoch=epoch or "",
            applied=applied,
            fresh_epoch=_fresh_epoch(),
            info=info,
            domains=domains,
        )
        reply = await self._call(lua.SYNC, args, replicated=True)
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
        args = lua.ACK.args(member=member, epoch=epoch, number=number, figures=figures)
        return bool(await self._call(lua.ACK, args, figures=bool(figures)))

    async def pending(self) -> FleetView:
        args = lua.PENDING.args(fresh_epoch=_fresh_epoch())
        return _view(await self._call(lua.PENDING, args))

    async def members(self) -> MembersView:
        reply = await self._call(lua.MEMBERS, lua.MEMBERS.args())
        rest = reply[1:]
        rows = tuple(
            MemberRow(_text(rest[i]), _text(rest[i + 1]), _int(rest[i + 2]), _int(rest[i + 3]))
            for i in range(0, len(rest), 4)
        )
        return MembersView(now_ms=_int(reply[0]), members=rows)

    async def peer_key(self, candidate: str) -> str:
        """The fleet's peer key: the one Valkey holds, else ``candidate``, set now (one
        command, so two members setting it at once agree). A Valkey that lost its keys (a
        restart: a new epoch) gets a new one from the first member to ask."""
        # get=True: the client's parser then answers the value held, not SET's "OK" flag
        # (without it every member but the first read False, and held the text "False").
        held = await self._command("SET", PEER_KEY, candidate, "NX", "GET", get=True)
        return candidate if held is None else _text(held)

    async def read_peer_key(self) -> str | None:
        """The fleet's peer key as Valkey holds it, setting none (None: no member has set
        it yet): for the control plane, which asks an owner as a peer asks it (the trace)."""
        held = await self._command("GET", PEER_KEY)
        return None if held is None else _text(held)

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

    async def _command(self, *args: object, **options: object) -> Any:
        """One plain command within ``timeout``, its failures translated as a script's.
        ``options``: for the client's reply parser (``get=True``: SET answers a value)."""
        try:
            async with asyncio.timeout(self.timeout):
                return await self.client.execute_command(*args, **options)  # type: ignore[no-untyped-call]
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
        script: lua.Script[...],
        args: Sequence[object],
        *,
        replicated: bool = False,
        figures: bool = False,
    ) -> Any:
        """One script call within ``timeout``. A connection the server closed (Valkey
        restarted since the pool last used it) is dropped and the call made once more on a
        fresh one, within the same timeout: every script may run twice (a clear twice is
        two clears of the domain; a sync or an ack twice changes nothing). ``replicated``:
        the write counts only once ``replicas`` replicas have it (else NotReplicated).
        ``figures``: the call carries them, and takes the keys that hold them (``keys_for``)."""
        run = self._replicated if replicated and self.replicas else self._plain
        registered = self._registered[script]
        keys = script.keys_for(figures=figures)
        try:
            async with asyncio.timeout(self.timeout):
                try:
                    return await run(registered, keys, args)
                except valkey.exceptions.ConnectionError:
                    await self.client.connection_pool.disconnect()
                    return await run(registered, keys, args)
        except _FAILURES as exc:
            await self.reset()
            raise FleetUnavailable(f"valkey: {type(exc).__name__}: {exc}") from exc

    def _plain(self, script: Any, keys: Sequence[str], args: Sequence[object]) -> Awaitable[Any]:
        # The script's own awaitable, not a coroutine around it: a frame less per call, and
        # every worker makes a call on every clear.
        return script(keys=keys, args=args)  # type: ignore[no-any-return]

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
