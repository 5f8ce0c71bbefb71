"""The origin client: one aiohttp session, and the boundary where its errors become ours.

Every aiohttp or timeout exception raised while talking to an origin, whether at connect,
while waiting for headers or while reading the body, leaves this module as an OriginError:
OriginTimeout (→ 504), OriginUnreachable (→ 502) or OriginProtocolError (→ 502).
aiohttp closes a connection on any framing error, and ``OriginConnector`` (in the aiohttp
adapter: it reads the client protocol's state) never reuses one on which the origin sent
bytes no request asked for, so a broken response never poisons the next request on a reused
connection.

Each origin server of a domain has at most ``origin_connections`` requests at once
(``ConnectionSlots``, decision 0034); a request waits at most ``origin_queue_timeout`` for
one, then fails with OriginBusy (→ 503), so a slow origin or stalled uploads make some
requests fail fast rather than every request hang (decision 0015).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any

import aiohttp
from yarl import URL

from proxy.config.model import DomainConfig
from proxy.core.purge.purges import split_tags, tag_header_names
from proxy.edge.aiohttp_adapter import InterimResponse, OriginConnector
from proxy.edge.bodies import Streamed
from proxy.errors import (
    OriginBusy,
    OriginDisconnected,
    OriginError,
    OriginProtocolError,
    OriginTimeout,
    OriginUnreachable,
)
from proxy.observe.telemetry import Telemetry, error_kind

CHUNK = 64 * 1024

# Seconds to the origin's response headers (or to its failure) of the request being handled,
# for its access log line. aiohttp runs each request in a task of its own, so the value is
# that request's (a background revalidation's task keeps its own).
ORIGIN_SECONDS: ContextVar[float | None] = ContextVar("origin_seconds", default=None)
# The perf_counter() at which the edge began a request it did not answer as a fast hit (a
# fast hit carries its own, Prewritten.started): its access-log line and figures are timed
# from it. aiohttp's own time is the loop's clock, which under uvloop counts whole
# milliseconds (a request's total could read less than its origin time).
REQUEST_STARTED: ContextVar[float | None] = ContextVar("request_started", default=None)


def new_session() -> aiohttp.ClientSession:
    """The one session the edge uses for every origin.

    No cookie jar (a shared proxy must never mix users' cookies), no transparent
    decompression (bodies are passed and stored as the origin encoded them), no headers of
    aiohttp's own, and the origin's interim answers told, not dropped.
    """
    session = aiohttp.ClientSession(
        connector=OriginConnector(
            # Per domain, ConnectionSlots bounds the requests at the origin and how long one
            # waits; this is only the process's ceiling (origin_request bounds its wait too).
            limit=1024,
            limit_per_host=0,
            enable_cleanup_closed=True,
            # Below the 5 s idle timeout of Node and Apache origins, so the edge does not send
            # a request on a connection the origin is closing at that moment.
            keepalive_timeout=4.0,
        ),
        cookie_jar=aiohttp.DummyCookieJar(),
        auto_decompress=False,
        skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
        timeout=aiohttp.ClientTimeout(total=None),
        raise_for_status=False,
        # Tells the interim answers (1xx) aiohttp's client drops to proxy/edge/interim.py,
        # which relays them to the client that waits (decision 0049).
        response_class=InterimResponse,
    )
    # aiohttp sends an idempotent request again when its connection breaks; the edge's own
    # retry (edge/upstreams.py) is the only one, or one PUT could reach the origin four
    # times (decision 0046). A private attribute: tests/edge/test_origins.py counts it.
    session._retry_connection = False
    return session


class OriginResponse:
    """The origin's answer: status, headers, and a body read in chunks.

    The domain's tag fields (``tag_headers``: Surrogate-Key, Cache-Tag) are taken out of
    ``headers`` here, so no path can pass them to a client, and read into ``tags``: None when
    they are over the bounds, and the response must not be stored (core/purges.py)."""

    __slots__ = (
        "_domain",
        "_response",
        "_telemetry",
        "headers",
        "peer",
        "reason",
        "received",
        "status",
        "tags",
    )

    def __init__(
        self,
        response: aiohttp.ClientResponse,
        telemetry: Telemetry | None = None,
        domain: str = "",
        tag_headers: frozenset[str] = frozenset(),
    ) -> None:
        self._response = response
        self._telemetry = telemetry
        self._domain = domain
        self.status = response.status
        self.reason = response.reason or ""
        self.headers: tuple[tuple[str, str], ...]
        self.tags: tuple[str, ...] | None
        self.headers, self.tags = split_tags(tuple(response.headers.items()), tag_headers)
        self.peer: str | None = None  # the owner node that answered a peer fill (0047)
        self.received = 0  # body bytes read (origin offload: decision 0047)

    @property
    def content_length(self) -> int | None:
        return self._response.content_length

    async def read_chunk(self) -> bytes:
        """The next piece of the body; b"" at its end. Raises OriginError."""
        try:
            chunk = await self._response.content.readany()
        except Exception as exc:
            error = origin_error(exc, self._response.url.host or "origin")
            if self._telemetry is not None and isinstance(error, OriginError):
                self._telemetry.origin_error(self._domain, error_kind(error))
            raise error from None
        self.received += len(chunk)
        return chunk

    async def read_up_to(
        self, limit: int, progress: Callable[[], None] | None = None
    ) -> tuple[bytes, bool]:
        """Read the body until it ends or passes ``limit``; return it and whether it ended.
        ``progress`` is called on each piece that arrives (collapsed requests follow it)."""
        parts: list[bytes] = []
        size = 0
        while True:
            chunk = await self.read_chunk()
            if not chunk:
                return b"".join(parts), True
            if progress is not None:
                progress()
            parts.append(chunk)
            size += len(chunk)
            if size > limit:
                return b"".join(parts), False

    def close(self) -> None:
        """Drop the connection: used when the body will not be read to its end."""
        self._response.close()


class ConnectionSlots:
    """Each domain's origin connections: at most ``origin_connections`` requests at its
    origin at once, and a bounded wait for one (decision 0015). Kept here rather than left to
    the connector's limit_per_host, so the wait is bounded on its own, apart from connecting,
    and is told apart from an origin that does not answer."""

    __slots__ = ("_limits", "_slots")

    def __init__(self, domains: Iterable[DomainConfig]) -> None:
        # Per origin server (decision 0034): keyed by (domain, server URL).
        self._slots = {
            (d.name, url): asyncio.Semaphore(d.origin_connections)
            for d in domains
            for url in d.origins + d.backup_origins
        }
        self._limits = {key: slots._value for key, slots in self._slots.items()}

    def reconfigured(self, domains: Iterable[DomainConfig]) -> ConnectionSlots:
        """The slots for a reloaded config. A domain whose origin_connections is unchanged
        keeps its semaphore, and with it the count of requests at its origin now; a changed
        one gets a new semaphore (those in flight finish on the old one, so for a moment both
        count). Removed domains keep theirs: a request routed before the reload may still
        take one."""
        slots = ConnectionSlots(())
        slots._slots = dict(self._slots)
        slots._limits = dict(self._limits)
        for domain in domains:
            for url in domain.origins + domain.backup_origins:
                if self._limits.get((domain.name, url)) != domain.origin_connections:
                    slots._slots[domain.name, url] = asyncio.Semaphore(domain.origin_connections)
                    slots._limits[domain.name, url] = domain.origin_connections
        return slots

    @asynccontextmanager
    async def taken(self, domain: DomainConfig, server: str = "") -> AsyncIterator[None]:
        """One of ``server``'s connections (the domain's first origin server by default)."""
        slots = self._slots[domain.name, server or domain.origin]
        if slots.locked():
            try:
                async with asyncio.timeout(domain.origin_queue_timeout):
                    await slots.acquire()
            except TimeoutError:
                raise OriginBusy(
                    f"{domain.name}: no origin connection free within "
                    f"{domain.origin_queue_timeout:g} s ({domain.origin_connections} in use)"
                ) from None
        else:
            await slots.acquire()  # one is free: taken without waiting
        try:
            yield
        finally:
            slots.release()


@asynccontextmanager
async def origin_request(
    session: aiohttp.ClientSession,
    domain: DomainConfig,
    method: str,
    target: str,
    headers: Sequence[tuple[str, str]],
    data: Any = None,
    *,
    telemetry: Telemetry | None = None,
    slots: ConnectionSlots | None = None,
    tls: ssl.SSLContext | bool = True,
    server: str = "",
) -> AsyncIterator[OriginResponse]:
    """Send one request to the domain's origin. The target is sent exactly as received.
    ``server``: which of its origin servers (edge/upstreams.py chooses); its first by default.

    ``data`` is the request body: bytes, or ``Streamed`` (a body still arriving), whose
    failure leaves as the RequestBodyError it is, not as the origin's. With ``slots``, the
    request first waits for one of the domain's connections (OriginBusy when none comes).
    ``tls``: how an https:// origin is verified (proxy/edge/tls.py: the system store, True,
    or the domain's origin_ca)."""
    taken: contextlib.AbstractAsyncContextManager[None] = (
        contextlib.nullcontext() if slots is None else slots.taken(domain, server)
    )
    try:
        async with (
            taken,
            _origin_request(
                session, domain, method, target, headers, data, telemetry, tls, server
            ) as response,
        ):
            yield response
    except OriginBusy:  # only ``slots`` raises it
        if telemetry is not None:
            telemetry.origin_busy(domain.name, "queue_timeout")
        raise


@asynccontextmanager
async def _origin_request(
    session: aiohttp.ClientSession,
    domain: DomainConfig,
    method: str,
    target: str,
    headers: Sequence[tuple[str, str]],
    data: Any,
    telemetry: Telemetry | None,
    tls: ssl.SSLContext | bool,
    server: str = "",
) -> AsyncIterator[OriginResponse]:
    url = URL((server or domain.origin) + target, encoded=True)
    timeout = aiohttp.ClientTimeout(
        total=None,
        # A backstop for the connector's process-wide ceiling: ConnectionSlots bounds the
        # wait for the domain's own connections before this starts.
        connect=domain.origin_queue_timeout + domain.connect_timeout,
        sock_connect=domain.connect_timeout,
        sock_read=domain.read_timeout,
    )
    started, answered = time.perf_counter(), False
    # The origin client frames the body it sends (headers.to_origin passes no client
    # framing): bytes by their length, a stream by the length the client's parser held it to,
    # else chunked; no body, no framing.
    body: Any = data
    if isinstance(data, Streamed):
        body = data.pieces()
        if data.length is not None:
            headers = [*headers, ("Content-Length", str(data.length))]
    try:
        async with session.request(
            method,
            url,
            headers=list(headers),
            data=body,
            allow_redirects=False,
            timeout=timeout,
            compress=None,
            ssl=tls,
        ) as response:
            ORIGIN_SECONDS.set(time.perf_counter() - started)
            if telemetry is not None:
                telemetry.origin(domain.name, time.perf_counter() - started, None)
            answered = True
            tag_headers = tag_header_names(domain.tag_headers)
            yield OriginResponse(response, telemetry, domain.name, tag_headers)
    except Exception as exc:
        if isinstance(exc, OriginError):
            raise  # from OriginResponse, already counted
        if not answered and isinstance(data, Streamed) and data.failed is not None:
            # The client's body stopped, not the origin: aiohttp reports it as its own
            # connection error. (Once the origin has answered, the response is being relayed
            # and its own errors are what count.)
            raise data.failed from None
        error = origin_error(exc, domain.name)
        if isinstance(error, OriginError) and not answered:
            error.reached = not _before_sending(exc)
        if not answered:
            ORIGIN_SECONDS.set(time.perf_counter() - started)
        if telemetry is not None and isinstance(error, OriginError):
            if answered:
                telemetry.origin_error(domain.name, error_kind(error))
            else:
                telemetry.origin(domain.name, time.perf_counter() - started, error_kind(error))
        raise error from None


def _before_sending(exc: BaseException) -> bool:
    """Whether the request failed before any byte of it was sent: at connect (refused,
    unreachable, TLS handshake, connect timeout). Decision 0034's retry rule reads it."""
    return isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError)


def origin_error(exc: BaseException, where: str) -> BaseException:
    """The OriginError for an aiohttp or timeout exception; anything else unchanged."""
    if isinstance(exc, TimeoutError):
        return OriginTimeout(f"{where}: the origin did not answer in time")
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        # Named plainly: an operator reading the log must see it is about trust, not network.
        return OriginUnreachable(
            f"{where}: the origin's TLS certificate is not trusted ({exc.certificate_error})"
        )
    if isinstance(exc, aiohttp.ClientConnectorSSLError):
        return OriginUnreachable(f"{where}: TLS with the origin failed ({exc.os_error})")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return OriginUnreachable(f"{where}: origin unreachable ({exc.strerror})")
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError):
        return OriginDisconnected(f"{where}: the origin closed the connection ({exc})")
    if isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ClientResponseError):
        return OriginProtocolError(f"{where}: broken response from origin ({exc})")
    if isinstance(exc, aiohttp.ClientError):
        return OriginProtocolError(f"{where}: origin request failed ({exc})")
    return exc
