"""Where the edge's connections rely on aiohttp below its documented API (decision 0013;
the rest is in aiohttp_adapter.py and aiohttp_h2.py). tests/edge/test_aiohttp_adapter.py
asserts each assumption; pyproject.toml pins aiohttp to the minor version those tests run on.

- ``GuardedServer``: a ``web.Server`` whose connections are ``GuardedRequestHandler``s, which
  ask a ``ConnectionGuard`` (proxy/edge/connections.py) to admit them (by their peer address,
  for the per-client limit: ``peer_of``, the transport's public ``peername``), close a connection
  whose request head is not whole ``header_timeout`` after it opened or after the head's
  first byte, and count malformed requests instead of logging a traceback each. Assumed:
  ``Server.__call__`` makes the protocol from ``_kwargs``; ``RequestHandler`` waits for a
  request on ``_waiter`` with the parsed ones queued in ``_messages``; a parse error reaches
  ``handle_error`` and ``log_exception`` as an ``HttpProcessingError``; ``AppRunner`` makes
  its server in ``_make_server``. Its error pages are ours (``error_page``): aiohttp's
  echo the bytes it could not parse. Assumed: the request loop sends what ``handle_error``
  returns.
  An HTTP/2 preface (h2c with prior knowledge) on a plain
  listener is no malformed request: it is answered 505 and closed, and neither counted nor
  logged. Assumed: llhttp's error for it says ``H2C_PREFACE_ERROR``.
- The hand-over to HTTP/2 (decision 0036): a ``GuardedRequestHandler`` hands its transport
  to the HTTP/2 side (``Http2Front``) before aiohttp sees a byte: on a TLS connection whose
  ALPN chose h2, in ``connection_made``; with h2c on, when the first bytes of a connection
  are the HTTP/2 preface. Assumed: ``transport.set_protocol`` and, for h2c, that
  ``RequestHandler.connection_lost`` with its ``transport`` unset, and its request loop
  (``_task_handler``) cancelled, stop it without closing the transport.
- The send timeout (decision 0046): an answer waiting for a client that does not read. Once
  the transport's buffer is full (``pause_writing``), each ``send_timeout`` (the guard's: the
  edge's edge.send_timeout) must see ``SEND_PROGRESS`` bytes leave it, measured by
  ``get_write_buffer_size`` at each pause, resume and check; else the connection is aborted,
  and the answer's writer fails as to a client that has gone (a non-reading client held
  2.06 GB over 128 connections before). The clock runs only while the buffer is full: a
  client that keeps up is never timed. Assumed: ``BaseProtocol.pause_writing`` and
  ``resume_writing`` are the transport's flow-control calls, and aiohttp's writer waits on
  them.
- The hit lane (decision 0050): with a ``lane``, each read is first given to it
  (``_through_lane``), which answers fresh hits itself and feeds aiohttp's parser
  (``RequestHandler.data_received``) only whole request heads, or a whole read it could not
  take. Assumed: aiohttp's request loop is idle when ``_waiter`` is pending with nothing in
  ``_messages`` (or before it first ran, with ``_request_count`` 0); it drops reads once
  ``_close`` or ``_force_close`` is set; ``_paused`` is true while the transport's buffer is
  full; and after a response on a kept-open connection it sets ``_keepalive`` and its
  keep-alive timer (``_next_keepalive_close_time``, ``_keepalive_handle`` calling
  ``_process_keepalive`` ``_keepalive_timeout`` later), which the lane does the same way.
  tests/edge/test_hit_lane.py and test_hit_lane_service.py (the timers) fail if one breaks.
"""

from __future__ import annotations

import asyncio
import logging
from http import HTTPStatus
from typing import Any, Protocol, cast

from aiohttp import web
from aiohttp.http import HttpProcessingError

from proxy.core.http.lane import LaneHead, read_head
from proxy.edge.connections import ConnectionGuard

log = logging.getLogger("proxy.edge")

# llhttp's error for an HTTP/2 connection preface (``PRI * HTTP/2.0``) where HTTP/1.1 is served.
H2C_PREFACE_ERROR = "Pause on PRI/Upgrade"
H2C_REFUSED = (
    "505 HTTP Version Not Supported: this listener speaks HTTP/1.1; HTTP/2 is served on the"
    " TLS listener (ALPN h2), and here with [edge] h2c\n"
)

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# The least an answer waiting for its client must send each send_timeout, on both protocols
# (HTTP/2: proxy/edge/h2/stream.py): about 1 KiB/s at the default 60 s, so a client that
# trickles its reads (or its WINDOW_UPDATEs) cannot hold an answer much longer than one that
# reads nothing.
SEND_PROGRESS = 64 * 1024


class Http2Front(Protocol):
    """The HTTP/2 side of a listener (proxy/edge/h2/front.py), as a ``GuardedServer`` sees it."""

    @property
    def tls(self) -> bool:
        """Served to TLS connections whose ALPN chose h2 (else: h2c, by prior knowledge)."""

    def connection(self, peer: str | None) -> asyncio.Protocol:
        """The protocol for a new HTTP/2 connection from ``peer``, admitted by the guard
        already (it releases it, with ``peer``, when the connection is lost)."""

    def pre_shutdown(self) -> None:
        """GOAWAY on every connection; each closes once its streams are done."""

    async def shutdown(self) -> None:
        """Close the connections still open."""


class HitLaneFront(Protocol):
    """The hit lane of a listener (proxy/edge/hit_lane.py, decision 0050), as a
    ``GuardedRequestHandler`` sees it."""

    def answer(
        self, transport: object, peer: str | None, head: LaneHead
    ) -> tuple[bytes, ...] | None:
        """The answer to write for ``head`` (counted and logged), or None: aiohttp's."""


# Sent on a connection refused at the limit, before its request is read: a client that
# reads it knows to come back; the connection is closed at once either way.
REFUSED = (
    b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\n"
    b"Content-Type: text/plain\r\nContent-Length: 24\r\n\r\nToo many connections now\n"
)


def peer_of(transport: asyncio.BaseTransport) -> str | None:
    """The connection's peer address (IPv4 or IPv6, as the socket gives it), the key of the
    per-client limit; None for a peer without one (a Unix socket)."""
    peer = transport.get_extra_info("peername")
    return peer[0] if isinstance(peer, tuple) and peer and isinstance(peer[0], str) else None


_data_received = web.RequestHandler.data_received  # without super()'s cost, on the hit path
REFUSED_LINGER = 1.0  # seconds a refused connection is read from before it is closed
# Sent when half a request head came and the rest did not, in time (RFC 9110 §15.5.9).
HEAD_TIMED_OUT = b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"


class GuardedRequestHandler(web.RequestHandler):
    """aiohttp's protocol for one client connection, with the guard's limits."""

    __slots__ = (
        "_admitted",
        "_h2c_first",
        "_head_begun",
        "_head_timer",
        "_http2",
        "_lane",
        "_lingering",
        "_peer",
        "_preadmitted",
        "_refusing",
        "_send_mark",
        "_send_timer",
        "_sent",
        "_tunnel",
        "guard",
    )

    def __init__(
        self,
        manager: web.Server,
        *,
        guard: ConnectionGuard,
        admitted: bool = False,
        peer: str | None = None,
        http2: Http2Front | None = None,
        lane: HitLaneFront | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(manager, **kwargs)
        self.guard = guard
        self._http2 = http2
        # The hit lane, while aiohttp's parser has been fed only whole heads it read (so is
        # between messages); None from the first byte it could not read on (decision 0050).
        self._lane = lane
        self._h2c_first = False  # the next bytes are the connection's first, h2c is on
        self._preadmitted = admitted  # by _TlsAccepted, before the handshake
        self._peer = peer  # the address the guard counts the connection against
        self._admitted = False
        self._head_begun = False  # bytes of a request head came, the head is not whole yet
        self._head_timer: asyncio.TimerHandle | None = None
        self._refusing: asyncio.Transport | None = None  # refused at the limit
        self._lingering = False
        self._tunnel = False  # switched protocols: a tunnel's bytes (take_over)
        # The send timeout's window (decision 0046): its timer, the buffer's size when last
        # measured, and the bytes seen to leave the buffer in the window.
        self._send_timer: asyncio.TimerHandle | None = None
        self._send_mark = 0
        self._sent = 0

    @property
    def peer_address(self) -> str | None:
        """The address the guard counts the connection against (its client's)."""
        return self._peer

    @property
    def connected(self) -> bool:
        """Whether it holds an admitted connection (it releases it when that is lost)."""
        return self._admitted

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        http2 = self._http2
        if http2 is not None and http2.tls and self._preadmitted:
            ssl_object = transport.get_extra_info("ssl_object")
            if ssl_object is not None and ssl_object.selected_alpn_protocol() == "h2":
                protocol = http2.connection(self._peer)  # holds the admission from now on
                transport.set_protocol(protocol)
                protocol.connection_made(transport)
                return
        if not self._preadmitted:
            self._peer = peer_of(transport)
            if not self.guard.admit(self._peer):
                self._refuse(cast(asyncio.Transport, transport))  # uvloop's is not a subclass
                return
        self._h2c_first = http2 is not None and not http2.tls
        super().connection_made(transport)
        self._admitted = True
        # A new connection must bring a whole request head in time, as nginx's
        # client_header_timeout: aiohttp's own timer would wait keepalive_timeout.
        self._head_timer = self._loop.call_later(self.guard.header_timeout, self._head_late)

    def _refuse(self, transport: asyncio.Transport) -> None:
        """Answer 503 without reading the request, and close. Closed at once, a socket with
        the request unread would be reset, and the reset would destroy the 503 on its way:
        so, as nginx's lingering close, the answer is followed by our end of the stream,
        the request is read and dropped until the client closes, for REFUSED_LINGER seconds
        at most, and by at most ``guard.linger_max`` connections at a time (past it, the
        oldest is closed)."""
        self._refusing = transport
        transport.write(REFUSED)
        if not transport.can_write_eof():
            transport.close()
            return
        self._lingering = True
        self.guard.linger(self, transport.close)
        transport.write_eof()
        self._head_timer = self._loop.call_later(REFUSED_LINGER, transport.close)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None
        if self._refusing is not None:  # never handed to aiohttp
            if self._lingering:
                self._lingering = False
                self.guard.lingered(self)
            self._refusing = None
            return
        if self._admitted:
            self._admitted = False
            self.guard.release(self._peer)
        if self._tunnel:
            self._tunnel = False
            self.guard.tunnel_closed()
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        super().pause_writing()
        transport = self.transport
        if transport is None or self._tunnel:
            return  # a tunnel has timeouts of its own (edge/tunnel.py)
        self._send_mark = transport.get_write_buffer_size()
        if self._send_timer is None:
            self._sent = 0
            self._send_timer = self._loop.call_later(self.guard.send_timeout, self._send_check)

    def resume_writing(self) -> None:
        transport = self.transport
        if transport is not None:
            self._sent += max(0, self._send_mark - transport.get_write_buffer_size())
        super().resume_writing()

    def _send_check(self) -> None:
        """A send_timeout window ended: cut a client that took too little of a full buffer;
        else start a new window while the buffer is still full."""
        self._send_timer = None
        transport = self.transport
        if transport is None or not self._paused:
            return  # it keeps up now: the next full buffer starts a new window
        buffered = transport.get_write_buffer_size()
        self._sent += max(0, self._send_mark - buffered)
        timeout = self.guard.send_timeout
        if self._sent < SEND_PROGRESS:
            # Debug only: any client can cause it (issue 32 §9, no line a client can flood).
            log.debug("a client took %d bytes in %g s of an answer: cut", self._sent, timeout)
            self.guard.send_timeouts += 1
            transport.abort()
            return
        self._send_mark, self._sent = buffered, 0
        self._send_timer = self._loop.call_later(timeout, self._send_check)

    def tunnel_opened(self) -> None:
        self._tunnel = True
        self.guard.tunnel_opened()

    def close(self) -> None:
        if self._tunnel:
            # aiohttp's close() would drop every byte the client sends from now on; a tunnel
            # carries them until it ends, or until the drain's deadline closes it.
            return
        super().close()
        # At shutdown (the server's pre_shutdown) aiohttp leaves an idle connection open
        # until its final timeout; close it now, so that a drain waits only for requests.
        if not self._request_in_progress and not self._messages:
            self.force_close()

    def data_received(self, data: bytes) -> None:
        # On the hit path: one test more than aiohttp's own when a whole head came at once.
        if self._h2c_first:
            self._h2c_first = False
            if len(data) >= 3 and H2_PREFACE.startswith(data[:24]) and self._http2 is not None:
                self._to_http2(self._http2, data)
                return
        if self._refusing is None:
            if self._lane is not None:
                self._through_lane(self._lane, data)
                return
            _data_received(self, data)
            if self._head_timer is not None or not self._messages:
                self._head_progress(data)

    def _through_lane(self, lane: HitLaneFront, data: bytes) -> None:
        """The heads in ``data``, if it is whole heads of the lane's subset (core/http/lane.py)
        and nothing else: each answered by the lane if aiohttp is idle and the lane has the
        answer, else fed to aiohttp's parser as it came, alone (so its parser stays between
        messages). Any other ``data`` goes to aiohttp whole, as with the lane off (even the
        heads before the bytes it could not read: aiohttp's parser drops a whole read with
        an error in it), and the lane is off for the connection. Once aiohttp holds a
        request, the ones behind it are aiohttp's too: the answers keep the requests' order."""
        if self._force_close or self._close:
            return  # as aiohttp's data_received
        head = read_head(data)
        size = len(data)
        if head is not None and head.end == size:
            heads = [head]  # the usual read: one head
        else:
            heads = []
            while head is not None:
                heads.append(head)
                head = read_head(data, head.end) if head.end < size else None
            if not heads or heads[-1].end != size:
                self._lane = None
                self._to_parser(data)
                return
        start = 0
        for head in heads:
            # aiohttp is idle: waiting for a request (or not begun, and never given one: a
            # TLS connection's first read can come before its request loop has run).
            waiter = self._waiter
            if (
                not self._messages
                and not self._paused
                and ((waiter is not None and not waiter.done()) or not self._request_count)
                and self.transport is not None
            ):
                answer = lane.answer(self.transport, self._peer, head)
                if answer is not None:
                    self._lane_sent(answer)
                    start = head.end
                    continue
            self._to_parser(data[start : head.end] if start or head.end < size else data)
            start = head.end

    def _to_parser(self, data: bytes) -> None:
        _data_received(self, data)
        if self._head_timer is not None or not self._messages:
            self._head_progress(data)

    def _lane_sent(self, answer: tuple[bytes, ...]) -> None:
        """After a lane answer: what aiohttp does once a response is sent on a connection
        kept open (its keep-alive timer from now), and the head timer stopped, as for any
        whole head."""
        transport = self.transport
        assert transport is not None
        if len(answer) == 1:
            transport.write(answer[0])
        else:
            transport.writelines(answer)
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        self._head_begun = False
        self._keepalive = True  # as aiohttp sets it from a response that keeps the connection
        loop = self._loop
        self._next_keepalive_close_time = loop.time() + self._keepalive_timeout
        if self._keepalive_handle is None:
            self._keepalive_handle = loop.call_at(
                self._next_keepalive_close_time, self._process_keepalive
            )

    def _to_http2(self, http2: Http2Front, data: bytes) -> None:
        """Hand the connection, admission and all, to HTTP/2 (h2c with prior knowledge): this
        handler stops as if its connection were lost, without closing it."""
        transport = self.transport
        assert transport is not None
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        self._admitted = False  # the HTTP/2 connection releases it
        self.transport = None
        request_loop = self._task_handler  # not begun yet, under uvloop: it never will
        web.RequestHandler.connection_lost(self, None)
        if request_loop is not None:
            request_loop.cancel()
        protocol = http2.connection(self._peer)
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        protocol.data_received(data)

    def _head_progress(self, data: bytes) -> None:
        if self._messages:  # a whole head: the request is the handler's now
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            self._head_begun = False
        elif data and (self._waiter is not None or not self._request_count):
            # Bytes of a head: the first request's, or the next one's on an idle connection
            # (not a body's, which come while a request is handled and _waiter is None).
            self._head_begun = True
            if self._head_timer is None:
                self._head_timer = self._loop.call_later(self.guard.header_timeout, self._head_late)

    def _head_late(self) -> None:
        self._head_timer = None
        if self._messages or self._waiter is None or self.transport is None:
            return  # a head came, or a request is being handled
        self.guard.header_timed_out()
        if self._head_begun:
            self.transport.write(HEAD_TIMED_OUT)
        self.force_close()

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if isinstance(exc, HttpProcessingError):
            if exc.message.startswith(H2C_PREFACE_ERROR):  # a client speaking h2c, not junk
                refused = web.Response(status=505, text=H2C_REFUSED)
                refused.force_close()
                return refused
            self.guard.bad_request(request.remote, message or exc.message)
        super().handle_error(request, status, exc, message)  # its logging, and its refusal
        return error_page(status)

    def log_exception(self, *args: Any, **kw: Any) -> None:
        if isinstance(kw.get("exc_info"), HttpProcessingError):
            return  # counted, and summarised by the guard's throttled line
        super().log_exception(*args, **kw)


def error_page(status: int) -> web.Response:
    """The answer to a request aiohttp could not read or handle, in place of its own page,
    which echoes the offending bytes as text/plain (issue 24): a fixed text of ours, never
    sniffed as anything else, never stored, and the connection closed after it."""
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    why = "the request could not be read" if status < 500 else "the request failed"
    response = web.Response(status=status, text=f"{status} {phrase}: {why}\n")
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Cache-Control"] = "no-store"
    response.force_close()
    return response


class GuardedServer(web.Server):
    """A ``web.Server`` whose connections are ``GuardedRequestHandler``s of ``guard``."""

    def __init__(
        self,
        handler: Any,
        *,
        guard: ConnectionGuard,
        http2: Http2Front | None = None,
        lane: HitLaneFront | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(handler, keepalive_timeout=guard.keepalive_timeout, **kwargs)
        self.guard = guard
        self.http2 = http2  # HTTP/2 beside HTTP/1.1 (ALPN h2, or h2c): decision 0036
        self.lane = lane  # fresh hits before aiohttp reads them: decision 0050

    def __call__(self) -> web.RequestHandler:
        return GuardedRequestHandler(
            self,
            guard=self.guard,
            http2=self.http2,
            lane=self.lane,
            loop=self._loop,
            **self._kwargs,
        )

    def admitted(self, peer: str | None) -> GuardedRequestHandler:
        """A handler for a connection from ``peer`` its guard has admitted already
        (``_TlsAccepted``)."""
        return GuardedRequestHandler(
            self,
            guard=self.guard,
            admitted=True,
            peer=peer,
            http2=self.http2,
            lane=self.lane,
            loop=self._loop,
            **self._kwargs,
        )

    def pre_shutdown(self) -> None:
        super().pre_shutdown()
        if self.http2 is not None:
            self.http2.pre_shutdown()

    async def shutdown(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        if self.http2 is not None:
            await self.http2.shutdown()
        await super().shutdown(timeout)


class GuardedAppRunner(web.AppRunner):
    """An ``AppRunner`` whose server is a ``GuardedServer``."""

    def __init__(self, app: web.Application, *, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self._guard = guard

    async def _make_server(self) -> web.Server:
        plain = await super()._make_server()
        return GuardedServer(
            plain.request_handler,
            guard=self._guard,
            request_factory=plain.request_factory,
            handler_cancellation=plain.handler_cancellation,
            loop=plain._loop,
            **plain._kwargs,
        )
