"""What the attack tests share: raw HTTP/1.1 exchanges over sockets, and a raw origin server
that records every byte and every connection it is sent.

Raw sockets are needed where aiohttp's client would refuse to send the attack (duplicate
Host, Content-Length beside Transfer-Encoding, bare LF, control characters) or would hide
what happened on the wire (which connection an origin request came on, whether the
connection was closed).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

# Every wait below is a bound on a failure, never a synchronisation: a passing test returns
# as soon as the peer closes or answers.
FAILURE_BOUND = 5.0

CACHEABLE = "max-age=60"


@dataclass(frozen=True)
class RawResponse:
    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None


@dataclass(frozen=True)
class RawAnswer:
    """Everything the server sent back on one connection, and whether it then closed it."""

    data: bytes
    closed: bool

    @property
    def responses(self) -> list[RawResponse]:
        return parse_responses(self.data)

    @property
    def statuses(self) -> list[int]:
        return [response.status for response in self.responses]


def parse_responses(data: bytes) -> list[RawResponse]:
    """Split a byte stream into HTTP/1.1 responses framed by Content-Length (all the edge and
    aiohttp's own error answers use it). A stream that does not parse is a test failure."""
    responses: list[RawResponse] = []
    rest = data
    while rest:
        head, separator, rest = rest.partition(b"\r\n\r\n")
        assert separator, f"incomplete response head: {head!r}"
        status_line, *lines = head.decode("latin-1").split("\r\n")
        version, status, *_ = status_line.split(" ", 2)
        assert version in ("HTTP/1.0", "HTTP/1.1"), status_line
        headers = [(n.strip(), v.strip()) for n, _, v in (line.partition(":") for line in lines)]
        lengths = [int(v) for n, v in headers if n.lower() == "content-length"]
        length = lengths[0] if lengths else 0
        assert len(rest) >= length, "truncated response body"
        responses.append(RawResponse(int(status), headers, rest[:length]))
        rest = rest[length:]
    return responses


def split_url(url: str) -> tuple[str, int]:
    host, _, port = url.removeprefix("http://").rpartition(":")
    return host, int(port)


async def exchange(
    url: str,
    data: bytes,
    *,
    then: Callable[[asyncio.StreamWriter], Awaitable[None]] | None = None,
    keep_open: bool = False,
) -> RawAnswer:
    """Send ``data`` on a new connection and read until the server closes it.

    With ``keep_open`` the answer is read only until one complete response has arrived, for
    exchanges where the server rightly keeps the connection."""
    host, port = split_url(url)
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(data)
        await writer.drain()
        if then is not None:
            await then(writer)
        if keep_open:
            return RawAnswer(await _one_response(reader), closed=False)
        received = bytearray()
        try:
            async with asyncio.timeout(FAILURE_BOUND):
                while chunk := await reader.read(65536):
                    received += chunk
        except TimeoutError:
            return RawAnswer(bytes(received), closed=False)
        except ConnectionResetError:
            pass  # closed with unread data on the server's side: closed all the same
        return RawAnswer(bytes(received), closed=True)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def _one_response(reader: asyncio.StreamReader) -> bytes:
    async with asyncio.timeout(FAILURE_BOUND):
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return head + await reader.readexactly(length)


# -- a raw origin --------------------------------------------------------------------------


@dataclass
class OriginRequest:
    """One request as it arrived at the raw origin, byte for byte."""

    connection: int
    head: bytes
    body: bytes
    complete: bool  # the body ended as its framing said; False if the connection dropped

    @property
    def target(self) -> str:
        return self.head.split(b" ", 2)[1].decode("latin-1")

    def header(self, name: str) -> list[str]:
        found = []
        for line in self.head.split(b"\r\n")[1:]:
            key, _, value = line.decode("latin-1").partition(":")
            if key.strip().lower() == name.lower():
                found.append(value.strip())
        return found


Responder = Callable[[OriginRequest], bytes | None]


def ok(body: bytes, cache_control: str = CACHEABLE, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nCache-Control: %s\r\n%s\r\n%s" % (
        len(body),
        cache_control.encode(),
        extra,
        body,
    )


@dataclass
class RawOrigin:
    """An origin that parses requests itself (Content-Length or chunked), records them with
    the connection they came on, and answers each with the bytes ``respond`` returns
    (None: no answer). Writers stay reachable so a test can send unsolicited bytes."""

    respond: Responder
    url: str = ""
    requests: list[OriginRequest] = field(default_factory=list)
    received: list[bytearray] = field(default_factory=list)
    closed: set[int] = field(default_factory=set)
    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    _server: asyncio.Server | None = None

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        for writer in self.writers:
            writer.close()
        # Wait until each socket is closed, so none is left for the event loop's end (an
        # unclosed transport there fails the next test that collects garbage).
        for writer in self.writers:
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    @property
    def connections(self) -> int:
        return len(self.received)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        number = len(self.received)
        self.received.append(bytearray())
        self.writers.append(writer)
        try:
            while True:
                request = await self._read_request(number, reader)
                if request is None:
                    break
                answer = self.respond(request)
                if answer is not None:
                    writer.write(answer)
                    await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            self.closed.add(number)
            writer.close()

    async def _read(self, number: int, reader: asyncio.StreamReader, size: int) -> bytes:
        try:
            data = await reader.readexactly(size)
        except asyncio.IncompleteReadError as exc:
            self.received[number] += exc.partial
            raise
        self.received[number] += data
        return data

    async def _line(self, number: int, reader: asyncio.StreamReader) -> bytes:
        data = await reader.readuntil(b"\r\n")
        self.received[number] += data
        return data

    async def _read_request(
        self, number: int, reader: asyncio.StreamReader
    ) -> OriginRequest | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            self.received[number] += exc.partial
            return None
        self.received[number] += head
        request = OriginRequest(number, head[:-4], b"", complete=False)
        self.requests.append(request)
        body = bytearray()
        lengths = request.header("content-length")
        if request.header("transfer-encoding"):
            while True:
                size = int((await self._line(number, reader)).split(b";")[0], 16)
                if size == 0:
                    while await self._line(number, reader) != b"\r\n":
                        pass
                    break
                body += (await self._read(number, reader, size + 2))[:-2]
                request.body = bytes(body)
        elif lengths:
            try:
                body += await self._read(number, reader, int(lengths[0]))
            except asyncio.IncompleteReadError as exc:
                request.body = exc.partial
                raise
        request.body = bytes(body)
        request.complete = True
        return request
