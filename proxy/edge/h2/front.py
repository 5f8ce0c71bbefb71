"""Every HTTP/2 connection of one listener: made for the connections a ``GuardedServer``
hands over (ALPN h2 on TLS, or the h2c preface on the plain listener), counted by the
listener's guard as its HTTP/1.1 connections are (``max_connections``), and shut down with
the listener: GOAWAY with the last stream taken at the drain (``pre_shutdown``), the streams
in flight finishing within ``shutdown_timeout``, then what is left closed (``shutdown``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Protocol

from aiohttp import web

from proxy.edge.connections import ConnectionGuard, ThrottledLine
from proxy.edge.h2.connection import H2Connection
from proxy.edge.h2.limits import H2Limits


# Callback protocols, not Callable aliases: mypy reads a dataclass field of a Callable type
# as read-only, which the connection's ``Front`` (settable members) would refuse.
class Handler(Protocol):
    def __call__(self, request: web.BaseRequest, /) -> Awaitable[web.StreamResponse]: ...


class AccessLog(Protocol):
    def __call__(
        self, request: web.BaseRequest, response: web.StreamResponse, seconds: float, /
    ) -> None: ...


@dataclass(eq=False, kw_only=True)
class H2Front:
    handler: Handler
    limits: H2Limits
    guard: ConnectionGuard
    tls: bool  # served to TLS connections whose ALPN chose h2 (else: h2c, by prior knowledge)
    log: AccessLog | None = None
    # Faults of ours a client's frames or requests ran into (a connection closed with
    # INTERNAL_ERROR, a stream answered 500): one line per LOG_EVERY seconds, never a
    # traceback per request (issue 30, hole 5), as HTTP/1.1's malformed requests are logged.
    failures: ThrottledLine = field(init=False, repr=False)
    _connections: set[H2Connection] = field(default_factory=set, init=False, repr=False)

    def __post_init__(self) -> None:
        self.failures = ThrottledLine(f"HTTP/2 failures on the {self.guard.listener} listener")

    @property
    def open(self) -> int:
        return len(self._connections)

    def connection(self, peer: str | None) -> asyncio.Protocol:
        return H2Connection(self, peer)

    def opened(self, connection: H2Connection) -> None:
        self._connections.add(connection)
        self.guard.http2_open += 1
        self.guard.http2_connections += 1

    def closed(self, connection: H2Connection) -> None:
        if connection in self._connections:
            self._connections.discard(connection)
            self.guard.http2_open -= 1
            # Admitted before the hand-over, by the HTTP/1.1 side, against the peer's address.
            self.guard.release(connection.peer_address)

    def pre_shutdown(self) -> None:
        for connection in list(self._connections):
            connection.goaway()

    async def shutdown(self) -> None:
        for connection in list(self._connections):
            connection.abort()
        self.failures.close()
