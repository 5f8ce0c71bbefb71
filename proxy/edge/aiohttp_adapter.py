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

- ``plain_writer`` and ``sent_beside``: a large stored body sent with ``sendfile`` (decision
  0039, proxy/edge/file_body.py) goes to the socket beside the request's ``StreamWriter``,
  which must then be one that would have written the body as it is. Assumed: aiohttp's
  HTTP/1.1 writer is ``StreamWriter``, it marks a chunked body in ``chunked`` and a
  compressed one in ``_compress``, ``send_headers`` writes the head it holds, and its
  ``buffer_size``/``output_size`` count what was sent (the access log reads them).

- ``InterimResponse``: the origin client's response class (``ClientSession(response_class=)``,
  a documented hook), which hands each interim answer (1xx but 100 and 101) aiohttp's
  ``ClientResponse.start`` reads and drops to the ``INTERIM`` hook of the request's context
  (proxy/edge/interim.py relays them; decision 0049). Assumed: ``start`` sets ``_protocol``
  from the connection and calls its ``read()`` once per message, 1xx included, until a final
  one; nothing else reads ``_protocol``. ``head_started`` reads whether the request's HTTP/1.1
  writer has its final head (``_headers_buf``, ``_headers_written``): no interim answer may
  follow it.

The connections' side (``GuardedServer``, ``GuardedRequestHandler``, error pages, the hand-over
to HTTP/2) is in proxy/edge/aiohttp_server.py, the HTTP/2 requests (``h2_request``,
``BodyFlow``) in proxy/edge/aiohttp_h2.py, each with its assumptions.
The TLS listener's site, which relies on aiohttp's sites the same way, is in
proxy/edge/handshakes.py, with its assumptions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from contextvars import ContextVar
from time import perf_counter
from typing import Any, Protocol, cast, runtime_checkable

from aiohttp import ClientRequest, ClientResponse, ClientTimeout, StreamReader, TCPConnector, web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.connector import Connection
from aiohttp.http import RawRequestMessage, RawResponseMessage
from aiohttp.http_writer import StreamWriter
from aiohttp.tracing import Trace
from multidict import CIMultiDict, CIMultiDictProxy

from proxy.core.observe.responses import record as record_response
from proxy.edge.aiohttp_server import GuardedRequestHandler

# A body up to this size is copied behind its head and sent in one write; a larger one is
# sent from its own bytes, after the head, not copied.
JOINED_BODY_MAX = 16 * 1024


def request_head(request: web.BaseRequest) -> RawRequestMessage:
    """The parsed request head ``request`` was made from (module docstring)."""
    return request._message


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

    def informational(self, status: int, fields: Iterable[tuple[str, str]] = ()) -> None: ...


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


def plain_writer(writer: AbstractStreamWriter) -> StreamWriter | None:
    """The request's writer, if it is aiohttp's own HTTP/1.1 writer on a plain socket that
    sends the body as it is written (no chunks, no compression); else None (TLS, HTTP/2, a
    transfer coding: the body must go through ``write``)."""
    if type(writer) is not StreamWriter or writer.chunked or writer._compress is not None:
        return None
    transport = writer.transport
    if transport is None or transport.is_closing():
        return None
    extra = transport.get_extra_info
    if extra("sslcontext") is not None or extra("ssl_object") is not None:
        return None
    return writer if extra("socket") is not None else None


def sent_beside(writer: StreamWriter, size: int) -> None:
    """Count ``size`` bytes of the body sent on the writer's socket without it."""
    writer.buffer_size += size
    writer.output_size += size


# Told of each interim answer an origin sends to a request made in this context: its status
# and fields (proxy/edge/interim.py sets it around the origin requests whose client waits).
InterimHook = Callable[[int, tuple[tuple[str, str], ...]], Awaitable[None]]
INTERIM: ContextVar[InterimHook | None] = ContextVar("interim", default=None)


class InterimResponse(ClientResponse):
    """aiohttp's response, but the interim answers its ``start`` reads past are told to the
    ``INTERIM`` hook first (module docstring). 100 and 101 are aiohttp's (and the edge's) own."""

    _read_from: Any = None

    @property
    def _protocol(self) -> Any:
        return self._read_from

    @_protocol.setter
    def _protocol(self, protocol: Any) -> None:
        hook = INTERIM.get()
        self._read_from = protocol if hook is None or protocol is None else _Told(protocol, hook)


class _Told:
    """The connection's protocol as ``ClientResponse.start`` reads it, telling each interim
    message to ``hook`` before handing it on."""

    __slots__ = ("_hook", "_protocol")

    def __init__(self, protocol: Any, hook: InterimHook) -> None:
        self._protocol = protocol
        self._hook = hook

    async def read(self) -> tuple[RawResponseMessage, StreamReader]:
        message, payload = await self._protocol.read()
        code = message.code
        if 101 < code < 200:
            await self._hook(code, tuple(message.headers.items()))
        return message, payload

    def __getattr__(self, name: str) -> Any:
        return getattr(self._protocol, name)


def head_started(writer: AbstractStreamWriter) -> bool:
    """Whether the final answer's head is written (or held to go with its first bytes) on the
    request's aiohttp HTTP/1.1 writer: after it, no interim answer may be sent."""
    if isinstance(writer, StreamWriter):
        return writer._headers_buf is not None or writer._headers_written
    return bool(getattr(writer, "headers_sent", False))
