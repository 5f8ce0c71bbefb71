"""Two whole edges (``cdn-proxy`` as ``running`` serves it) in front of one recording origin,
one with the hit lane on and one with it off, spoken to over raw sockets with the same bytes:
what each sends back and what the origin sees must be the same (decision 0050)."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from proxy.process.service import Service, running
from tests.conftest import FakeClock, Origin, Seen, make_config

# Ends every exchange: once its answer (its body: END_BODY) has come, nothing more is read;
# unless the bytes before it were read as a body, or refused, which both edges must do
# alike. A request the lane reads, so that it does not take the lane off the connection.
END = b"GET /end HTTP/1.1\r\nHost: example.com\r\n\r\n"
END_BODY = b"\r\n\r\nGET /end"
# A bound on an exchange whose connection stays open (a body still expected): both edges
# alike, so the comparison holds; never a synchronisation.
BOUND = 1.5
BIG = bytes(range(256)) * 400  # past JOINED_BODY_MAX: head and body written apart
# Stored before each exchange, on both edges.
PRIMED = ("/hit", "/hit?q=1", "/vary", "/big", "/tagged")
# Their values only: where each line stands is compared (a lane HEAD writes Age where the
# full path's does, decision 0055).
_VOLATILE = re.compile(rb"\r\n(Date|Age): [^\r\n]*", re.IGNORECASE)


async def site(request: web.Request) -> web.StreamResponse:
    """The origin: every target cacheable, its body naming it; /vary varies, /big is big,
    /end and /miss* are never stored."""
    path = request.path
    headers = {
        "Cache-Control": "max-age=600",
        "ETag": '"e1"',
        "Last-Modified": "Mon, 13 Nov 2023 22:13:20 GMT",
        "Content-Type": "text/plain",
    }
    body = f"{request.method} {request.raw_path}".encode()
    if path == "/vary":
        headers["Vary"] = "Accept-Encoding"
    elif path == "/big":
        body = BIG
    elif path == "/tagged":
        headers["Surrogate-Key"] = "a b"
    elif path == "/end" or path.startswith("/miss"):
        headers["Cache-Control"] = "no-store"
    return web.Response(body=body, headers=headers)


@dataclass(frozen=True)
class Raw:
    """What an edge sent back on one connection (Date and Age taken out), and whether it
    closed the connection."""

    data: bytes
    closed: bool


def seen_view(seen: list[Seen]) -> list[tuple[str, str, list[tuple[str, str]]]]:
    return [(s.method, s.target, sorted(s.header_items)) for s in seen]


async def exchange(url: str, data: bytes, *, bound: float = BOUND) -> Raw:
    host, _, port = url.removeprefix("http://").rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    received = bytearray()
    closed = True
    try:
        writer.write(data)
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        try:
            async with asyncio.timeout(bound):
                while chunk := await reader.read(65536):
                    received += chunk
                    if received.endswith(END_BODY):
                        closed = False  # at the end of the exchange
                        break
        except TimeoutError:
            closed = False
        except ConnectionResetError:
            pass
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    return Raw(_VOLATILE.sub(rb"\r\n\1: -", bytes(received)), closed)


@dataclass
class Outcome:
    answer: Raw
    seen: list[tuple[str, str, list[tuple[str, str]]]]
    lane_hits: int


@dataclass
class Twins:
    """The lane-on and lane-off edges, one origin, one clock."""

    on: Service
    off: Service
    origin: Origin
    clock: FakeClock

    async def prime(self) -> None:
        for service in (self.on, self.off):
            for target in PRIMED:
                request = f"GET {target} HTTP/1.1\r\nHost: example.com\r\n\r\n".encode()
                answer = await exchange(service.edge_url, request + END)
                assert answer.data.startswith(b"HTTP/1.1 200"), answer

    async def send(self, service: Service, data: bytes, *, end: bool = True) -> Outcome:
        before, hits = len(self.origin.seen), service.edge.lane_answered
        answer = await exchange(service.edge_url, data + (END if end else b""))
        seen = seen_view(self.origin.seen[before:])
        return Outcome(answer, seen, service.edge.lane_answered - hits)

    async def compare(self, data: bytes, *, end: bool = True) -> tuple[Outcome, Outcome]:
        """``data`` to the lane-on edge, then the same to the lane-off edge: the same bytes
        back but for Date and Age, the same close, the same requests at the origin."""
        on = await self.send(self.on, data, end=end)
        off = await self.send(self.off, data, end=end)
        assert on.answer == off.answer, (data, on.answer, off.answer)
        assert on.seen == off.seen, data
        assert off.lane_hits == 0
        return on, off


@contextlib.asynccontextmanager
async def twins_of(
    tmp_path: Path, origin: Origin, edge: dict[str, Any] | None = None, *, logs: bool = False
) -> AsyncIterator[Twins]:
    """The twins, with ``edge`` keys more; with ``logs``, each its access log in
    ``tmp_path/on/access.log`` and ``tmp_path/off/access.log``."""
    origin.default = site
    clock = FakeClock()
    settings = {"listen": "127.0.0.1:0", "shutdown_timeout": 5, **(edge or {})}
    configs = []
    for name, lane in (("on", True), ("off", False)):
        home = tmp_path / name
        home.mkdir()
        keys = {**settings, "hit_lane": lane}
        if logs:
            keys["access_log"] = str(home / "access.log")
        configs.append(make_config(home, origin.url, edge=keys))
    on_config, off_config = configs
    async with running(on_config, clock=clock) as on, running(off_config, clock=clock) as off:
        twins = Twins(on, off, origin, clock)
        await twins.prime()
        yield twins
