"""A scripted HTTP/2 client on the h2 library, for tests that talk to the edge as a browser
would, and as an attacker would: it sends what it is told, frame by frame, and reads back
every event the server sends (responses, resets, GOAWAY)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from dataclasses import dataclass, field

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.events import (
    ConnectionTerminated,
    DataReceived,
    Event,
    ResponseReceived,
    StreamEnded,
    StreamReset,
)
from h2.exceptions import ProtocolError
from hpack import Encoder
from hyperframe.frame import HeadersFrame


@dataclass
class Answer:
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    ended: bool = False
    reset: int | None = None  # the RST_STREAM error code


class RawH2:
    """One HTTP/2 connection to ``host:port`` (TLS with ``context``, or h2c)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.h2 = H2Connection(H2Configuration(client_side=True, header_encoding="utf-8"))
        self.answers: dict[int, Answer] = {}
        self.goaway: ConnectionTerminated | None = None
        self._pending = b""
        self.closed = False

    @classmethod
    async def open(
        cls,
        url: str,
        context: ssl.SSLContext | None = None,
        sni: str = "example.com",
        *,
        local_host: str | None = None,
    ) -> RawH2:
        """Connect (from ``local_host``, another loopback address, when given)."""
        host, _, port = url.split("://", 1)[1].rpartition(":")
        if context is not None:
            context.set_alpn_protocols(["h2"])
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(
                host,
                int(port),
                ssl=context,
                server_hostname=sni if context else None,
                local_addr=(local_host, 0) if local_host is not None else None,
            ),
            5,
        )
        if context is not None:
            alpn = writer.get_extra_info("ssl_object").selected_alpn_protocol()
            assert alpn == "h2", alpn
        client = cls(reader, writer)
        client.h2.initiate_connection()
        client.flush()
        return client

    def flush(self) -> None:
        data = self.h2.data_to_send()
        if data and not self.writer.is_closing():
            self.writer.write(data)

    def send_raw(self, data: bytes) -> None:
        self.writer.write(data)

    def request(
        self,
        path: str,
        *,
        method: str = "GET",
        authority: str = "example.com",
        headers: list[tuple[str, str]] | None = None,
        body: bytes | None = None,
        end: bool = True,
    ) -> int:
        stream_id = self.h2.get_next_available_stream_id()
        fields = [
            (":method", method),
            (":path", path),
            (":scheme", "https"),
            (":authority", authority),
            *(headers or []),
        ]
        self.h2.send_headers(stream_id, fields, end_stream=end and body is None)
        if body is not None:
            self.h2.send_data(stream_id, body, end_stream=end)
        self.answers[stream_id] = Answer()
        self.flush()
        return stream_id

    async def send_body(self, stream_id: int, body: bytes, wait: float = 5.0) -> None:
        """Send ``body`` on ``stream_id`` and end it, as the server's windows allow."""
        async with asyncio.timeout(wait):
            while body:
                room = min(self.h2.local_flow_control_window(stream_id), 16_384, len(body))
                if room <= 0:
                    await self.read_events(wait)
                    continue
                self.h2.send_data(stream_id, body[:room])
                self.flush()
                body = body[room:]
            self.h2.end_stream(stream_id)
            self.flush()

    async def read_events(self, wait: float = 5.0) -> list[Event]:
        """The events of the next bytes the server sends; [] once it has closed."""
        data = await asyncio.wait_for(self.reader.read(65536), wait)
        if not data:
            self.closed = True
            return []
        try:
            events = self.h2.receive_data(self._without_goaway(data))
        except ProtocolError:
            self.closed = True
            return []
        for event in events:
            self._note(event)
        self.flush()
        return events

    def _without_goaway(self, data: bytes) -> bytes:
        """The frames of ``data`` (and those held back), but GOAWAY, which is noted here: h2
        as a client refuses every frame after a GOAWAY, though a server may go on answering
        the streams it names (RFC 9113 §6.8)."""
        buffer = self._pending + data
        kept = b""
        while len(buffer) >= 9:
            length = int.from_bytes(buffer[:3], "big")
            if len(buffer) < 9 + length:
                break
            frame, buffer = buffer[: 9 + length], buffer[9 + length :]
            if frame[3] == 0x7:  # GOAWAY
                last = int.from_bytes(frame[9:13], "big") & 0x7FFFFFFF
                code = int.from_bytes(frame[13:17], "big")
                self.goaway = ConnectionTerminated()
                self.goaway.last_stream_id = last
                self.goaway.error_code = ErrorCodes(code)
            else:
                kept += frame
        self._pending = buffer
        return kept

    def _note(self, event: Event) -> None:
        stream_id = getattr(event, "stream_id", None)
        answer = self.answers.setdefault(stream_id, Answer()) if stream_id else None
        if isinstance(event, ResponseReceived) and answer is not None:
            fields = {_text(k): _text(v) for k, v in event.headers or []}
            answer.status = int(fields.pop(":status"))
            answer.headers = fields
        elif isinstance(event, DataReceived) and answer is not None:
            answer.body += event.data or b""
            self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, StreamEnded) and answer is not None:
            answer.ended = True
        elif isinstance(event, StreamReset) and answer is not None:
            answer.reset = int(event.error_code) if event.error_code is not None else None
        elif isinstance(event, ConnectionTerminated):
            self.goaway = event

    async def answer(self, stream_id: int, wait: float = 5.0) -> Answer:
        """The whole answer on ``stream_id`` (ended or reset)."""
        async with asyncio.timeout(wait):
            while True:
                answer = self.answers[stream_id]
                if answer.ended or answer.reset is not None:
                    return answer
                if self.closed or not await self.read_events(wait):
                    return answer

    async def until_closed(self, wait: float = 5.0) -> None:
        """Read until the server closes the connection (GOAWAY noted on the way)."""
        async with asyncio.timeout(wait):
            while not self.closed:
                await self.read_events(wait)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await self.writer.wait_closed()


class FrameReader:
    """The server's frames as they come, read raw (h2 as a client would refuse a RST_STREAM
    on a stream it did not open itself)."""

    def __init__(self, client: RawH2) -> None:
        self._reader = client.reader
        self._buffer = b""

    async def next(self, not_of: tuple[int, ...] = ()) -> tuple[int, int, bytes]:
        while True:
            while len(self._buffer) < 9 or len(self._buffer) < 9 + int.from_bytes(
                self._buffer[:3], "big"
            ):
                data = await asyncio.wait_for(self._reader.read(65536), 5)
                assert data, "the server closed the connection"
                self._buffer += data
            length = int.from_bytes(self._buffer[:3], "big")
            kind = self._buffer[3]
            stream_id = int.from_bytes(self._buffer[5:9], "big")
            payload, self._buffer = self._buffer[9 : 9 + length], self._buffer[9 + length :]
            if kind not in not_of:
                return kind, stream_id, payload


def _text(value: str | bytes) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


def headers_block(
    encoder: Encoder, path: str = "/", *, authority: str = "example.com", extra: int = 0
) -> bytes:
    """An HPACK block for GET ``path`` (with ``extra`` bytes of one more field)."""
    fields = [(":method", "GET"), (":path", path), (":scheme", "https"), (":authority", authority)]
    if extra:
        fields.append(("x-pad", "a" * extra))
    return bytes(encoder.encode(fields))


def headers_frame(stream_id: int, block: bytes, *, end: bool = True, whole: bool = True) -> bytes:
    """A raw HEADERS frame: ``end`` sets END_STREAM, ``whole`` END_HEADERS."""
    flags = {"END_STREAM"} if end else set()
    if whole:
        flags.add("END_HEADERS")
    return bytes(HeadersFrame(stream_id, data=block, flags=flags).serialize())
