"""Where the edge relies on aiohttp below its documented API (and handshakes.py, for TLS).

Two things here would break silently if aiohttp changed underneath them, so
tests/edge/test_aiohttp_adapter.py asserts each assumption they make and fails the day one no
longer holds; pyproject.toml pins aiohttp to the minor version those tests run on.

- ``Prewritten``: a ``web.StreamResponse`` whose message is already bytes (a fresh hit),
  and which answers every read a response answers. Two shortcuts keep a hit cheap (decision
  0013 has the numbers): it skips ``StreamResponse.__init__`` and computes the four
  attributes that constructor sets from its bytes, only when something reads them; and it
  writes the bytes to the request's transport, beside the request's writer, then waits on
  that writer's drain. Assumed: the constructor sets exactly those four attributes, every
  other one a response reads has a class-level default, aiohttp's request loop asks a
  response only for ``prepare``, ``write_eof`` and ``keep_alive``, the writer has sent and
  buffered nothing when the response is prepared, and its ``drain`` waits while the
  client's socket is above its high-water mark.
- ``OriginConnector``: a pooled origin connection is reused only if aiohttp's client protocol
  says it need not close (``ResponseHandler.should_close``, a public name on a class aiohttp
  does not document). Assumed: ``connect``'s signature, and that bytes arriving on an idle
  connection make it true.
- ``answer_and_close``: a response sent at once, then the client connection closed through
  the server protocol's ``force_close`` (``request.protocol``: ``RequestHandler``, which
  aiohttp does not document), skipping aiohttp's lingering read of an unread body (up to
  ``lingering_time``, 10 s). Assumed: after ``force_close`` the request loop neither reads
  the body nor logs an error, and the bytes written before it still reach the client.
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
- ``request_head``: the parsed head a request was built from (``BaseRequest._message``, a
  ``RawRequestMessage``), whose fields the fast hit path reads as tuple fields, instead of
  five reified properties that each cost a Python call on every new request (decision 0013
  has the numbers). Assumed: the request's ``method``, ``version``, ``keep_alive``,
  ``raw_path`` and ``headers`` are that message's ``method``, ``version``, ``not
  should_close``, ``path`` and ``headers``.
- ``take_over``: a tunnelled connection's bytes from the client, after a 101 (decision 0022),
  handed over by the request protocol's ``set_parser`` as to aiohttp's own WebSocket
  response; a tunnelling ``GuardedRequestHandler`` keeps its connection open through a drain,
  and counts it in its guard. Assumed: ``set_parser`` first feeds the bytes held since the
  head (``_message_tail``, for a "websocket" or "tcp" Upgrade), then every later read goes to
  the parser's ``feed_data`` (answered with an (eof, tail) pair) and the connection's loss to
  its ``feed_eof``; the header timer sees none of them while the handler runs; flow control
  (``pause_reading``) leaves the HTTP parser alone once ``_upgraded`` is set; and
  ``RequestHandler.close`` (the server's ``pre_shutdown``) makes later reads be dropped.
- ``h2_request`` and ``BodyFlow`` (HTTP/2, decision 0036): an HTTP/2 stream's request is a
  ``web.BaseRequest`` built from a ``RawRequestMessage`` of version 2.0, the stream's body
  ``StreamReader`` and a writer of aiohttp's public ``AbstractStreamWriter`` kind
  (proxy/edge/h2/stream.py), so the edge's handler serves it as it serves HTTP/1.1. Assumed:
  ``BaseRequest`` reads of its ``protocol`` only ``transport`` (the connection's, for TLS
  and SNI), ``ssl_context``, ``peername`` and ``sockname`` and, for ``post()`` which the
  edge never calls, two parser limits; a
  ``StreamReader`` asks its protocol only ``pause_reading``, ``resume_reading``,
  ``connected`` and ``_reading_paused`` (``BodyFlow`` is aiohttp's ``BaseProtocol`` with
  those turned into the stream's flow-control window); ``web.Response`` writes a version
  2.0 message through ``write_headers``, ``write`` and ``write_eof`` without a chunk framing
  of its own (``enable_chunking`` is the writer's to ignore). A ``GuardedRequestHandler``
  hands its transport to the HTTP/2 side (``Http2Front``) before aiohttp sees a byte: on a
  TLS connection whose ALPN chose h2, in ``connection_made``; with h2c on, when the first
  bytes of a connection are the HTTP/2 preface. Assumed: ``transport.set_protocol`` and,
  for h2c, that ``RequestHandler.connection_lost`` with its ``transport`` unset, and its
  request loop (``_task_handler``) cancelled, stop it without closing the transport.
  ``answer_and_close`` and ``send_continue`` (100 Continue) do on HTTP/2 what their HTTP/1.1
  bytes do, through the stream (an RST_STREAM, an interim HEADERS).

The TLS listener's site, which relies on aiohttp's sites the same way, is in
proxy/edge/handshakes.py, with its assumptions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from http import HTTPStatus
from time import perf_counter
from typing import Any, Protocol, cast, runtime_checkable

from aiohttp import ClientRequest, ClientTimeout, StreamReader, TCPConnector, web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.base_protocol import BaseProtocol
from aiohttp.connector import Connection
from aiohttp.http import HttpProcessingError, HttpVersion, RawRequestMessage
from aiohttp.streams import EMPTY_PAYLOAD
from aiohttp.tracing import Trace
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from proxy.core.observe.responses import record as record_response
from proxy.edge.connections import ConnectionGuard

# llhttp's error for an HTTP/2 connection preface (``PRI * HTTP/2.0``) where HTTP/1.1 is served.
H2C_PREFACE_ERROR = "Pause on PRI/Upgrade"
H2C_REFUSED = (
    "505 HTTP Version Not Supported: this listener speaks HTTP/1.1; HTTP/2 is served on the"
    " TLS listener (ALPN h2), and here with [edge] h2c\n"
)

# A body up to this size is copied behind its head and sent in one write; a larger one is
# sent from its own bytes, after the head, not copied.
JOINED_BODY_MAX = 16 * 1024


def request_head(request: web.BaseRequest) -> RawRequestMessage:
    """The parsed request head ``request`` was made from (module docstring)."""
    return request._message


HTTP2 = HttpVersion(2, 0)
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def h2_request(
    *,
    method: str,
    path: str,
    headers: CIMultiDict[str],
    raw_headers: tuple[tuple[bytes, bytes], ...],
    body: StreamReader | None,
    connection: asyncio.BaseProtocol,
    writer: AbstractStreamWriter,
    task: asyncio.Task[None],
) -> web.BaseRequest:
    """The request an HTTP/2 stream carries, as the edge's handler reads any request: version
    2.0, never ``should_close`` (the stream ends, not the connection), ``body`` None for a
    stream that ended with its headers. ``path`` is an origin-form target (``:path``), or
    ``*`` for OPTIONS, checked by the caller; ``connection`` has the connection's
    ``transport``."""
    if path.startswith("/"):
        part, _, fragment = path.partition("#")
        part, _, query = part.partition("?")
        url = URL.build(path=part, query_string=query, fragment=fragment, encoded=True)
    else:
        url = URL(path, encoded=True)
    message = RawRequestMessage(
        method, path, HTTP2, CIMultiDictProxy(headers), raw_headers, False, None, False, False, url
    )
    payload = EMPTY_PAYLOAD if body is None else body
    loop = task.get_loop()
    return web.BaseRequest(message, payload, cast(Any, connection), writer, task, loop)


class BodyFlow(BaseProtocol):
    """What an HTTP/2 request body's ``StreamReader`` pauses and resumes: the stream's
    window. ``resumed`` is called when the reader has room again (``pause_reading`` only
    notes that it is full: the stream's window, not the socket, stops the client)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, resumed: Callable[[], None]) -> None:
        super().__init__(loop)
        self._resumed = resumed
        self.open = True

    @property
    def connected(self) -> bool:
        return self.open

    def pause_reading(self) -> None:
        self._reading_paused = True

    def resume_reading(self, resume_parser: bool = True) -> None:
        self._reading_paused = False
        self._resumed()


def body_reader(flow: BodyFlow, limit: int) -> StreamReader:
    """A request body's reader: full (``flow`` paused) past twice ``limit`` bytes."""
    return StreamReader(flow, limit, loop=flow._loop)


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


class Prewritten(web.StreamResponse):
    """A response sent as ``parts``: the status line, then field lines (a part may hold
    several), the blank line, and the body, last. For HTTP/1.1 requests that keep the
    connection open: the parts must frame the body with Content-Length.

    It reads as what it sends, as any response does once sent: ``status``, ``reason``,
    ``headers`` (read-only, parsed from the parts only when read), ``content_length``,
    ``keep_alive``, ``prepared`` and ``body_length`` (bytes sent, head included, as aiohttp
    counts it). Its message cannot change: ``headers`` refuses writes and ``set_status``
    raises. Nothing is computed for a hit that nobody reads.
    """

    _keep_alive = True
    _parsed_headers: CIMultiDictProxy[str] | None = None
    _own_state: dict[str | web.ResponseKey[Any], Any] | None = None

    # Plain attributes where StreamResponse has properties: the access-log hook reads both
    # on every response (decision 0019), and a property costs a Python frame per read.
    status: int = 0  # set by __init__
    body_length: int = 0  # set by prepare, with _body_length

    def __init__(
        self, parts: tuple[bytes, ...], counts: list[float] | None = None, started: float = 0.0
    ) -> None:  # no super().__init__(): see module
        self._parts = parts
        # The domain's response figures (proxy/core/observe/responses.py), which it adds itself
        # to once
        # written, and the perf_counter() its request's lookup began at: a fast hit is not
        # passed through the access-log hook's figures (decision 0019 has the cost).
        self._counts = counts
        self.started = started
        # Hits share their entries' status lines: the few distinct ones are parsed once.
        status = _STATUSES.get(parts[0])
        self.status = status if status is not None else _status_of(parts[0])

    # What StreamResponse.__init__ would set, read from the parts instead.

    @property
    def _status(self) -> int:  # type: ignore[override]
        return self.status

    @property
    def _reason(self) -> str:  # type: ignore[override]
        return self._parts[0][13:-2].decode("utf-8")

    @property
    def _headers(self) -> CIMultiDictProxy[str]:  # type: ignore[override]
        headers = self._parsed_headers
        if headers is None:
            head = b"".join(self._parts[:-1]).decode("utf-8")
            lines = head.split("\r\n")[1:]
            fields = (line.partition(": ") for line in lines if line)
            headers = CIMultiDictProxy(CIMultiDict((name, value) for name, _, value in fields))
            self._parsed_headers = headers
        return headers

    @property
    def headers(self) -> CIMultiDictProxy[str]:  # type: ignore[override]
        return self._headers

    @property
    def _state(self) -> dict[str | web.ResponseKey[Any], Any]:  # type: ignore[override]
        state = self._own_state
        if state is None:
            state = self._own_state = {}
        return state

    @property
    def _eof_sent(self) -> bool:  # type: ignore[override]
        return self._body_length > 0

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        if self._body_length:
            return None  # sent already
        # Straight to the transport, not through the request's writer, which costs 6% of a
        # hit (decision 0013); that writer has sent nothing for this request, and is sent
        # nothing after it, so the bytes are the whole message.
        transport = request.transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("the client has gone")
        parts = self._parts
        body = parts[-1]
        if len(body) > JOINED_BODY_MAX:
            # Handed over as it is (one writev with the head), not copied into a new buffer.
            head = b"".join(parts[:-1])
            transport.writelines((head, body))
            self._body_length = self.body_length = len(head) + len(body)
        else:
            message = b"".join(parts)
            transport.write(message)
            self._body_length = self.body_length = len(message)
        counts = self._counts
        if counts is not None:
            record_response(counts, self.status, self.body_length, perf_counter() - self.started)
        # Flow control as aiohttp's own writer does it: wait while the socket's buffer is
        # above its high-water mark, so a client that does not read cannot grow it.
        await request.writer.drain()
        return None

    async def write_eof(self, data: bytes = b"") -> None:
        return None  # the message ended with its parts

    @property
    def parts(self) -> tuple[bytes, ...]:
        return self._parts

    def sent(self, size: int) -> None:
        """Sent by other means than ``prepare`` (an HTTP/2 stream, proxy/edge/h2/stream.py):
        ``size`` bytes of body, counted as ``prepare`` counts what it writes."""
        self._body_length = self.body_length = size
        self._payload_writer = _SENT
        counts = self._counts
        if counts is not None:
            record_response(counts, self.status, size, perf_counter() - self.started)


# What a Prewritten sent over HTTP/2 reads as its writer: ``prepared`` is true even for an
# empty body (StreamResponse.prepared reads ``_payload_writer``).
_SENT: Any = object()


def _status_of(line: bytes) -> int:
    """The status of a status line ("HTTP/1.1 200 OK\r\n"), remembered (bounded)."""
    status = int(line[9:12])
    if len(_STATUSES) < 1024:
        _STATUSES[line] = status
    return status


_STATUSES: dict[bytes, int] = {}


class OriginConnector(TCPConnector):
    """Hands out a pooled connection only if the origin sent nothing on it while it was idle.

    Bytes arriving on an idle keep-alive connection (the late tail of a body longer than its
    Content-Length, or a response nobody asked for) would be read as the answer to the next
    request sent on it, and stored under that request's key: response queue poisoning.
    aiohttp parses them as they arrive into a queued response or an error, and either makes
    the connection ``should_close``; such a connection is closed here, not reused. (A piece
    shorter than a response head is dropped: aiohttp starts a new parser for every request.)
    """

    async def connect(
        self,
        req: ClientRequest,
        traces: list[Trace],
        timeout: ClientTimeout,  # noqa: ASYNC109 (aiohttp's signature)
    ) -> Connection:
        while True:
            connection = await super().connect(req, traces, timeout)
            protocol = connection.protocol
            if protocol is None or not protocol.should_close:
                return connection
            connection.close()


@runtime_checkable
class Informational(Protocol):
    """A writer that sends interim answers itself (an HTTP/2 stream's: a HEADERS frame)."""

    def informational(self, status: int) -> None: ...


async def send_continue(request: web.BaseRequest) -> None:
    """``100 Continue`` (RFC 9110 §15.2.1), before the request's body is read: HTTP/1.1's
    status line on the request's writer, or an HTTP/2 stream's interim HEADERS."""
    writer = request.writer
    if isinstance(writer, Informational):
        writer.informational(100)
    else:
        await writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")


async def answer_and_close(request: web.BaseRequest, response: web.StreamResponse) -> None:
    """Send ``response`` now, then close the connection without reading the rest of the
    request body: for a body that stopped arriving, where lingering would only hold the
    connection open. The transport sends what it was given before it closes."""
    await response.prepare(request)
    await response.write_eof()
    protocol = request.protocol
    if isinstance(protocol, web.RequestHandler):
        protocol.force_close()
    # HTTP/2: the stream ended with its answer, and its writer reset it (NO_ERROR) to stop
    # the body (RFC 9113 §8.1); the connection goes on.


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
        "_guard",
        "_h2c_first",
        "_head_begun",
        "_head_timer",
        "_http2",
        "_lingering",
        "_peer",
        "_preadmitted",
        "_refusing",
        "_tunnel",
    )

    def __init__(
        self,
        manager: web.Server,
        *,
        guard: ConnectionGuard,
        admitted: bool = False,
        peer: str | None = None,
        http2: Http2Front | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(manager, **kwargs)
        self._guard = guard
        self._http2 = http2
        self._h2c_first = False  # the next bytes are the connection's first, h2c is on
        self._preadmitted = admitted  # by _TlsAccepted, before the handshake
        self._peer = peer  # the address the guard counts the connection against
        self._admitted = False
        self._head_begun = False  # bytes of a request head came, the head is not whole yet
        self._head_timer: asyncio.TimerHandle | None = None
        self._refusing: asyncio.Transport | None = None  # refused at the limit
        self._lingering = False
        self._tunnel = False  # switched protocols: a tunnel's bytes (take_over)

    @property
    def guard(self) -> ConnectionGuard:
        return self._guard

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
            if not self._guard.admit(self._peer):
                self._refuse(cast(asyncio.Transport, transport))  # uvloop's is not a subclass
                return
        self._h2c_first = http2 is not None and not http2.tls
        super().connection_made(transport)
        self._admitted = True
        # A new connection must bring a whole request head in time, as nginx's
        # client_header_timeout: aiohttp's own timer would wait keepalive_timeout.
        self._head_timer = self._loop.call_later(self._guard.header_timeout, self._head_late)

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
        self._guard.linger(self, transport.close)
        transport.write_eof()
        self._head_timer = self._loop.call_later(REFUSED_LINGER, transport.close)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        if self._refusing is not None:  # never handed to aiohttp
            if self._lingering:
                self._lingering = False
                self._guard.lingered(self)
            self._refusing = None
            return
        if self._admitted:
            self._admitted = False
            self._guard.release(self._peer)
        if self._tunnel:
            self._tunnel = False
            self._guard.tunnel_closed()
        super().connection_lost(exc)

    def tunnel_opened(self) -> None:
        self._tunnel = True
        self._guard.tunnel_opened()

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
            _data_received(self, data)
            if self._head_timer is not None or not self._messages:
                self._head_progress(data)

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
                self._head_timer = self._loop.call_later(
                    self._guard.header_timeout, self._head_late
                )

    def _head_late(self) -> None:
        self._head_timer = None
        if self._messages or self._waiter is None or self.transport is None:
            return  # a head came, or a request is being handled
        self._guard.header_timed_out()
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
            self._guard.bad_request(request.remote, message or exc.message)
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
        **kwargs: Any,
    ) -> None:
        super().__init__(handler, keepalive_timeout=guard.keepalive_timeout, **kwargs)
        self.guard = guard
        self.http2 = http2  # HTTP/2 beside HTTP/1.1 (ALPN h2, or h2c): decision 0036

    def __call__(self) -> web.RequestHandler:
        return GuardedRequestHandler(
            self, guard=self.guard, http2=self.http2, loop=self._loop, **self._kwargs
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


# A tunnel's bytes from the client are read ahead up to twice this, then the client's socket
# is no longer read until the origin has taken some (aiohttp's StreamReader flow control).
TUNNEL_READ_LIMIT = 64 * 1024


class _TunnelFeed:
    """Stands where aiohttp's request protocol expects its WebSocket reader: the protocol
    hands it every byte the client sends, and its end."""

    __slots__ = ("_reader",)

    def __init__(self, reader: StreamReader) -> None:
        self._reader = reader

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        self._reader.feed_data(data)
        return False, b""  # never at its end: the tunnel ends when either side closes

    def feed_eof(self) -> None:
        self._reader.feed_eof()


def take_over(request: web.BaseRequest) -> StreamReader:
    """From now on, what the client sends on the request's connection (the protocol it
    switched to, after a 101): read from the returned reader, which ends when the client
    closes. Bytes it sent after its request head and before this call come first. The
    connection serves no request after this one: it closes when the handler returns."""
    protocol = request.protocol
    reader = StreamReader(protocol, TUNNEL_READ_LIMIT, loop=asyncio.get_running_loop())
    if protocol.transport is None or protocol.transport.is_closing():
        reader.feed_eof()  # gone already: its loss was reported before the feed was set
        return reader
    if isinstance(protocol, GuardedRequestHandler):
        protocol.tunnel_opened()
    # Marked upgraded, as aiohttp marks a "websocket" or "tcp" one itself: otherwise the
    # reader's flow control (protocol.pause_reading) would pause the HTTP parser, which has
    # no body to pause for a protocol aiohttp does not know, and fail.
    protocol._upgraded = True
    protocol.set_parser(cast(Any, _TunnelFeed(reader)))
    protocol.keep_alive(False)
    return reader
