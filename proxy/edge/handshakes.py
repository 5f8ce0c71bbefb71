"""The TLS listener's site: handshakes timed by us and counted by the connection guard.

Like proxy/edge/aiohttp_adapter.py, this relies on aiohttp below its documented API, and
tests/edge/test_aiohttp_adapter.py asserts what it assumes.

``HandshakeTimedSite`` is a ``web.TCPSite`` whose TLS handshakes must end within a time of
ours (aiohttp's sites leave asyncio's 60 s) and, on a guarded runner, count against the
guard's limit (``_TlsAccepted``: the listener accepts plain TCP, and the handshake is
``loop.connect_accepted_socket``'s, public asyncio API). Its ``start`` is
``TCPSite.start`` with that protocol factory, or ``ssl_handshake_timeout`` passed to
``loop.create_server``. Assumed: ``BaseSite.start`` registers the site with its
runner, and the site's fields are ``_runner``, ``_host``, ``_port``, ``_ssl_context``,
``_backlog``, ``_reuse_address``, ``_reuse_port``, ``_server`` and ``_bound_port``, which
``stop``, ``port`` and the runner's ``addresses`` read.
"""

from __future__ import annotations

import asyncio
import functools
import os
import socket
import ssl
from collections.abc import Callable, Coroutine
from typing import Any, cast

from aiohttp import web

from proxy.edge.aiohttp_server import GuardedRequestHandler, GuardedServer, peer_of


class HandshakeTimedSite(web.TCPSite):
    """A TCP site whose TLS handshakes are abandoned (the connection closed) after
    ``handshake_timeout`` seconds: a client that opens connections and never finishes a
    handshake holds each that long at most, not asyncio's 60 s. On a ``GuardedServer``'s
    runner, a TLS connection counts against its guard's limit from the moment it is
    accepted, handshake included (``_TlsAccepted``); stopping the site abandons the
    handshakes under way."""

    def __init__(self, *args: Any, handshake_timeout: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.handshake_timeout = handshake_timeout
        self._handshakes: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        server = self._runner.server
        assert server is not None
        context = self._ssl_context
        factory: Callable[[], asyncio.BaseProtocol] = server
        if context is not None and isinstance(server, GuardedServer):
            factory = functools.partial(_TlsAccepted, self, server, context)
            context = None  # the handshake is _TlsAccepted's
        self._server = await asyncio.get_running_loop().create_server(
            factory,
            self._host,
            self._port,
            ssl=context,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
            ssl_handshake_timeout=self.handshake_timeout if context else None,
        )
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port

    async def stop(self) -> None:
        for task in list(self._handshakes):
            task.cancel()
        await super().stop()

    def handshake(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._handshakes.add(task)
        task.add_done_callback(self._handshakes.discard)


class _TlsAccepted(asyncio.Protocol):
    """A connection just accepted by a guarded TLS listener, before its handshake. It is
    admitted by the guard at once, so connections still in their handshake count against
    the limit (at the limit it is closed at once: there is no TLS yet to answer 503 over).
    Its socket (a duplicate of its descriptor) then goes to ``loop.connect_accepted_socket``
    with the TLS context, which does the handshake within the site's timeout and gives the
    encrypted connection to a ``GuardedRequestHandler`` that holds the admission from then
    on. The plain transport is aborted before it has read anything (uvloop starts reading
    only once ``connection_made`` has returned, asyncio a step later). A handshake that
    fails, times out or is abandoned closes the connection and frees its place."""

    def __init__(
        self, site: HandshakeTimedSite, server: GuardedServer, context: ssl.SSLContext
    ) -> None:
        self._site = site
        self._server = server
        self._context = context

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        tcp = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        guard = self._server.guard
        peer = peer_of(tcp)
        if not guard.admit(peer):
            tcp.abort()
            return
        try:
            accepted = socket.socket(fileno=os.dup(tcp.get_extra_info("socket").fileno()))
        except OSError:  # out of descriptors
            guard.release(peer)
            tcp.abort()
            return
        tcp.abort()  # closes its descriptor; the duplicate keeps the connection
        self._site.handshake(self._handshake(accepted, peer))

    async def _handshake(self, accepted: socket.socket, peer: str | None) -> None:
        handler = self._server.admitted(peer)
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: handler,
                accepted,
                ssl=self._context,
                ssl_handshake_timeout=self._site.handshake_timeout,
            )
        except OSError:  # ssl.SSLError, a reset, the timeout: the loop closed the socket
            self._abandoned(handler, peer)
        except asyncio.CancelledError:  # the site stopped; the loop closed the socket
            self._abandoned(handler, peer)
            raise

    def _abandoned(self, handler: GuardedRequestHandler, peer: str | None) -> None:
        if not handler.connected:  # else the handler holds the place, until connection_lost
            self._server.guard.release(peer)
