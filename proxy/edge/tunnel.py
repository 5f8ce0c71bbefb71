"""Upgrade tunnels (decision 0022): WebSocket, and any other protocol a request asks to switch
to (which ones: proxy/core/http/upgrade.py), passed through to the origin both ways, never cached.

The request head goes to one of the domain's origin servers (chosen, and tried once more on
another when the connect fails, by ``Upstreams.connect``: decision 0034) on a connection of
its own (never a pooled one: it will carry another protocol), TLS for an https:// origin,
driven by h11, the HTTP/1.1 state machine that knows where a 101 ends and the new protocol
begins. Then:

- a 101 that names a protocol the client offered is relayed, the client's connection is taken
  from aiohttp (``take_over``, in the aiohttp adapter), and bytes are pumped both ways;
- any other final answer (400, 403, 426, ...) is relayed as a response, and the client's
  connection goes on in HTTP/1.1; 1xx answers before it (100, 103) are not relayed.

A tunnel ends when either side closes (what it sent before is passed on first), after
``edge.tunnel_idle_timeout`` seconds without a byte either way, after
``edge.tunnel_max_seconds`` in all, or at the deadline of a drain at shutdown (the server
cancels its handler then). It stays one open client connection, counted by the listener's
guard, for its whole life; the guard's header and keep-alive timeouts never apply to it.

Each domain has at most ``max_tunnels`` tunnels open in the process (decision 0032), counted
from the moment its origin connection is opened: past it a new upgrade request is answered
503 with ``Retry-After`` at once, counted in ``origin_busy_total{reason="tunnels"}``, and the
origin never sees it. They are counted apart from ``origin_connections``, whose slots they
would hold for hours, so the domain's origin sees at most ``origin_connections`` requests and
``max_tunnels`` tunnels from each edge process.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

import h11
from aiohttp import StreamReader, web

from proxy.config.model import Config, DomainConfig
from proxy.core.http.headers import cache_status, from_origin
from proxy.core.http.upgrade import origin_fields, switched_fields
from proxy.core.observe.traffic import BYPASS, ERROR
from proxy.edge import respond
from proxy.edge.aiohttp_adapter import take_over
from proxy.edge.tls import EdgeTls
from proxy.edge.upstreams import Upstreams
from proxy.errors import (
    OriginBusy,
    OriginError,
    OriginProtocolError,
    OriginTimeout,
    OriginUnreachable,
)
from proxy.observe.telemetry import Telemetry, error_kind

log = logging.getLogger("proxy.edge")

CHUNK = 64 * 1024
HEAD_MAX = 64 * 1024  # the longest response head taken from an origin


@dataclass(frozen=True, slots=True)
class TunnelLimits:
    idle: float  # seconds without a byte either way
    lifetime: float  # seconds in all

    @classmethod
    def of(cls, config: Config) -> TunnelLimits:
        edge, _ = config.edge_role()
        return cls(idle=edge.tunnel_idle_timeout, lifetime=edge.tunnel_max_seconds)


class TunnelsBusy(OriginBusy):
    public = "too many upgraded connections to this site are open; retry later"


class Tunnels:
    """The edge's way to its origins for upgrade requests."""

    def __init__(
        self,
        *,
        config: Config,
        telemetry: Telemetry,
        upstreams: Upstreams,
        tls: EdgeTls,
    ) -> None:
        self._telemetry = telemetry
        self._upstreams = upstreams  # which of the domain's servers (decision 0034)
        self._tls: ssl.SSLContext | None = None
        self._edge_tls = tls  # a domain's origin_ca, when it names one
        self._max: dict[str, int] = {}  # domain -> max_tunnels
        self.open_by_domain: dict[str, int] = {}  # domain -> tunnels open (only those with any)
        self.reconfigure(config)

    def reconfigure(self, config: Config) -> None:
        """Take a new config's limits and names: for the tunnels opened from now on (open ones
        keep the limits they started with)."""
        edge, cache = config.edge_role()
        self.limits = TunnelLimits.of(config)
        # Removed domains keep theirs: a request routed before the reload may still open one.
        self._max = {**self._max, **{d.name: d.max_tunnels for d in config.domains}}
        self._via = edge.via
        self._status = cache_status(cache.name, fwd="bypass", detail="upgrade")

    async def open(
        self,
        request: web.BaseRequest,
        domain: DomainConfig,
        target: str,
        fields: Sequence[tuple[str, str]],
        protocols: str,
    ) -> web.StreamResponse:
        """Ask the origin to switch to ``protocols`` (fields: the forwarded request's head),
        and relay its answer: a tunnel, or a response."""
        started = time.perf_counter()
        held = self.open_by_domain.get(domain.name, 0)
        if held >= self._max.get(domain.name, domain.max_tunnels):
            # Counted, not logged line by line (it comes in floods), as the other OriginBusy.
            self._telemetry.origin_busy(domain.name, "tunnels")
            self._telemetry.request(domain.name, ERROR)
            busy = TunnelsBusy(f"{domain.name}: {held} tunnels open, the limit")
            return respond.origin_failed(busy, cache_status=self._status)
        with self._counted(domain.name):
            try:
                tls = self._origin_tls(domain)
                origin = await self._upstreams.connect(
                    domain, target, lambda server: OriginLink.open(domain, server, tls)
                )
            except OriginError as exc:
                return self._failed(domain, exc, started)
            with closing(origin):
                try:
                    head = origin_fields(fields, protocols)
                    answer = await origin.ask(request.method, target, head)
                except OriginError as exc:
                    return self._failed(domain, exc, started)
                except (h11.LocalProtocolError, UnicodeEncodeError):
                    # aiohttp took this head from the client, h11 would not send it: the fault
                    # is the request's, not the origin's.
                    return respond.text(400, "400 Bad Request: this upgrade cannot be forwarded")
                return await self._answer(request, domain, origin, answer, protocols, started)

    @contextmanager
    def _counted(self, name: str) -> Iterator[None]:
        """One more tunnel open for domain ``name`` while inside (only domains with any are
        kept)."""
        self.open_by_domain[name] = self.open_by_domain.get(name, 0) + 1
        try:
            yield
        finally:
            if self.open_by_domain[name] == 1:
                del self.open_by_domain[name]
            else:
                self.open_by_domain[name] -= 1

    async def _answer(
        self,
        request: web.BaseRequest,
        domain: DomainConfig,
        origin: OriginLink,
        answer: h11.Response | h11.InformationalResponse,
        offered: str,
        started: float,
    ) -> web.StreamResponse:
        """The origin's answer to the upgrade: relayed as a response, or the switch made."""
        if isinstance(answer, h11.Response):  # a final answer: no switch
            self._answered(domain, started)
            return await self._relay(request, origin, answer)
        switched = switched_fields(_fields(answer), offered=offered, via=self._via)
        if switched is None:
            refused = OriginProtocolError(
                f"{domain.name}: the origin switched to a protocol the client did not offer"
            )
            return self._failed(domain, refused, started)
        self._answered(domain, started)
        return await self._switch(request, origin, answer, switched)

    async def _switch(
        self,
        request: web.BaseRequest,
        origin: OriginLink,
        answer: h11.InformationalResponse,
        fields: Sequence[tuple[str, str]],
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=101, reason=_reason(answer), headers=fields)
        response.force_close()  # the connection ends with the tunnel
        # Taken before the 101 goes out: the client may send its first bytes the moment it
        # has it, and they are the new protocol's, not an HTTP request's.
        client = take_over(request)
        try:
            await response.prepare(request)
            leftover = origin.leftover()
            if leftover:  # the new protocol's first bytes, read with the 101
                await response.write(leftover)
        except OSError:
            return response  # the client has gone
        ended = await pump(client, response.write, origin, self.limits)
        log.debug("tunnel to %s ended: %s", request.host, ended)
        return response

    async def _relay(
        self, request: web.BaseRequest, origin: OriginLink, answer: h11.Response
    ) -> web.StreamResponse:
        """The origin did not switch: its response, relayed as the forwarded path does."""
        fields = _fields(answer)
        headers = respond.relayed_headers(from_origin(fields), via=self._via, status=self._status)
        stream = web.StreamResponse(
            status=answer.status_code, reason=_reason(answer), headers=headers
        )
        length = next((v for n, v in fields if n.lower() == "content-length"), None)
        if length is not None and length.isdigit():
            stream.content_length = int(length)
        await stream.prepare(request)
        try:
            async for chunk in origin.body():
                await stream.write(chunk)
        except OriginError as exc:
            log.warning("%s (after the response started; connection aborted)", exc)
            if request.transport is not None:
                request.transport.abort()
            return stream
        await stream.write_eof()
        return stream

    def _answered(self, domain: DomainConfig, started: float) -> None:
        self._telemetry.origin(domain.name, time.perf_counter() - started, None)
        self._telemetry.request(domain.name, BYPASS)

    def _failed(self, domain: DomainConfig, exc: OriginError, started: float) -> web.Response:
        self._telemetry.origin(domain.name, time.perf_counter() - started, error_kind(exc))
        self._telemetry.request(domain.name, ERROR)
        return respond.origin_failed(exc, cache_status=self._status)

    def _origin_tls(self, domain: DomainConfig) -> ssl.SSLContext | None:
        """Verified as the origin session's connections are: against the domain's origin_ca
        (EdgeTls.origin), else the system's trust store."""
        if not domain.origin.startswith("https://"):
            return None
        own = self._edge_tls.origin(domain.name)
        if isinstance(own, ssl.SSLContext):
            return own
        if self._tls is None:
            context = ssl.create_default_context()
            context.set_alpn_protocols(["http/1.1"])  # the switch is an HTTP/1.1 exchange
            self._tls = context
        return self._tls


class OriginLink:
    """One upgrade request at the origin, on a connection of its own. Raises OriginError
    for everything that goes wrong before the origin's answer is complete."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, domain: DomainConfig
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._domain = domain
        self._h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=HEAD_MAX)

    @classmethod
    async def open(
        cls, domain: DomainConfig, server: str, tls: ssl.SSLContext | None
    ) -> OriginLink:
        """A connection to ``server``, one of the domain's origin servers (scheme://host:port)."""
        parts = urlsplit(server)
        host = parts.hostname or ""
        port = parts.port or (443 if tls is not None else 80)
        try:
            async with asyncio.timeout(domain.connect_timeout):
                reader, writer = await asyncio.open_connection(
                    host, port, ssl=tls, server_hostname=host if tls else None, limit=CHUNK
                )
        except TimeoutError:
            raise OriginTimeout(f"{domain.name}: the origin did not accept in time") from None
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise OriginUnreachable(f"{domain.name}: origin unreachable ({reason})") from None
        return cls(reader, writer, domain)

    async def ask(
        self, method: str, target: str, fields: Sequence[tuple[str, str]]
    ) -> h11.Response | h11.InformationalResponse:
        """Send the request; return the origin's 101, or its final response."""
        request = h11.Request(
            method=method,
            target=_bytes(target),
            headers=[(_bytes(name), _bytes(value)) for name, value in fields],
        )
        self._writer.write(self._h11.send(request) + self._h11.send(h11.EndOfMessage()))
        while True:
            event = await self._next_event()
            if isinstance(event, h11.InformationalResponse) and event.status_code != 101:
                continue  # 100 Continue, 103 Early Hints: not relayed
            if isinstance(event, h11.Response | h11.InformationalResponse):
                return event
            raise OriginProtocolError(f"{self._domain.name}: the origin closed without answering")

    async def body(self) -> AsyncIterator[bytes]:
        """The body of a final response, as it arrives."""
        while True:
            event = await self._next_event()
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return
            else:
                raise OriginProtocolError(f"{self._domain.name}: the origin's body broke off")

    def leftover(self) -> bytes:
        """Bytes read past the 101: the first of the new protocol."""
        return bytes(self._h11.trailing_data[0])

    async def read(self) -> bytes:
        """The next bytes of the switched connection; b"" at its end."""
        return await self._reader.read(CHUNK)

    async def write(self, data: bytes) -> None:
        self._writer.write(data)
        await self._writer.drain()

    def close(self) -> None:
        self._writer.close()

    async def _next_event(self) -> h11.Event:
        while True:
            try:
                event = self._h11.next_event()
            except h11.RemoteProtocolError as exc:
                raise OriginProtocolError(f"{self._domain.name}: broken response ({exc})") from None
            if event is not h11.NEED_DATA:
                assert not isinstance(event, type)  # PAUSED comes only after a 101
                return event
            try:
                async with asyncio.timeout(self._domain.read_timeout):
                    data = await self._reader.read(CHUNK)
            except TimeoutError:
                where = self._domain.name
                raise OriginTimeout(f"{where}: the origin did not answer in time") from None
            except OSError as exc:
                where = self._domain.name
                raise OriginProtocolError(f"{where}: origin connection lost ({exc})") from None
            self._h11.receive_data(data)


class _Activity:
    __slots__ = ("last",)

    def __init__(self, now: float) -> None:
        self.last = now


async def pump(
    client: StreamReader,
    to_client: Callable[[bytes], Awaitable[None]],
    origin: OriginLink,
    limits: TunnelLimits,
) -> str:
    """Copy bytes both ways until one side closes ("closed"), none moves for ``limits.idle``
    seconds ("idle"), or ``limits.lifetime`` seconds have passed ("lifetime"). Each copy
    waits for its write to be taken before it reads more, so a side that does not read
    stops the other from sending (TCP flow control, end to end)."""
    loop = asyncio.get_running_loop()
    activity = _Activity(loop.time())
    ends = activity.last + limits.lifetime
    copies = [
        asyncio.create_task(_copy(client.readany, origin.write, activity), name="tunnel-up"),
        asyncio.create_task(_copy(origin.read, to_client, activity), name="tunnel-down"),
    ]
    try:
        while True:
            # One wake-up per idle period at most: activity moves the deadline, not a timer.
            deadline = min(activity.last + limits.idle, ends)
            left = deadline - loop.time()
            if left <= 0:
                return "lifetime" if deadline == ends else "idle"
            done, _ = await asyncio.wait(copies, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            if done:
                return "closed"
    finally:
        for copy in copies:
            copy.cancel()
        await asyncio.gather(*copies, return_exceptions=True)


async def _copy(
    read: Callable[[], Awaitable[bytes]],
    write: Callable[[bytes], Awaitable[None]],
    activity: _Activity,
) -> None:
    loop = asyncio.get_running_loop()
    try:
        while chunk := await read():
            activity.last = loop.time()
            await write(chunk)
    except OSError:
        return  # a side reset or went away: the tunnel ends as if it had closed


def _fields(event: h11.Response | h11.InformationalResponse) -> tuple[tuple[str, str], ...]:
    # As aiohttp reads a head: names and values as sent, bytes kept through surrogateescape.
    return tuple((_text(name), _text(value)) for name, value in event.headers.raw_items())


def _reason(event: h11.Response | h11.InformationalResponse) -> str | None:
    return _text(event.reason) or None  # None: aiohttp writes the status's own phrase


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")
