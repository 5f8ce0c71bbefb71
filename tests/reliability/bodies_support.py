"""An origin that records the raw bytes it received, and raw clients, for the body tests.

The origin is aiohttp's low-level server with ``auto_decompress=False``: it sees a request
body as it arrived on the wire (chunked framing removed, nothing else), so a test can compare
it byte for byte with what the client sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

HOST = "example.com"


@dataclass
class Received:
    """One request as the origin saw it."""

    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes
    complete: bool  # False: the connection broke before the body ended

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)


Responder = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]


@dataclass
class RawOrigin:
    url: str = ""
    received: list[Received] = field(default_factory=list)
    arrived: int = 0  # requests whose head arrived (their body may still be coming)
    routes: dict[str, Responder] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        self.arrived += 1
        self.changed.set()
        try:
            body, complete = await request.read(), True
        except (aiohttp.ClientError, ConnectionError, asyncio.CancelledError):
            body, complete = b"", False
        self.received.append(
            Received(
                request.method, request.raw_path, list(request.headers.items()), body, complete
            )
        )
        self.changed.set()
        if not complete:
            return web.Response(status=400)  # nobody reads it: the edge has gone
        responder = self.routes.get(request.raw_path)
        if responder is not None:
            return await responder(request)
        return web.Response(
            body=b"ok " + request.raw_path.encode(), headers={"Cache-Control": "no-store"}
        )

    async def until(self, condition: Callable[[], bool], seconds: float = 5.0) -> None:
        """Wait for the origin's records to meet ``condition`` (woken by each change)."""
        async with asyncio.timeout(seconds):
            while not condition():
                self.changed.clear()
                await self.changed.wait()


@asynccontextmanager
async def raw_origin() -> AsyncIterator[RawOrigin]:
    origin = RawOrigin()
    server = web.Server(origin.handle, auto_decompress=False, handler_cancellation=False)
    runner = web.ServerRunner(server, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    origin.url = f"http://{host}:{port}"
    try:
        yield origin
    finally:
        await runner.cleanup()


@dataclass
class RawConnection:
    """A client connection that writes exactly the bytes a test gives it."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def answer(self, seconds: float = 5.0) -> tuple[int, dict[str, str], bytes]:
        """The response's status, headers and body (framed by Content-Length)."""
        async with asyncio.timeout(seconds):
            head = await self.reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split()[1])
            headers = {}
            for line in lines[1:]:
                if line:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
            body = await self.reader.readexactly(int(headers.get("content-length", "0")))
            return status, headers, body

    async def closed(self, seconds: float = 5.0) -> bool:
        """Whether the edge closes the connection (reads to EOF) within ``seconds``."""
        async with asyncio.timeout(seconds):
            while await self.reader.read(65536):
                pass
        return True

    def close(self) -> None:
        self.writer.close()


async def connect(edge_url: str) -> RawConnection:
    host, _, port = edge_url.removeprefix("http://").rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    return RawConnection(reader, writer)


def request_head(
    method: str, target: str, headers: dict[str, str] | None = None, *, length: int | None = None
) -> bytes:
    """A request head for example.com; Content-Length when ``length`` is given."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {HOST}"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def chunked(body: bytes, size: int = 1000) -> bytes:
    """``body`` in chunked transfer coding, ``size`` bytes a chunk."""
    parts = [
        b"%x\r\n%s\r\n" % (len(body[i : i + size]), body[i : i + size])
        for i in range(0, len(body), size)
    ]
    return b"".join(parts) + b"0\r\n\r\n"


async def metric(api_url: str, name: str) -> float:
    """The sum of every sample of a metric on /metrics (0 when it has none)."""
    async with aiohttp.ClientSession() as client, client.get(api_url + "/metrics") as response:
        text = await response.text()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total
