"""The server side of one HTTP/2 connection as a state machine, sans I/O (RFC 9113;
decision 0036): ``receive`` turns the client's bytes into events, the ``send_*`` calls queue
frames in ``out``, and nothing here reads a clock or a socket.

Why not h2: h2 spent about 60 µs of Python on each request and its answer (a bench of
its own, decision 0036), twice what a whole HTTP/1.1 hit costs. This machine keeps to what
a server needs: no client side, no push, no priority tree (PRIORITY is checked and
ignored, as RFC 9113 deprecates it). HPACK decoding stays the ``hpack`` library's (the
dynamic table is the client's to fill); a head whose block changes nothing in that table
means the same thing each time it comes, so each distinct one is decoded, checked and read
once per connection and reused while the table is unchanged (a browser's or h2load's
repeated requests are such blocks of indices). Answers are encoded by frames.py, without
the table.

Errors: a connection error raises ``H2Error`` (the caller sends GOAWAY with its code and
closes); a stream error resets that stream (RST_STREAM) and is reported as
``ServerReset``, so the caller can count the resets a client provokes (MadeYouReset, 2025:
WINDOW_UPDATE of 0 on a stream, DATA on a closed stream, malformed heads) as it counts
the ones it sends. A stream past SETTINGS_MAX_CONCURRENT_STREAMS is refused
(RST_STREAM REFUSED_STREAM, ``StreamRefused``), as nginx does; the connection lives on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from h2.errors import ErrorCodes
from hpack import Decoder
from hpack.exceptions import HPACKError, OversizedHeaderListError

from proxy.edge.h2.events import (
    DataReceived,
    Event,
    GoneAway,
    H2Error,
    RequestReceived,
    StreamEnded,
    StreamRefused,
    StreamReset,
    WindowOpened,
)
from proxy.edge.h2.frames import (
    ACK,
    END_HEADERS,
    END_STREAM,
    MAX_WINDOW,
    PADDED,
    PREFACE,
    PRIORITY_FLAG,
    FrameType,
    Setting,
    frame,
    settings,
    window_update,
)
from proxy.edge.h2.head import Head, content_length, malformed, read_head
from proxy.edge.h2.limits import CONNECTION_WINDOW, MAX_FRAME, STREAM_WINDOW, H2Limits
from proxy.edge.h2.streams import OpenStream, StreamTable

SKIPS_REMEMBERED = 64  # runs of stream ids a client skipped (clients skip none)
MAX_CONTINUATIONS = 64  # of one head (h2's bound, and the 2024 CONTINUATION flood's)
# An encoded block is at most this many times SETTINGS_MAX_HEADER_LIST_SIZE: a list counts
# 32 bytes a field more than its literals take, so no head within the list limit needs more.
BLOCK_FACTOR = 2
# Distinct heads kept per connection while the HPACK table is unchanged, each of a block
# and a decoded head no larger than these: 72 KiB a connection at most.
HEAD_CACHE = 16
HEAD_CACHE_BLOCK = 512
HEAD_CACHE_FIELDS = 4096
# A frame's reader: (the machine, flags, stream id, payload, the events it adds to).
_Reader = Callable[["ServerMachine", int, int, bytes, list[Event]], None]


@dataclass(slots=True)
class _Pending:
    """A head whose CONTINUATION frames are still to come."""

    stream_id: int
    ended: bool
    self_dependent: bool
    parts: list[bytes] = field(default_factory=list)
    size: int = 0  # of the parts: the encoded block so far


class ServerMachine(StreamTable):
    def __init__(self, limits: H2Limits) -> None:
        super().__init__()
        self.control = 0  # frames that asked work but no request, since the caller read it
        self._max_streams = limits.max_concurrent_streams
        self._max_list = limits.max_header_list_bytes
        self._max_block = BLOCK_FACTOR * limits.max_header_list_bytes
        self._buffer = b""
        self._preface = False
        self.highest = 0  # the highest stream the client opened
        self._decoder = Decoder()
        self._decoder.max_header_list_size = limits.max_header_list_bytes
        self._pending: _Pending | None = None
        self._heads: dict[bytes, Head | str] = {}
        self._table_changes = 0  # blocks that changed the HPACK table (_decode)
        self._skipped: list[tuple[int, int]] = []  # runs of client stream ids never opened

    def initiate(self) -> None:
        """The server's preface: its SETTINGS, and the connection's window opened."""
        self.out += settings(
            {
                Setting.MAX_CONCURRENT_STREAMS: self._max_streams,
                Setting.MAX_HEADER_LIST_SIZE: self._max_list,
                Setting.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
                Setting.MAX_FRAME_SIZE: MAX_FRAME,
            }
        )
        self.out += window_update(0, CONNECTION_WINDOW - STREAM_WINDOW)

    @property
    def open_streams(self) -> int:
        return len(self.streams)

    # -- receiving ---------------------------------------------------------------------------

    def receive(self, data: bytes) -> list[Event]:
        """The events of the frames in ``data`` (with what an earlier read left unfinished).
        A connection error raised part-way drops the events of the frames before it, on
        purpose: none reached the caller, so no request of this read was begun, and the
        GOAWAY the caller sends names the last stream it did take (RFC 9113 §6.8: the client
        may retry the others, which the edge never acted on)."""
        buffer = self._buffer + data if self._buffer else data
        pos = 0
        if not self._preface:
            # The preface, then a SETTINGS frame, not an ACK (RFC 9113 §3.4): held until the
            # first frame's type and flags are in.
            if buffer[:24] != PREFACE[: len(buffer)]:
                raise H2Error(ErrorCodes.PROTOCOL_ERROR, "no client preface")
            if len(buffer) < 29:
                self._buffer = buffer
                return []
            if buffer[27] != FrameType.SETTINGS or buffer[28] & ACK:
                raise H2Error(ErrorCodes.PROTOCOL_ERROR, "the preface's frame is not SETTINGS")
            self._preface = True
            pos = 24
        events: list[Event] = []
        size = len(buffer)
        while size - pos >= 9:
            length = int.from_bytes(buffer[pos : pos + 3], "big")
            if length > MAX_FRAME:
                raise H2Error(ErrorCodes.FRAME_SIZE_ERROR, "a frame past SETTINGS_MAX_FRAME_SIZE")
            end = pos + 9 + length
            if end > size:
                break
            kind = buffer[pos + 3]
            flags = buffer[pos + 4]
            stream_id = int.from_bytes(buffer[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
            self._frame(kind, flags, stream_id, buffer[pos + 9 : end], events)
            pos = end
        self._buffer = buffer[pos:]
        return events

    def _frame(
        self, kind: int, flags: int, stream_id: int, payload: bytes, events: list[Event]
    ) -> None:
        if self._pending is not None and kind != FrameType.CONTINUATION:
            raise H2Error(ErrorCodes.PROTOCOL_ERROR, "a frame inside a header block")
        reader = self._READERS.get(kind)
        if reader is None:
            self.control += 1  # an unknown frame type: ignored (§5.5), but not free
        else:
            reader(self, flags, stream_id, payload, events)

    # -- heads -------------------------------------------------------------------------------

    def _headers(self, flags: int, stream_id: int, payload: bytes, events: list[Event]) -> None:
        if not stream_id or not stream_id % 2:
            raise H2Error(ErrorCodes.PROTOCOL_ERROR, "HEADERS on stream 0 or an even stream")
        if flags & PADDED:
            payload = _unpad(payload)
        self_dependent = False
        if flags & PRIORITY_FLAG:
            if len(payload) < 5:
                raise H2Error(ErrorCodes.FRAME_SIZE_ERROR, "a short HEADERS priority")
            depends = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            self_dependent = depends == stream_id
            payload = payload[5:]
        ended = bool(flags & END_STREAM)
        if flags & END_HEADERS:
            self._block(stream_id, ended, self_dependent, payload, events)
        else:
            self._pending = _Pending(stream_id, ended, self_dependent, [payload], len(payload))

    def _continuation(
        self, flags: int, stream_id: int, payload: bytes, events: list[Event]
    ) -> None:
        pending = self._pending
        if pending is None or pending.stream_id != stream_id:
            raise H2Error(ErrorCodes.PROTOCOL_ERROR, "a CONTINUATION out of place")
        if len(pending.parts) > MAX_CONTINUATIONS:
            raise H2Error(ErrorCodes.ENHANCE_YOUR_CALM, "a CONTINUATION flood")
        pending.size += len(payload)
        if pending.size > self._max_block:  # refused before decoding (issue 32, hole 4)
            raise H2Error(ErrorCodes.ENHANCE_YOUR_CALM, "a header block past its cap")
        pending.parts.append(payload)
        if flags & END_HEADERS:
            self._pending = None
            block = b"".join(pending.parts)
            self._block(stream_id, pending.ended, pending.self_dependent, block, events)

    def _block(
        self, stream_id: int, ended: bool, self_dependent: bool, block: bytes, events: list[Event]
    ) -> None:
        stream = self.streams.get(stream_id)
        if stream is not None:
            self._trailers(stream_id, stream, ended, self._decode(block), events)
            return
        if stream_id <= self.highest:
            self._decode(block)  # the table must follow every block
            if stream_id in self.reset_ids:
                return  # in flight when we reset it (§5.1, closed)
            if self._skipped_over(stream_id):
                # Never opened: closed when a higher one opened, so an id out of order (§5.1.1)
                raise H2Error(ErrorCodes.PROTOCOL_ERROR, "HEADERS on a stream id skipped")
            raise H2Error(ErrorCodes.STREAM_CLOSED, "HEADERS on a closed stream")
        if stream_id - 2 > self.highest:
            self._skip(stream_id)
        self.highest = stream_id
        head = self._head(block)
        if isinstance(head, str) or self_dependent:
            self._stream_error(stream_id, ErrorCodes.PROTOCOL_ERROR, events)
            return
        if len(self.streams) >= self._max_streams:
            self._reset(stream_id, ErrorCodes.REFUSED_STREAM)
            events.append(StreamRefused(stream_id))
            return
        stream = OpenStream(STREAM_WINDOW, self.initial_send, remote_closed=ended)
        stream.length = content_length(head.raw)
        if ended and not self._framed(stream):
            self._stream_error(stream_id, ErrorCodes.PROTOCOL_ERROR, events)
            return
        self.streams[stream_id] = stream
        events.append(RequestReceived(stream_id, head, ended))

    def _skip(self, stream_id: int) -> None:
        """The client opened ``stream_id`` past ids it never opened: remember them (a method
        of its own: inline in _block, these lines cost 3% of a cached request's frame work,
        1,400 of 40,400 instructions, measured by callgrind)."""
        self._skipped.append((self.highest + 1, stream_id - 2))
        if len(self._skipped) > SKIPS_REMEMBERED:
            del self._skipped[0]

    def _idle(self, stream_id: int) -> bool:
        """Whether a stream is idle (§5.1): a client's not yet opened, or any even one (the
        server's, and it opens none: no push). One the client skipped is closed (§5.1.1):
        DATA on it is STREAM_CLOSED (§6.1), WINDOW_UPDATE and RST_STREAM are ignored."""
        return stream_id > self.highest or not stream_id % 2

    def _skipped_over(self, stream_id: int) -> bool:
        """Whether a client stream id below the highest was never opened (the last
        SKIPS_REMEMBERED runs of ids skipped are kept; older ones read as closed)."""
        return any(low <= stream_id <= high for low, high in self._skipped)

    def _head(self, block: bytes) -> Head | str:
        """The head ``block`` carries, or why it is malformed; read once per distinct block
        while the decoder's table is unchanged."""
        known = self._heads.get(block)
        if known is not None:
            return known
        changes = self._table_changes
        fields = self._decode(block)
        reason = malformed(fields)
        head: Head | str = reason if reason is not None else read_head(fields)
        if (
            changes == self._table_changes
            and len(self._heads) < HEAD_CACHE
            and len(block) <= HEAD_CACHE_BLOCK
            and sum(len(name) + len(value) for name, value in fields) <= HEAD_CACHE_FIELDS
        ):
            self._heads[block] = head
        return head

    def _decode(self, block: bytes) -> list[tuple[bytes, bytes]]:
        """The one place a header block is decoded, so the one place the HPACK table
        changes: every block, a request's, trailers or one on a stream already reset, comes
        here, and a block that changed the table empties the head cache (the same bytes
        may mean other fields now: issue 30, hole 4). A change inserts at the table's
        front (a new entry, at a new address) or evicts (a shorter table)."""
        table = self._decoder.header_table.dynamic_entries
        size, first = len(table), table[0] if table else None
        try:
            fields: list[tuple[bytes, bytes]] = self._decoder.decode(block, raw=True)  # type: ignore[assignment]
        except OversizedHeaderListError:
            raise H2Error(ErrorCodes.ENHANCE_YOUR_CALM, "a head past the list size") from None
        except (HPACKError, IndexError, TypeError, ValueError):
            raise H2Error(ErrorCodes.COMPRESSION_ERROR, "a head HPACK cannot decode") from None
        finally:
            if len(table) != size or (table[0] if table else None) is not first:
                self._heads.clear()
                self._table_changes += 1
        return fields

    def _trailers(
        self,
        stream_id: int,
        stream: OpenStream,
        ended: bool,
        fields: list[tuple[bytes, bytes]],
        events: list[Event],
    ) -> None:
        if stream.remote_closed:
            self._stream_error(stream_id, ErrorCodes.STREAM_CLOSED, events)
        elif not ended or malformed(fields, trailers=True) is not None:
            self._stream_error(stream_id, ErrorCodes.PROTOCOL_ERROR, events)
        else:
            self._remote_end(stream_id, stream, events)  # trailers are not passed on

    # -- bodies and windows ------------------------------------------------------------------

    def _data(self, flags: int, stream_id: int, payload: bytes, events: list[Event]) -> None:
        if not stream_id:
            raise H2Error(ErrorCodes.PROTOCOL_ERROR, "DATA on stream 0")
        size = len(payload)
        self.recv_window -= size
        if self.recv_window < 0:
            raise H2Error(ErrorCodes.FLOW_CONTROL_ERROR, "DATA past the connection's window")
        data = _unpad(payload) if flags & PADDED else payload
        if not size:
            self.control += 1  # empty DATA: a flood's frame
        stream = self.streams.get(stream_id)
        if stream is None or stream.remote_closed:
            self.acknowledge(size, 0)  # read by no one: the connection's window reopens
            if stream is None and self._idle(stream_id):
                raise H2Error(ErrorCodes.PROTOCOL_ERROR, "DATA on an idle stream")
            if stream is None and stream_id in self.reset_ids:
                return
            self._stream_error(stream_id, ErrorCodes.STREAM_CLOSED, events)
            return
        stream.recv_window -= size
        stream.received += len(data)
        if stream.recv_window < 0 or (
            stream.length is not None and stream.received > stream.length
        ):
            self.acknowledge(size, 0)
            code = (
                ErrorCodes.FLOW_CONTROL_ERROR
                if stream.recv_window < 0
                else ErrorCodes.PROTOCOL_ERROR
            )
            self._stream_error(stream_id, code, events)
            return
        events.append(DataReceived(stream_id, data, size))
        if flags & END_STREAM:
            self._remote_end(stream_id, stream, events)

    @staticmethod
    def _framed(stream: OpenStream) -> bool:
        """The end-of-stream hook (nghttp2's ``on_remote_end_stream``): every rule that needs
        the whole request to judge it. Called wherever a request ends, on HEADERS, DATA or
        trailers: a content-length that differs from the DATA received is malformed (RFC
        9113 §8.1.1), a HEADERS frame that ends the stream included, so a length is never
        passed on with no body behind it (issue 30, hole 1)."""
        return stream.length is None or stream.received == stream.length

    def _remote_end(self, stream_id: int, stream: OpenStream, events: list[Event]) -> None:
        if not self._framed(stream):
            self._stream_error(stream_id, ErrorCodes.PROTOCOL_ERROR, events)
            return
        stream.remote_closed = True
        events.append(StreamEnded(stream_id))
        if stream.local_closed:
            del self.streams[stream_id]

    def _window_update(
        self, flags: int, stream_id: int, payload: bytes, events: list[Event]
    ) -> None:
        if len(payload) != 4:
            raise H2Error(ErrorCodes.FRAME_SIZE_ERROR, "a WINDOW_UPDATE not of 4 bytes")
        self.control += 1
        increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
        if not stream_id:
            self.send_window += increment
            if not increment:
                raise H2Error(ErrorCodes.PROTOCOL_ERROR, "a connection WINDOW_UPDATE of 0")
            if self.send_window > MAX_WINDOW:
                raise H2Error(ErrorCodes.FLOW_CONTROL_ERROR, "the connection's window overflows")
            events.append(WindowOpened(0))
            return
        stream = self.streams.get(stream_id)
        if stream is None:
            if self._idle(stream_id):
                raise H2Error(ErrorCodes.PROTOCOL_ERROR, "WINDOW_UPDATE on an idle stream")
            return  # closed: ignored (§6.9)
        stream.send_window += increment
        if not increment:
            self._stream_error(stream_id, ErrorCodes.PROTOCOL_ERROR, events)
        elif stream.send_window > MAX_WINDOW:
            self._stream_error(stream_id, ErrorCodes.FLOW_CONTROL_ERROR, events)
        else:
            events.append(WindowOpened(stream_id))

    # -- control -----------------------------------------------------------------------------

    def _rst_stream(self, flags: int, stream_id: int, payload: bytes, events: list[Event]) -> None:
        if len(payload) != 4:
            raise H2Error(ErrorCodes.FRAME_SIZE_ERROR, "a RST_STREAM not of 4 bytes")
        if not stream_id or self._idle(stream_id):
            raise H2Error(ErrorCodes.PROTOCOL_ERROR, "RST_STREAM on stream 0 or an idle one")
        self.control += 1
        if self.streams.pop(stream_id, None) is not None:
            events.append(StreamReset(stream_id, int.from_bytes(payload, "big")))

    def _settings(self, flags: int, stream_id: int, payload: bytes, events: list[Event]) -> None:
        if stream_id:
            raise H2Error(ErrorCodes.PROTOCOL_ERROR, "SETTINGS on a stream")
        self.control += 1
        if flags & ACK:
            if payload:
                raise H2Error(ErrorCodes.FRAME_SIZE_ERROR, "a SETTINGS ACK with a payload")
            return
        if len(payload) % 6:
            raise H2Error(ErrorCodes.FRAME_SIZE_ERROR, "SETTINGS not in 6-byte entries")
        opened = False
        for at in range(0, len(payload), 6):
            key = int.from_bytes(payload[at : at + 2], "big")
            value = int.from_bytes(payload[at + 2 : at + 6], "big")
            if key == Setting.INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise H2Error(ErrorCodes.FLOW_CONTROL_ERROR, "an initial window too large")
                self._initial_window(value)
                opened = True
            elif key == Setting.HEADER_TABLE_SIZE:
                self.table_update_due = not self.table_updated
            elif key == Setting.MAX_FRAME_SIZE and not MAX_FRAME <= value < 2**24:
                raise H2Error(ErrorCodes.PROTOCOL_ERROR, "a SETTINGS_MAX_FRAME_SIZE out of range")
            elif key in (Setting.ENABLE_PUSH, Setting.ENABLE_CONNECT_PROTOCOL) and value > 1:
                raise H2Error(ErrorCodes.PROTOCOL_ERROR, "a boolean setting not 0 or 1")
        self.out += frame(FrameType.SETTINGS, ACK, 0)
        if opened:
            events.append(WindowOpened(0))

    def _initial_window(self, value: int) -> None:
        delta, self.initial_send = value - self.initial_send, value
        for stream in self.streams.values():
            stream.send_window += delta
            if stream.send_window > MAX_WINDOW:
                raise H2Error(ErrorCodes.FLOW_CONTROL_ERROR, "a stream's window too large")

    def _ping(self, flags: int, stream_id: int, payload: bytes, events: list[Event]) -> None:
        if len(payload) != 8:
            raise H2Error(ErrorCodes.FRAME_SIZE_ERROR, "a PING not of 8 bytes")
        if stream_id:
            raise H2Error(ErrorCodes.PROTOCOL_ERROR, "PING on a stream")
        self.control += 1
        if not flags & ACK:
            self.out += frame(FrameType.PING, ACK, 0, payload)

    def _priority(self, flags: int, stream_id: int, payload: bytes, events: list[Event]) -> None:
        if not stream_id:
            raise H2Error(ErrorCodes.PROTOCOL_ERROR, "PRIORITY on stream 0")
        self.control += 1
        if len(payload) != 5:  # a stream error, not the connection's (§6.3)
            self._stream_error(stream_id, ErrorCodes.FRAME_SIZE_ERROR, events)
            return
        depends = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
        if depends == stream_id:  # on any stream, an idle one included (§5.3.1)
            self._stream_error(stream_id, ErrorCodes.PROTOCOL_ERROR, events)

    def _goaway(self, flags: int, stream_id: int, payload: bytes, events: list[Event]) -> None:
        if stream_id or len(payload) < 8:
            raise H2Error(ErrorCodes.PROTOCOL_ERROR, "a malformed GOAWAY")
        last = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
        events.append(GoneAway(last, int.from_bytes(payload[4:8], "big")))

    def _push_promise(
        self, flags: int, stream_id: int, payload: bytes, events: list[Event]
    ) -> None:
        raise H2Error(ErrorCodes.PROTOCOL_ERROR, "a client sent PUSH_PROMISE")

    # Each frame type's reader, all called alike; a type not named here is unknown (§5.5).
    _READERS: ClassVar[dict[int, _Reader]] = {
        FrameType.HEADERS: _headers,
        FrameType.DATA: _data,
        FrameType.WINDOW_UPDATE: _window_update,
        FrameType.RST_STREAM: _rst_stream,
        FrameType.SETTINGS: _settings,
        FrameType.PING: _ping,
        FrameType.PRIORITY: _priority,
        FrameType.CONTINUATION: _continuation,
        FrameType.GOAWAY: _goaway,
        FrameType.PUSH_PROMISE: _push_promise,
    }

    # -- sending -----------------------------------------------------------------------------


def _unpad(payload: bytes) -> bytes:
    """A padded frame's content (§6.1): padding as long as or longer than it is an error."""
    if not payload or payload[0] >= len(payload):
        raise H2Error(ErrorCodes.PROTOCOL_ERROR, "padding past the frame")
    return payload[1 : len(payload) - payload[0]]
