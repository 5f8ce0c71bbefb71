"""Real parts for the upgrade tests (test_upgrade.py): the edge on a guarded listener as
``cdn-proxy serve`` runs it, a WebSocket origin handler, and a raw origin that answers 101 to
a made-up protocol and then echoes bytes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web

from proxy.edge.connections import ConnectionGuard
from proxy.edge.handler import Edge
from proxy.observe.telemetry import Telemetry
from proxy.process.listeners import Draining, ProcessContext, edge_listening
from proxy.store.memory import MemoryStore
from tests.conftest import make_config

HOST = "example.com"


@dataclass
class RunningEdge:
    edge: Edge
    url: str
    guard: ConnectionGuard
    telemetry: Telemetry
    draining: Draining

    @property
    def address(self) -> tuple[str, int]:
        host, _, port = self.url.removeprefix("http://").rpartition(":")
        return host, int(port)

    async def metric(self, name: str) -> float:
        for line in (await self.telemetry.exposition()).decode().splitlines():
            if line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"{name} is not in /metrics")


@asynccontextmanager
async def running_edge(tmp_path: Path, origin_url: str, **edge: Any) -> AsyncIterator[RunningEdge]:
    """The edge for example.com on ``origin_url``, listening as in ``cdn-proxy serve``
    (guarded connections, a drain), with ``edge`` keys added to its [edge] table. Its
    upgrade allowlist has the raw origin's "echo" beside "websocket" unless ``edge`` says."""
    edge = {"upgrade_protocols": ["websocket", "echo"], **edge}
    config = make_config(
        tmp_path, origin_url, edge={"listen": "127.0.0.1:0", "shutdown_timeout": 5, **edge}
    )
    store = MemoryStore(max_bytes=config.edge_role()[1].max_bytes)
    telemetry = Telemetry(store=store, domains=[d.name for d in config.domains])
    draining = Draining(config.edge_role()[0].shutdown_timeout)
    process = ProcessContext(config, telemetry, draining=draining)
    async with edge_listening(process, store=store) as (running, url):
        guard = telemetry.connections[0]
        assert isinstance(guard, ConnectionGuard)  # telemetry reads it as ListenerFigures
        yield RunningEdge(running, url, guard, telemetry, draining)


async def websocket_echo(request: web.Request) -> web.StreamResponse:
    """A WebSocket origin: greets, then echoes text and binary messages; "close" makes it
    close with code 4000."""
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    await ws.send_str("welcome")
    async for message in ws:
        if message.type == WSMsgType.TEXT and message.data == "close":
            await ws.close(code=4000, message=b"origin says bye")
        elif message.type == WSMsgType.TEXT:
            await ws.send_str(message.data)
        elif message.type == WSMsgType.BINARY:
            await ws.send_bytes(message.data)
    request.app.setdefault("closed", []).append(ws.close_code)
    return ws


@dataclass
class RawOrigin:
    """An asyncio origin for a protocol aiohttp does not know ("echo/1"): it answers 101,
    then sends back every byte it gets; /refuse gets a 403 with a body instead."""

    url: str = ""
    heads: list[bytes] = field(default_factory=list)
    ended: asyncio.Event = field(default_factory=asyncio.Event)  # a tunnel's connection closed
    server: asyncio.Server | None = None

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            self.heads.append(head)
            if head.startswith(b"GET /refuse "):
                writer.write(
                    b"HTTP/1.1 403 Forbidden\r\nContent-Length: 8\r\nX-Why: policy\r\n\r\nrefused\n"
                )
                await writer.drain()
                return
            writer.write(
                b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n"
                b"Upgrade: echo/1\r\nX-Origin: raw\r\n\r\nhi>"
            )
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
            self.ended.set()
        except (ConnectionError, asyncio.IncompleteReadError):
            self.ended.set()
        finally:
            writer.close()


@asynccontextmanager
async def raw_origin() -> AsyncIterator[RawOrigin]:
    origin = RawOrigin()
    server = await asyncio.start_server(origin.serve, "127.0.0.1", 0)
    origin.server = server
    origin.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield origin
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await server.wait_closed()


UPGRADE_ECHO = (
    b"GET /echo HTTP/1.1\r\nHost: example.com\r\nConnection: keep-alive, Upgrade\r\n"
    b"Upgrade: echo/1\r\n\r\n"
)

Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def raw_tunnel(
    address: tuple[str, int], request: bytes = UPGRADE_ECHO
) -> tuple[Connection, bytes]:
    """A client connection that sent ``request`` and read the answer's head (to the blank
    line): the connection, and the head."""
    reader, writer = await asyncio.open_connection(*address)
    writer.write(request)
    async with asyncio.timeout(5):
        head = await reader.readuntil(b"\r\n\r\n")
    return (reader, writer), head


async def echoed(connection: Connection, data: bytes) -> bytes:
    """Send ``data`` and read as many bytes back (within 5 s)."""
    reader, writer = connection
    writer.write(data)
    async with asyncio.timeout(5):
        await writer.drain()
        return await reader.readexactly(len(data))


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bytes:
    """What the server sends until it closes the connection; fails after ``seconds``."""
    received = b""
    async with asyncio.timeout(seconds):
        while chunk := await reader.read(65536):
            received += chunk
    return received
