"""One HTTP/2 stream's answer: aiohttp's response writes it here as it writes an HTTP/1.1
message to its own writer (``AbstractStreamWriter``, aiohttp's public interface), and it goes
out as HEADERS and DATA frames within the windows the client grants.

A write waits for window (the stream's and the connection's) and for the socket to take what
is queued. The window's wait is timed per answer, not per WINDOW_UPDATE (decision 0046):
each ``send_timeout`` spent waiting must see ``SEND_PROGRESS`` bytes of the answer sent, as
on HTTP/1.1, so a client granting a byte now and then cannot hold the stream for ever; then
the stream is reset (CANCEL) and the write fails as a write to a client that has gone does,
so the handler ends as it does for a vanished HTTP/1.1 client. A stream the client has reset
fails its writes at once.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any, Protocol

from aiohttp.abc import AbstractStreamWriter
from h2.errors import ErrorCodes
from multidict import CIMultiDict

from proxy.edge.aiohttp_server import SEND_PROGRESS
from proxy.edge.connections import ConnectionGuard
from proxy.edge.h2.frames import age_field, encode_block

# Fields that belong to an HTTP/1.1 connection, never sent on HTTP/2 (RFC 9113 §8.2.2).
CONNECTION_FIELDS = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"}
)


_FORBIDDEN = re.compile(rb"[\r\n\x00]")


class Sender(Protocol):
    """What a stream's writer asks of its connection (proxy/edge/h2/connection.py)."""

    @property
    def send_timeout(self) -> float: ...

    def window(self, stream_id: int) -> int: ...

    def send_headers(self, stream_id: int, block: bytes) -> None: ...

    def send_answer(self, stream_id: int, block: bytes, body: bytes) -> bool: ...

    def send_data(self, stream_id: int, data: bytes, *, end: bool) -> None: ...

    def ended(self, writer: StreamWriter, *, reset_body: bool) -> None: ...

    def reset(self, writer: StreamWriter, code: ErrorCodes) -> None: ...

    def timed_out(self, writer: StreamWriter) -> None: ...

    async def drained(self, writer: StreamWriter) -> None: ...


class StreamGone(ConnectionResetError):
    """The stream was reset (by the client, or by the edge after ``send_timeout``)."""


class StreamWriter(AbstractStreamWriter):
    """The writer of one stream's answer; ``buffer_size`` counts the body bytes sent (an
    access log's ``%b``)."""

    def __init__(self, connection: Sender, stream_id: int) -> None:
        self._connection = connection
        self.stream_id = stream_id
        self.headers_sent = False
        self.ended = False
        self.gone = False
        self.body_unread = False  # the request's body has not ended: reset once answered
        self._window: asyncio.Future[None] | None = None
        # The send timeout's window: the seconds waited in it, and output_size at its start.
        self._waited = 0.0
        self._pace_from = 0

    async def write_headers(self, status_line: str, headers: CIMultiDict[str]) -> None:
        if self.gone:
            raise StreamGone("the stream was reset")
        fields = [(b":status", status_line.split(" ", 2)[1].encode()), *_h2_fields(headers.items())]
        self.headers_sent = True
        self._connection.send_headers(self.stream_id, encode_block(fields))
        await self._connection.drained(self)

    async def write_hit(self, parts: tuple[bytes, ...]) -> int:
        """A fresh hit's precomputed parts (``respond.Hit``: the HTTP/1.1 status and field
        lines, the Age line, the body) sent as HEADERS and DATA, with no aiohttp response
        built; the body's size is returned."""
        if self.gone:
            raise StreamGone("the stream was reset")
        block = hit_block(parts[:-2]) + age_field(parts[-2][5:-4])
        self.headers_sent = True
        body = parts[-1]
        if self._connection.send_answer(self.stream_id, block, body):  # in one go
            self.buffer_size = self.output_size = len(body)
            self.ended = True
            self._connection.ended(self, reset_body=self.body_unread)
            return len(body)
        self._connection.send_headers(self.stream_id, block)
        await self._send(body, end=True)
        return len(body)

    def informational(self, status: int, fields: Iterable[tuple[str, str]] = ()) -> None:
        """An interim answer (100 Continue, a relayed 103 Early Hints: proxy/edge/interim.py):
        HEADERS without END_STREAM, before the final one (RFC 9113 §8.1), with ``fields`` as
        ``write_headers`` sends a final answer's."""
        if not self.headers_sent and not self.gone:
            block = [(b":status", b"%d" % status), *_h2_fields(fields)]
            self._connection.send_headers(self.stream_id, encode_block(block))

    async def write(self, chunk: bytes | bytearray | memoryview) -> None:
        await self._send(chunk, end=False)

    async def write_eof(self, chunk: bytes = b"") -> None:
        if self.ended:
            return
        if self.gone:
            raise StreamGone("the stream was reset")
        # The last DATA frame carries END_STREAM (a small answer: one frame in all).
        await self._send(chunk, end=True)

    async def _send(self, chunk: bytes | bytearray | memoryview, *, end: bool) -> None:
        view = memoryview(chunk)
        connection = self._connection
        while view or end:
            size = await self._room(len(view)) if view else 0
            last = end and size == len(view)
            connection.send_data(self.stream_id, view[:size].tobytes(), end=last)
            self.buffer_size += size
            self.output_size += size
            view = view[size:]
            if last:
                self.ended = True
                connection.ended(self, reset_body=self.body_unread)
                return
            await connection.drained(self)

    async def drain(self) -> None:
        await self._connection.drained(self)

    def enable_compression(self, encoding: str = "deflate", strategy: int | None = None) -> None:
        raise RuntimeError("the edge does not compress HTTP/2 answers on the fly")

    def enable_chunking(self) -> None:
        """HTTP/2 frames the body itself (and Transfer-Encoding is dropped)."""

    async def _room(self, wanted: int) -> int:
        """How much of ``wanted`` may be sent now: waits for the client's window."""
        connection = self._connection
        while True:
            if self.gone:
                raise StreamGone("the stream was reset")
            room = connection.window(self.stream_id)
            if room > 0:
                return min(room, wanted)
            if self.output_size - self._pace_from >= SEND_PROGRESS:
                self._waited, self._pace_from = 0.0, self.output_size  # a new window
            loop = asyncio.get_running_loop()
            self._window = loop.create_future()
            started = loop.time()
            try:
                async with asyncio.timeout(connection.send_timeout - self._waited):
                    await self._window
            except TimeoutError:
                connection.timed_out(self)
                raise StreamGone("the client opened too little window in send_timeout") from None
            finally:
                self._window = None
                self._waited += loop.time() - started

    def abort(self) -> None:
        """End this stream only, unfinished (RST_STREAM INTERNAL_ERROR): what aborting the
        transport does to an HTTP/1.1 answer the origin broke off (forward.py)."""
        if not self.gone and not self.ended:
            self._connection.reset(self, ErrorCodes.INTERNAL_ERROR)

    def wake(self) -> None:
        """The window may have opened, or the stream is gone."""
        if self._window is not None and not self._window.done():
            self._window.set_result(None)


def _h2_fields(fields: Iterable[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    """Fields as HTTP/2 sends them: lower-case names, no connection fields, no CR, LF or NUL
    (RFC 9113 §8.2), as h2 is not asked to check; values as aiohttp writes them for HTTP/1.1
    (UTF-8)."""
    out = []
    for name, value in fields:
        lower = name.lower()
        if lower in CONNECTION_FIELDS:
            continue
        encoded = value.encode()
        if _FORBIDDEN.search(encoded) or _FORBIDDEN.search(lower.encode()):
            raise ValueError(f"the field {name!r} cannot be sent: CR, LF or NUL in it")
        out.append((lower.encode(), encoded))
    return out


class StreamTransport(asyncio.Transport):
    """An HTTP/2 stream's request's ``transport``: the connection's for what the edge reads
    of it (TLS, SNI, the peer), but closing or aborting it ends only this stream
    (``StreamWriter.abort``), where the connection's own would end every stream on it."""

    def __init__(self, writer: StreamWriter, transport: asyncio.BaseTransport | None) -> None:
        super().__init__()
        self._writer = writer
        self._transport = transport

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if self._transport is None:
            return default
        return self._transport.get_extra_info(name, default)

    def is_closing(self) -> bool:
        transport = self._transport
        return self._writer.gone or transport is None or transport.is_closing()

    def abort(self) -> None:
        self._writer.abort()

    def close(self) -> None:
        self._writer.abort()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        raise RuntimeError("an HTTP/2 answer is written through its stream's writer")


class StreamProtocol:
    """What a stream's request reads of its connection (aiohttp_h2.h2_request)."""

    __slots__ = (
        "connection",
        "guard",
        "peer_address",
        "peername",
        "sockname",
        "ssl_context",
        "transport",
    )

    def __init__(self, transport: StreamTransport, of: Connection) -> None:
        self.transport = transport
        self.connection = of  # what its answers are charged to (edge/answer_budget.py)
        self.peer_address = of.peer_address  # and its client's address
        self.guard = of.guard  # the listener's: its request bodies' budget (edge/bodies.py)
        self.ssl_context = of.ssl_context
        self.peername = of.peername
        self.sockname = of.sockname


class Connection(Protocol):
    guard: ConnectionGuard
    peer_address: str | None
    ssl_context: object | None
    peername: object | None
    sockname: object | None


@lru_cache(maxsize=1024)
def hit_fields(lines: tuple[bytes, ...]) -> tuple[tuple[bytes, bytes], ...]:
    """A fresh hit's HTTP/1.1 lines (``respond.hit_lines``: a status line, then field lines,
    a part may hold several) as HTTP/2 fields: ``:status``, lower-case names, no connection
    fields (RFC 9113 §8.2.2). Entries share their lines, so the few distinct heads are read
    once. The lines were written by ``write_lines``, which refuses CR, LF and NUL in fields."""
    fields = [(b":status", lines[0][9:12])]
    for line in b"".join(lines[1:]).split(b"\r\n"):
        if not line:
            continue
        name, _, value = line.partition(b": ")
        lower = name.lower()
        if lower.decode("latin-1") not in CONNECTION_FIELDS:
            fields.append((lower, value))
    return tuple(fields)


@lru_cache(maxsize=1024)
def hit_block(lines: tuple[bytes, ...]) -> bytes:
    """A fresh hit's fields (``hit_fields``) as one HPACK block (frames.py: no dynamic
    table, so the block is the same on every connection); Age is appended per answer."""
    return encode_block(hit_fields(lines))
