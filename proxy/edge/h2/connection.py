"""One HTTP/2 connection: bytes in, the machine's events to streams, frames out (decision
0036; the frame layer itself, sans I/O, is machine.py and streams.py).

Every stream's request goes to the listener's handler (``Edge.handle``, behind the
Host-vs-SNI check on TLS) as a ``web.BaseRequest`` of version 2.0 (``h2_request``), in a task
of its own, and its answer comes back through the stream's writer (proxy/edge/h2/stream.py).
What it may cost is limits.py's; each limit, when crossed:

- a stream past SETTINGS_MAX_CONCURRENT_STREAMS, or past its client address's streams over
  all its connections (client_streams.py, decision 0060): refused (RST_STREAM
  REFUSED_STREAM) before a task or a request is made for it, as a stream error the client
  caused is reset; each spends the reset budget;
- a decoded head past SETTINGS_MAX_HEADER_LIST_SIZE (an HPACK bomb), an encoded one past
  twice that (refused before it is decoded) or a CONTINUATION flood (64 frames of one head
  at most), or any other connection error: GOAWAY with the error, and close;
- more new streams in one read than twice the concurrent streams (nginx 1.25.3), streams
  cancelled before their answer or reset for the client's errors past the reset budget
  (Rapid Reset, MadeYouReset), control frames past their rate (SETTINGS, PING, PRIORITY,
  WINDOW_UPDATE, RST_STREAM, empty DATA floods): GOAWAY ENHANCE_YOUR_CALM, and close;
- requests per connection: GOAWAY NO_ERROR after the last one, whose answer (and those of
  the streams before it) finish; later streams are refused (REFUSED_STREAM), as at shutdown;
- idle: no stream open for ``idle_timeout`` (``preface_timeout`` before the first request):
  GOAWAY NO_ERROR, and close. A stalled answer is stream.py's (``send_timeout``).

A connection starts at most ``START_PER_TURN`` streams' handlers per read, the rest in the
turns of the event loop after it, that many a turn, in their order: 128 requests that
arrive in one read would otherwise all be handled before the loop reads any other
connection (about 30 ms of 503s for a zero-window client blocked by its answers' budget,
every time it opens a connection again: the HTTP/2 soak's second client's p99, decision
0057).

A stream the client resets is not cancelled in the edge, as a vanished HTTP/1.1 client's
request is not (``handler_cancellation=False``: a fill others wait for must finish): its
writes fail at once, and the reset budget bounds how many such streams a client can leave
running.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, cast

from aiohttp import StreamReader, web
from aiohttp.tcp_helpers import tcp_nodelay
from h2.errors import ErrorCodes

from proxy.edge.aiohttp_adapter import Prewritten
from proxy.edge.aiohttp_h2 import BodyFlow, body_reader, h2_request, unread
from proxy.edge.aiohttp_server import error_page
from proxy.edge.connections import ConnectionGuard, ThrottledLine
from proxy.edge.h2.client_streams import ClientStreams
from proxy.edge.h2.events import (
    DataReceived,
    Event,
    GoneAway,
    H2Error,
    RequestReceived,
    ServerReset,
    StreamClosed,
    StreamEnded,
    StreamRefused,
    StreamReset,
    WindowOpened,
)
from proxy.edge.h2.frames import encode_block
from proxy.edge.h2.head import Head
from proxy.edge.h2.limits import H2Limits, ResetBudget, TokenBucket
from proxy.edge.h2.machine import ServerMachine
from proxy.edge.h2.stream import StreamGone, StreamProtocol, StreamTransport, StreamWriter

log = logging.getLogger("proxy.edge")

# Streams a connection starts per read, or per turn of the loop after it (the rest wait
# theirs): more than the streams a client usually keeps open (h2load -m 10, browsers' bursts
# of hits take a few turns), few enough that a turn of 503s is a few milliseconds.
START_PER_TURN = 16


class Front(Protocol):
    """What a connection asks of its listener's HTTP/2 side (proxy/edge/h2/front.py)."""

    limits: H2Limits
    guard: ConnectionGuard
    failures: ThrottledLine
    handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]
    log: Callable[[web.BaseRequest, web.StreamResponse, float], None] | None

    def opened(self, connection: H2Connection) -> None: ...

    def closed(self, connection: H2Connection) -> None: ...


@dataclass(slots=True)
class Stream:
    writer: StreamWriter
    flow: BodyFlow | None = None
    body: StreamReader | None = None
    unacked: int = 0  # body bytes received, not yet read by the handler, so not acknowledged
    task: asyncio.Task[None] | None = None
    started: bool = False  # its task has begun: the handler may be doing work for it


class H2Connection(asyncio.Protocol):
    """The protocol of one HTTP/2 connection, admitted by its listener's guard (released
    when it is lost)."""

    def __init__(self, front: Front, peer: str | None) -> None:
        self._front = front
        self.guard = front.guard  # its request bodies' budget (proxy/edge/bodies.py)
        self.peer_address = peer  # what the guard counts the connection against
        # The streams its address holds open over its connections (decision 0060).
        counts = front.guard.streams
        self._counts = counts if isinstance(counts, ClientStreams) else None
        self.limits = limits = front.limits
        self._loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self._h2 = ServerMachine(limits)
        self._streams: dict[int, Stream] = {}
        # Streams waiting for their turn to start, and how many started in this turn.
        self._to_start: deque[tuple[Stream, Head]] = deque()
        self._started = 0
        self._turn: asyncio.Handle | None = None
        self._last_stream = 0
        self._requests = 0
        self._closing = False  # GOAWAY sent: no new stream
        self._closed = False
        self._resets = ResetBudget(limits.reset_budget)
        now = self._loop.time()
        self._control = TokenBucket(
            limits.control_frames_per_second, limits.control_frame_burst, now
        )
        self._idle: asyncio.TimerHandle | None = None
        self._flush_soon: asyncio.Handle | None = None
        self._writable: asyncio.Future[None] | None = None
        self._paused = False
        self.ssl_context: object | None = None
        self.peername: object | None = None
        self.sockname: object | None = None

    # -- the connection --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = tcp = cast(asyncio.Transport, transport)  # uvloop's: no subclass
        # As aiohttp sets it on its own connections: frames go out when written, not held
        # back for the client's ACK of the last ones (40 ms a turn with delayed ACKs).
        tcp_nodelay(tcp, True)
        # What a request reads of its connection (aiohttp_h2.h2_request).
        self.ssl_context = transport.get_extra_info("sslcontext")
        self.peername = transport.get_extra_info("peername")
        self.sockname = transport.get_extra_info("sockname")
        self._front.opened(self)
        self._h2.initiate()
        self._flush()
        self._idle = self._loop.call_later(self.limits.preface_timeout, self._idle_out)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._closed = True
        self.transport = None
        for timer in (self._idle, self._flush_soon, self._turn):
            if timer is not None:
                timer.cancel()
        for stream in list(self._streams.values()):
            self._gone(stream)
            if not stream.started:
                # Waiting for its turn (or its task not yet run): it never will be served,
                # so it ends here, and leaves its address's count (``_finished``).
                if stream.task is not None:
                    stream.task.cancel()
                self._finished(stream)
        self._to_start.clear()
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._front.closed(self)

    def pause_writing(self) -> None:
        # The client reads less than we send: read no more of what it sends (each frame of a
        # flood may queue an answer) until it has read what is queued.
        self._paused = True
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self._paused = False
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None
        if self.transport is not None and not self._closed:
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        self._started = 0  # a read is a turn of the loop for this connection
        try:
            events = self._h2.receive(data)
            self._dispatch(events)
        except H2Error as exc:
            self.fail(exc.code)
            return
        except Exception as exc:  # a fault of ours: the connection ends, with no traceback
            self._failed("a connection closed with INTERNAL_ERROR", exc)
            self.fail(ErrorCodes.INTERNAL_ERROR)
            return
        if not self._closed:
            self._flush()

    def _failed(self, what: str, exc: BaseException) -> None:
        """Note a fault of ours on the listener's throttled line (its traceback only at
        DEBUG): what a client can make happen must not write a traceback each time."""
        where = traceback.extract_tb(exc.__traceback__)[-1:]
        at = f" at {where[0].filename}:{where[0].lineno}" if where else ""
        self._front.failures.note(f"{what}: {type(exc).__name__}: {exc}{at}")
        log.debug("%s", what, exc_info=exc)

    def _dispatch(self, events: list[Event]) -> None:
        # Frames that asked work but no request (SETTINGS, PING, PRIORITY, WINDOW_UPDATE,
        # RST_STREAM, empty DATA, unknown types); a read that did nothing costs one.
        control, self._h2.control = self._h2.control, 0
        if not events:
            control = max(control, 1)
        new = 0
        for event in events:
            if isinstance(event, RequestReceived):
                new += 1
                self._request(event)
            elif isinstance(event, DataReceived):
                self._data(event)
            elif isinstance(event, StreamEnded):
                self._ended(event.stream_id)
            elif isinstance(event, WindowOpened):
                self._wake(event.stream_id)
            elif isinstance(event, StreamRefused):
                new += 1  # a new stream all the same (nginx counts it so)
                self._reset(event.stream_id)
            elif isinstance(event, StreamReset | ServerReset):
                self._reset(event.stream_id)
            elif isinstance(event, GoneAway):
                self._closing = True
                self._close_when_done()
            if self._closed:
                return
        if new > 2 * self.limits.max_concurrent_streams or not self._control.take(
            self._loop.time(), control
        ):
            self.fail(ErrorCodes.ENHANCE_YOUR_CALM)

    def fail(self, code: ErrorCodes) -> None:
        """GOAWAY with ``code`` and close: the client broke a rule or a limit."""
        if self._closed:
            return
        self._front.guard.http2_goaways += 1
        self._h2.goaway(code, self._last_stream)
        self._flush()
        self._closed = True
        if self.transport is not None:
            self.transport.close()

    def goaway(self) -> None:
        """GOAWAY NO_ERROR with the last stream taken: those streams finish, later ones are
        refused, the connection closes when the last one is done (the machine goes on
        sending the answers still to come after its GOAWAY)."""
        if self._closing or self._closed or self.transport is None:
            self._closing = True
            return
        self._closing = True
        self._h2.goaway(ErrorCodes.NO_ERROR, self._last_stream)
        self._flush()
        self._close_when_done()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def _close_when_done(self) -> None:
        if not self._streams and self.transport is not None and not self._closed:
            self._flush()
            self._closed = True
            self.transport.close()

    def _idle_out(self) -> None:
        self._idle = None
        if not self._streams:
            self.goaway()

    # -- streams -----------------------------------------------------------------------------

    def _request(self, event: RequestReceived) -> None:
        stream_id = event.stream_id
        self._last_stream = max(self._last_stream, stream_id)
        if self._closing:
            self._h2.reset_stream(stream_id, ErrorCodes.REFUSED_STREAM)
            return
        head = event.head
        ended = event.ended
        refusal = head.refusal
        if refusal is not None:
            self._refuse(stream_id, *refusal)
            return
        if self._counts is not None and not self._counts.admit(self.peer_address):
            # Its address holds its streams over its connections: refused before any task
            # or request is made (RFC 9113 §8.7: the client may retry it).
            self._h2.reset_stream(stream_id, ErrorCodes.REFUSED_STREAM)
            if not self._resets.cancelled():
                self.fail(ErrorCodes.ENHANCE_YOUR_CALM)
            return
        writer = StreamWriter(self, stream_id)
        self._requests += 1
        self._front.guard.http2_streams += 1
        stream = Stream(writer)
        if not ended:
            flow = BodyFlow(self._loop, lambda: self._reopen(stream))
            stream.flow, stream.body = flow, body_reader(flow)
            writer.body_unread = True
        self._streams[stream_id] = stream
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        if self._to_start or self._started >= START_PER_TURN:
            self._to_start.append((stream, head))
            if self._turn is None:
                self._turn = self._loop.call_soon(self._next_turn)
        else:
            self._start(stream, head)
        if self._requests >= self.limits.max_requests:
            self.goaway()

    def _start(self, stream: Stream, head: Head) -> None:
        self._started += 1
        stream.task = self._loop.create_task(self._serve(stream, head))

    def _next_turn(self) -> None:
        """A turn of the loop after the read: up to ``START_PER_TURN`` of the streams
        waiting start, and the rest wait for the next."""
        self._turn = None
        self._started = 0
        waiting = self._to_start
        if self._closed:  # failed (GOAWAY with an error) or lost: nothing more starts
            waiting.clear()
            return
        while waiting and self._started < START_PER_TURN:
            stream, head = waiting.popleft()
            if not stream.writer.gone:  # else reset before its turn (``_reset``)
                self._start(stream, head)
        if waiting:
            self._turn = self._loop.call_soon(self._next_turn)

    def _refuse(self, stream_id: int, status: int, text: bytes) -> None:
        """A request the handler never sees (``Head.refusal``): CONNECT, extended (WebSocket
        over HTTP/2, RFC 8441: never offered, as SETTINGS_ENABLE_CONNECT_PROTOCOL is not
        sent) or not, 501; a method the edge does not take, 400. The stream ends."""
        fields = [
            (b":status", b"%d" % status),
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"cache-control", b"no-store"),
            (b"content-length", b"%d" % len(text)),
        ]
        self._h2.send_headers(stream_id, encode_block(fields))
        if self._h2.window(stream_id) >= len(text):
            self._h2.send_data(stream_id, text, end=True)
        self._h2.reset_stream(stream_id, ErrorCodes.NO_ERROR)  # if it is still open

    async def _serve(self, stream: Stream, head: Head) -> None:
        task = stream.task  # set as the task was made, before it ran
        assert task is not None
        stream.started = True
        writer = stream.writer
        request = h2_request(
            method=head.method,
            path=head.path,
            headers=head.headers,
            raw_headers=head.raw,
            body=stream.body,
            connection=StreamProtocol(StreamTransport(writer, self.transport), self),
            writer=writer,
            task=task,
        )
        started = self._loop.time()
        response: web.StreamResponse | None = None
        try:
            try:
                response = await self._front.handler(request)
            except web.HTTPException as exc:
                response = exc
            if isinstance(response, Prewritten):  # a fast hit (Edge.handle, respond.Hit)
                response.sent(await writer.write_hit(response.parts))
            else:
                await response.prepare(request)
                await response.write_eof()
        except (StreamGone, ConnectionResetError):
            pass  # the client reset the stream or left: as a vanished HTTP/1.1 client
        except Exception as exc:
            self._failed("a stream answered 500", exc)
            if not writer.headers_sent and not writer.gone:
                response = error_page(500)
                try:
                    await response.prepare(request)
                    await response.write_eof()
                except ConnectionResetError:
                    pass
        finally:
            self._finished(stream)
        if response is not None and response.prepared and self._front.log is not None:
            self._front.log(request, response, self._loop.time() - started)

    def _finished(self, stream: Stream) -> None:
        writer = stream.writer
        if self._streams.pop(writer.stream_id, None) is stream and self._counts is not None:
            self._counts.release(self.peer_address)  # once: only the stream taken is popped
        self._give_back(stream)
        if not writer.ended and not writer.gone and not self._closed:
            self.reset(writer, ErrorCodes.INTERNAL_ERROR)  # never answered in full
        elif writer.ended and not writer.gone:
            self._resets.finished()
        if self._streams or self._closed:
            return
        if self._closing:
            self._close_when_done()
        elif self._idle is None:
            self._idle = self._loop.call_later(self.limits.idle_timeout, self._idle_out)

    def _data(self, event: DataReceived) -> None:
        stream = self._streams.get(event.stream_id)
        size = event.size
        if stream is None or stream.body is None or stream.flow is None:
            self._acknowledge(size, event.stream_id)
            return
        held = len(event.data)
        if size > held:
            self._acknowledge(size - held, event.stream_id)  # padding: never held
        if held:
            # Acknowledged once the handler reads it (_reopen): the windows bound what the
            # streams hold unread, the connection's (CONNECTION_WINDOW) all of them together.
            stream.body.feed_data(event.data)
            stream.flow.pause_reading()
            stream.unacked += held

    def _reopen(self, stream: Stream) -> None:
        """The handler read some of the stream's body: its window, and the connection's,
        reopen by that much."""
        if stream.body is None:
            return
        held = unread(stream.body)
        size = stream.unacked - held
        if size > 0 and not self._closed:
            stream.unacked = held
            self._acknowledge(size, stream.writer.stream_id)
            self.flush_soon()

    def _give_back(self, stream: Stream) -> None:
        """The stream ended or was reset: what its body holds unread will never be read,
        and the connection's window reopens by it (issue 32, hole 3: else each upload
        refused before its body was read kept up to a stream's window of the connection's,
        and after about ten, no body could arrive on it). h2 says so of DATA on a closed
        stream; the machine does it for DATA that comes after."""
        size, stream.unacked = stream.unacked, 0
        if size and not self._closed:
            self._acknowledge(size, 0)
            self.flush_soon()

    def _acknowledge(self, size: int, stream_id: int) -> None:
        self._h2.acknowledge(size, stream_id)

    def _ended(self, stream_id: int) -> None:
        stream = self._streams.get(stream_id)
        if stream is not None and stream.body is not None:
            stream.body.feed_eof()
            stream.writer.body_unread = False

    def _reset(self, stream_id: int) -> None:
        """The stream was reset: by the client (RST_STREAM), or by the server for what the
        client sent (a stream error; a stream past the concurrent limit, refused). Each
        spends the reset budget: Rapid Reset, and MadeYouReset (2025), which makes the
        server do the resets, are bounded alike, as is a client that keeps opening streams
        past the limit."""
        stream = self._streams.get(stream_id)
        if stream is not None:
            self._gone(stream)
            if not stream.started:
                # Reset before its turn came: no work was begun for it, and none will be.
                if stream.task is not None:
                    stream.task.cancel()
                self._finished(stream)
        if not self._resets.cancelled():
            self.fail(ErrorCodes.ENHANCE_YOUR_CALM)

    def _gone(self, stream: Stream) -> None:
        stream.writer.gone = True
        stream.writer.wake()
        if stream.flow is not None:
            stream.flow.open = False
        if stream.body is not None and not stream.body.is_eof():
            stream.body.set_exception(ConnectionResetError("the client reset the stream"))
        self._give_back(stream)

    def _wake(self, stream_id: int) -> None:
        if stream_id:
            stream = self._streams.get(stream_id)
            if stream is not None:
                stream.writer.wake()
            return
        for stream in self._streams.values():
            stream.writer.wake()

    # -- what stream writers call ------------------------------------------------------------

    @property
    def send_timeout(self) -> float:
        return self.limits.send_timeout

    def window(self, stream_id: int) -> int:
        try:
            return self._h2.window(stream_id)
        except StreamClosed:
            raise StreamGone("the stream is closed") from None

    def send_headers(self, stream_id: int, block: bytes) -> None:
        try:
            self._h2.send_headers(stream_id, block)
        except StreamClosed:
            raise StreamGone("the stream is closed") from None
        self.flush_soon()

    def send_answer(self, stream_id: int, block: bytes, body: bytes) -> bool:
        try:
            sent = self._h2.send_answer(stream_id, block, body)
        except StreamClosed:
            raise StreamGone("the stream is closed") from None
        if sent:
            self.flush_soon()
        return sent

    def send_data(self, stream_id: int, data: bytes, *, end: bool) -> None:
        try:
            self._h2.send_data(stream_id, data, end=end)
        except StreamClosed:
            raise StreamGone("the stream is closed") from None
        self.flush_soon()

    def ended(self, writer: StreamWriter, *, reset_body: bool) -> None:
        """The answer is whole; one given before the request's body ended stops that body
        (RST_STREAM NO_ERROR, RFC 9113 §8.1)."""
        if reset_body:
            self._h2.reset_stream(writer.stream_id, ErrorCodes.NO_ERROR)

    def reset(self, writer: StreamWriter, code: ErrorCodes) -> None:
        writer.gone = True
        if self._h2.reset_stream(writer.stream_id, code):
            self.flush_soon()

    def timed_out(self, writer: StreamWriter) -> None:
        """The answer waited send_timeout for too little: reset (CANCEL), and counted."""
        self._front.guard.send_timeouts += 1
        self.reset(writer, ErrorCodes.CANCEL)

    async def drained(self, writer: StreamWriter) -> None:
        """Return once the socket takes more (``send_timeout`` at most: then the stream is
        reset and StreamGone raised)."""
        if self._closed:
            raise StreamGone("the connection is closed")
        if not self._paused:
            return
        if self._writable is None:
            self._writable = self._loop.create_future()
        try:
            async with asyncio.timeout(self.limits.send_timeout):
                await asyncio.shield(self._writable)
        except TimeoutError:
            self.timed_out(writer)
            raise StreamGone("the client read nothing within send_timeout") from None
        if self._closed:
            raise StreamGone("the connection is closed")

    def flush_soon(self) -> None:
        """Write the frames queued, once this turn of the loop is over (a turn's frames of
        every stream go out in one write)."""
        if self._flush_soon is None:
            self._flush_soon = self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_soon = None
        data = self._h2.data_to_send()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)
