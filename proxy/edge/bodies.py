"""Request bodies on the forwarded path: read before the origin is asked, or streamed to it.

A request body holds an origin connection for as long as it takes to arrive, so a client that
sends part of a body and stops would hold one forever, and a few hundred of them held every
connection of the domain (issue 13). Decision 0015:

- a body is read, up to edge.request_buffer_bytes, before the origin is asked (nginx's
  proxy_request_buffering): one that never arrives never takes a connection;
- every read waits at most edge.body_timeout for the next piece (nginx's client_body_timeout):
  a body that stops arriving is answered 408 and its connection closed;
- a longer body is streamed, and streamed uploads share at most a quarter of the domain's
  origin connections (``UploadShares``), a client at most a quarter of that share, so stalled
  or slow uploads can never take the connections that misses need.

Decision 0032 (issue 24) bounds what the bodies being read hold, together:

- ``BodyBudget``: the bytes every body being buffered holds in this process, at most
  edge.request_buffer_total_bytes (a worker's share of it). A body that would take more is
  streamed from there, within the upload shares (503 with Retry-After past them); what was
  buffered stays counted until its request is answered. The budget lives with the edge
  listener's connection guard (``budget_of``), which reports it in /metrics; an HTTP/2
  stream's body counts against it as an HTTP/1.1 connection's does (decision 0045).
- ``Pace``: each edge.body_timeout seconds spent waiting for a body must bring
  edge.body_min_rate times as many bytes (mod_reqtimeout's MinRate, in windows): one byte
  every 50 s no longer keeps a buffer, or an upload share, for ever. Too slow is answered as
  a timeout (408, closed).

The bytes are passed on as the client sent them: the edge's server does not decode a
Content-Encoding (``auto_decompress=False`` in service.py), so the origin gets the client's
bytes under the client's label. Errors reading the body leave here as RequestBodyError.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType

import aiohttp
from aiohttp import web

from proxy.config.model import Config
from proxy.edge.aiohttp_server import GuardedRequestHandler
from proxy.edge.h2.stream import StreamProtocol
from proxy.errors import OriginBusy, RequestBodyError, RequestBodyIncomplete, RequestBodyTimeout


class UploadsBusy(OriginBusy):
    public = "too many uploads to this site are in progress; retry later"


@dataclass(frozen=True, slots=True)
class BodyLimits:
    timeout: float  # edge.body_timeout: the longest wait for a piece, and the rate's window
    min_rate: int  # edge.body_min_rate: bytes per second over each window; 0: none
    buffer_bytes: int  # edge.request_buffer_bytes: read before the origin is asked

    @classmethod
    def of(cls, config: Config) -> BodyLimits:
        edge, _ = config.edge_role()
        return cls(edge.body_timeout, edge.body_min_rate, edge.request_buffer_bytes)


class BodyBudget:
    """The bytes request bodies being buffered hold in one process, against ``limit``, and
    the bodies streamed for want of it or cut off for their slowness: the figures an edge
    process reports (``BodyFigures`` in proxy/edge/connections.py)."""

    __slots__ = ("held", "limit", "over_budget", "too_slow")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self.over_budget = 0
        self.too_slow = 0

    @property
    def free(self) -> int:
        return max(0, self.limit - self.held)

    def take(self, size: int) -> bool:
        if size > self.limit - self.held:
            return False
        self.held += size
        return True

    def give_back(self, size: int) -> None:
        self.held -= size

    def figures(self) -> list[int]:
        return [self.held, self.limit, self.over_budget, self.too_slow]


def budget_of(request: web.BaseRequest) -> BodyBudget | None:
    """The budget of the listener the request came on, whatever its protocol: an HTTP/1.1
    connection's or an HTTP/2 stream's (issue 32, hole 1: a stream's bodies had none). None:
    a server without a guard."""
    protocol = request.protocol
    if isinstance(protocol, GuardedRequestHandler | StreamProtocol):
        bodies = protocol.guard.bodies
        return bodies if isinstance(bodies, BodyBudget) else None
    return None


class Pace:
    """How long a body's next read may wait: ``timeout`` after the last piece, and, with a
    ``min_rate``, until the end of the current window. Windows are ``timeout`` seconds of
    waiting for the client, back to back from the body's start, and each must bring
    ``min_rate * timeout`` bytes. Only the time spent waiting for the client counts: while
    a streamed body waits for a slow origin to take its last piece, its clock stands still,
    so a client is never cut off for the origin's slowness."""

    __slots__ = ("_got", "_need", "_period", "_waited")

    def __init__(self, timeout: float, min_rate: int) -> None:
        self._period = timeout
        self._need = min_rate * timeout
        self._got = 0  # bytes in the current window
        self._waited = 0.0  # seconds of it gone

    def wait(self) -> tuple[float, bool]:
        """How long the next read may wait, and whether its end would mean "too slow"."""
        if self._need and self._got < self._need:
            return max(0.0, min(self._period, self._period - self._waited)), True
        return self._period, False

    def took(self, size: int, waited: float) -> None:
        """A read brought ``size`` bytes after ``waited`` seconds."""
        self._waited += waited
        while self._waited >= self._period:
            # The window ended (met: else the read would have timed out at its end); the
            # bytes just read count in the one they came in.
            self._waited -= self._period
            self._got = 0
        self._got += size


class BodyReader:
    """One request body as the forwarded path reads it: ``buffer`` it, then, if it is longer
    than the buffer or the budget allows, ``streamed`` for the rest. Used as an async
    context manager: what it buffered stays counted in the budget until it is left."""

    __slots__ = ("_budget", "_content", "_counted", "_length", "_limits", "_pace")

    def __init__(self, request: web.BaseRequest, limits: BodyLimits) -> None:
        self._content = request.content
        # The length the client declared, which its protocol's parser holds the body to
        # (llhttp for HTTP/1.1, the end-of-stream hook for HTTP/2): a streamed body is sent
        # to the origin under it; None (chunked, or HTTP/2 without one): sent chunked.
        self._length = request.content_length
        self._limits = limits
        self._budget = budget_of(request)
        self._counted = 0
        self._pace = Pace(limits.timeout, limits.min_rate)

    async def __aenter__(self) -> BodyReader:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._budget is not None:
            self._budget.give_back(self._counted)
        self._counted = 0

    async def buffer(self) -> tuple[bytes, bool]:
        """Read the body until it ends, passes the buffer's size, or would pass the budget:
        what was read, and whether that is the whole body."""
        parts: list[bytes] = []
        size = 0
        limit = self._limits.buffer_bytes
        budget = self._budget
        while size <= limit:
            # A piece is capped by the budget's room only, never by the buffer's: what arrived
            # together goes on together, so a streamed body's first piece reaches the origin
            # whole (decision 0015), not cut at request_buffer_bytes + 1.
            room = -1 if budget is None else budget.free
            if room == 0:
                assert budget is not None
                budget.over_budget += 1
                return b"".join(parts), False
            piece = await self.piece(room)
            if not piece:
                return b"".join(parts), True
            parts.append(piece)
            size += len(piece)
            if budget is not None:
                if not budget.take(len(piece)):  # taken meanwhile: this piece goes on at once
                    budget.over_budget += 1
                    return b"".join(parts), False
                self._counted += len(piece)
        return b"".join(parts), False

    def streamed(self, prefix: bytes) -> Streamed:
        return Streamed(prefix, self, self._length)

    async def piece(self, most: int = -1) -> bytes:
        """The next piece of the body, at most ``most`` bytes (b"" at its end), waited for as
        long as ``Pace`` allows."""
        content = self._content
        try:
            # What has come already, without a timer: a small body usually came with its head.
            piece = content.read_nowait(most)
            if piece or content.at_eof():
                self._pace.took(len(piece), 0.0)
                return piece
        except (ConnectionError, aiohttp.ClientError) as exc:
            raise RequestBodyIncomplete(f"the request body ended early ({exc})") from None
        loop = asyncio.get_running_loop()
        seconds, for_rate = self._pace.wait()
        began = loop.time()
        try:
            async with asyncio.timeout(seconds):
                piece = await (content.readany() if most < 0 else content.read(most))
        except TimeoutError:
            if for_rate:
                if self._budget is not None:
                    self._budget.too_slow += 1
                rate = self._limits.min_rate
                raise RequestBodyTimeout(f"request body slower than {rate} bytes/s") from None
            raise RequestBodyTimeout(f"no request body for {seconds:g} s") from None
        except (ConnectionError, aiohttp.ClientError) as exc:
            raise RequestBodyIncomplete(f"the request body ended early ({exc})") from None
        self._pace.took(len(piece), loop.time() - began)
        return piece


class Streamed:
    """The rest of a body too long to buffer, as the origin client reads it: the part already
    read, then each piece as it arrives. A failure is kept in ``failed``: the origin client
    reports it as its own connection error, and the handler answers with this one instead."""

    __slots__ = ("_prefix", "_reader", "failed", "length")

    def __init__(self, prefix: bytes, reader: BodyReader, length: int | None = None) -> None:
        self._prefix = prefix
        self._reader = reader
        self.length = length  # the whole body's, when the client's framing fixed it
        self.failed: RequestBodyError | None = None

    async def pieces(self) -> AsyncIterator[bytes]:
        yield self._prefix
        while True:
            try:
                piece = await self._reader.piece()
            except RequestBodyError as exc:
                self.failed = exc
                raise
            if not piece:
                return
            yield piece


class UploadShares:
    """How many streamed uploads each domain, and each client address of a domain, has at
    the origin now, against their shares of the domain's origin connections."""

    __slots__ = ("_by_client", "_by_domain", "_client_share", "_domain_share")

    def __init__(self, origin_connections: dict[str, int]) -> None:
        self._domain_share = {name: max(1, n // 4) for name, n in origin_connections.items()}
        self._client_share = {name: max(1, n // 16) for name, n in origin_connections.items()}
        self._by_domain: dict[str, int] = {}
        self._by_client: dict[tuple[str, str], int] = {}

    def reconfigure(self, origin_connections: dict[str, int]) -> None:
        """New shares for a reloaded config; uploads in progress keep counting. Removed
        domains keep their shares: an upload routed before the reload may still take one."""
        self._domain_share = {
            **self._domain_share,
            **{name: max(1, n // 4) for name, n in origin_connections.items()},
        }
        self._client_share = {
            **self._client_share,
            **{name: max(1, n // 16) for name, n in origin_connections.items()},
        }

    @contextmanager
    def taken(self, domain: str, client: str) -> Iterator[None]:
        """Hold a share for one upload; UploadsBusy when the domain's or client's is used up."""
        key = (domain, client)
        in_domain = self._by_domain.get(domain, 0)
        of_client = self._by_client.get(key, 0)
        if in_domain >= self._domain_share[domain] or of_client >= self._client_share[domain]:
            raise UploadsBusy(f"{domain}: no share left for a streamed upload from {client}")
        self._by_domain[domain] = in_domain + 1
        self._by_client[key] = of_client + 1
        try:
            yield
        finally:
            self._release(domain, key)

    def _release(self, domain: str, key: tuple[str, str]) -> None:
        self._by_domain[domain] -= 1
        if self._by_client[key] == 1:
            del self._by_client[key]  # forgotten, so the table holds only uploads in progress
        else:
            self._by_client[key] -= 1
