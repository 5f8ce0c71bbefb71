"""The streams of one HTTP/2 connection, and what the server sends on them (RFC 9113 §5.1,
§6.9; decision 0036): HEADERS and DATA within the client's windows, RST_STREAM, GOAWAY and
the windows it reopens. machine.py's ``ServerMachine`` adds the receiving side."""

from __future__ import annotations

from dataclasses import dataclass

from h2.errors import ErrorCodes

from proxy.edge.h2.events import Event, ServerReset, StreamClosed
from proxy.edge.h2.frames import (
    END_HEADERS,
    END_STREAM,
    TABLE_SIZE_ZERO,
    FrameType,
    frame,
    goaway,
    rst_stream,
    window_update,
)
from proxy.edge.h2.limits import CONNECTION_WINDOW, MAX_FRAME, STREAM_WINDOW

RESETS_REMEMBERED = 1024  # streams we reset: frames still in flight on them are ignored


@dataclass(slots=True)
class OpenStream:
    recv_window: int
    send_window: int
    remote_closed: bool = False
    local_closed: bool = False
    length: int | None = None  # Content-Length, checked against the DATA (§8.1.1)
    received: int = 0
    read: int = 0  # read since the last WINDOW_UPDATE


class StreamTable:
    """The open streams (open or half-closed: what SETTINGS_MAX_CONCURRENT_STREAMS counts)
    and the connection's windows, both ways."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.streams: dict[int, OpenStream] = {}
        self.recv_window = CONNECTION_WINDOW
        self.send_window = STREAM_WINDOW
        self.initial_send = STREAM_WINDOW
        self.reset_ids: dict[int, None] = {}
        self.read = 0  # DATA bytes read since the connection's last WINDOW_UPDATE
        self.table_update_due = False
        self.table_updated = False

    def data_to_send(self) -> bytes:
        data = bytes(self.out)
        self.out.clear()
        return data

    def window(self, stream_id: int) -> int:
        """How many DATA bytes the stream may send now (one frame at most)."""
        stream = self.streams.get(stream_id)
        if stream is None or stream.local_closed:
            raise StreamClosed(stream_id)
        return min(stream.send_window, self.send_window, MAX_FRAME)

    def send_headers(self, stream_id: int, block: bytes, *, end: bool = False) -> None:
        stream = self.streams.get(stream_id)
        if stream is None or stream.local_closed:
            raise StreamClosed(stream_id)
        if self.table_update_due:
            block = TABLE_SIZE_ZERO + block
            self.table_update_due, self.table_updated = False, True
        flags = END_STREAM if end else 0
        if len(block) <= MAX_FRAME:
            self.out += frame(FrameType.HEADERS, flags | END_HEADERS, stream_id, block)
        else:
            self.out += frame(FrameType.HEADERS, flags, stream_id, block[:MAX_FRAME])
            for at in range(MAX_FRAME, len(block), MAX_FRAME):
                last = END_HEADERS if at + MAX_FRAME >= len(block) else 0
                self.out += frame(
                    FrameType.CONTINUATION, last, stream_id, block[at : at + MAX_FRAME]
                )
        if end:
            self._local_end(stream_id, stream)

    def send_data(self, stream_id: int, data: bytes, *, end: bool) -> None:
        """DATA within the windows (``window``); ``end`` ends the stream."""
        stream = self.streams.get(stream_id)
        if stream is None or stream.local_closed:
            raise StreamClosed(stream_id)
        size = len(data)
        if size > stream.send_window or size > self.send_window:
            raise ValueError("DATA past the client's window")
        stream.send_window -= size
        self.send_window -= size
        self.out += frame(FrameType.DATA, END_STREAM if end else 0, stream_id, data)
        if end:
            self._local_end(stream_id, stream)

    def send_answer(self, stream_id: int, block: bytes, body: bytes) -> bool:
        """A whole answer, HEADERS and one DATA frame ending the stream, if the windows
        take the body now (a small hit's usual case); False, and nothing sent, if not."""
        stream = self.streams.get(stream_id)
        if stream is None or stream.local_closed:
            raise StreamClosed(stream_id)
        size = len(body)
        if size > stream.send_window or size > self.send_window:
            return False
        if size > MAX_FRAME or len(block) >= MAX_FRAME:
            return False
        if self.table_update_due:
            block = TABLE_SIZE_ZERO + block
            self.table_update_due, self.table_updated = False, True
        stream.send_window -= size
        self.send_window -= size
        self.out += frame(FrameType.HEADERS, END_HEADERS, stream_id, block)
        self.out += frame(FrameType.DATA, END_STREAM, stream_id, body)
        self._local_end(stream_id, stream)
        return True

    def _local_end(self, stream_id: int, stream: OpenStream) -> None:
        stream.local_closed = True
        if stream.remote_closed:
            del self.streams[stream_id]

    def reset_stream(self, stream_id: int, code: ErrorCodes) -> bool:
        """RST_STREAM, if the stream is still open; whether it was."""
        if self.streams.pop(stream_id, None) is None:
            return False
        self._reset(stream_id, code)
        return True

    def acknowledge(self, size: int, stream_id: int) -> None:
        """``size`` bytes of DATA were read: the client may send that much more, on the
        connection and (``stream_id``, if it still receives) the stream. Given back once
        half a window has been read, as h2 did: a WINDOW_UPDATE per DATA frame would answer
        a client's tiny frames frame for frame. The client cannot stall on what is held
        back: while less than half its window is read and unacknowledged, it has the other
        half to send."""
        if not size:
            return
        self.read += size
        if self.read >= CONNECTION_WINDOW // 2:
            self.recv_window += self.read
            self.out += window_update(0, self.read)
            self.read = 0
        stream = self.streams.get(stream_id) if stream_id else None
        if stream is not None and not stream.remote_closed:
            stream.read += size
            if stream.read >= STREAM_WINDOW // 2:
                stream.recv_window += stream.read
                self.out += window_update(stream_id, stream.read)
                stream.read = 0

    def goaway(self, code: ErrorCodes, last_stream: int) -> None:
        self.out += goaway(last_stream, code)

    def _stream_error(self, stream_id: int, code: ErrorCodes, events: list[Event]) -> None:
        self.streams.pop(stream_id, None)
        self._reset(stream_id, code)
        events.append(ServerReset(stream_id, code))

    def _reset(self, stream_id: int, code: ErrorCodes) -> None:
        self.out += rst_stream(stream_id, code)
        self.reset_ids[stream_id] = None
        if len(self.reset_ids) > RESETS_REMEMBERED:
            del self.reset_ids[next(iter(self.reset_ids))]
