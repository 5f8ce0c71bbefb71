"""Load that wrk cannot make: fills, timed single requests, bursts of clients, a clearing loop.

A minimal HTTP/1.1 client on asyncio streams (keep-alive, Content-Length bodies only, which
is all the benchmark origin and the caches in front of it send). It runs in the runner's
process on the load core; nothing here is on a server's core.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field


class HttpError(Exception):
    """A response the benchmark cannot read (no Content-Length, closed connection)."""


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    headers: dict[str, str]  # lower-case names; a repeated field keeps its last value
    body: bytes


class Connection:
    """One keep-alive connection to 127.0.0.1:port."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
        return cls(reader, writer)

    def send(
        self,
        method: str,
        path: str,
        host: str,
        headers: Iterable[tuple[str, str]] = (),
        body: bytes = b"",
    ) -> None:
        lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
        lines += [f"{name}: {value}" for name, value in headers]
        if body or method in ("POST", "PUT"):
            lines.append(f"Content-Length: {len(body)}")
        self._writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)

    async def receive(self, method: str = "GET") -> Reply:
        head = await self._reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head[:-4].decode("latin-1").split("\r\n")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[1].isdigit():
            raise HttpError(f"bad status line {status_line!r}")
        headers: dict[str, str] = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        status = int(parts[1])
        if method == "HEAD" or status in (204, 304):
            return Reply(status, headers, b"")
        length = headers.get("content-length")
        if length is None:
            raise HttpError(f"no Content-Length in a {status} answer")
        body = await self._reader.readexactly(int(length))
        return Reply(status, headers, body)

    async def request(
        self,
        method: str,
        path: str,
        host: str,
        headers: Iterable[tuple[str, str]] = (),
        body: bytes = b"",
    ) -> Reply:
        self.send(method, path, host, headers, body)
        return await self.receive(method)

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()


async def get(port: int, path: str, host: str, method: str = "GET") -> Reply:
    """One request on a new connection."""
    conn = await Connection.open(port)
    try:
        return await conn.request(method, path, host)
    finally:
        await conn.close()


@dataclass(slots=True)
class FillResult:
    requests: int = 0
    errors: int = 0
    seconds: float = 0.0
    statuses: dict[int, int] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


async def fill(port: int, host: str, paths: Iterable[str], concurrency: int = 32) -> FillResult:
    """GET every path once over ``concurrency`` keep-alive connections."""
    result = FillResult()
    work: Iterator[str] = iter(paths)

    async def worker() -> None:
        conn = await Connection.open(port)
        try:
            for path in work:
                reply = await conn.request("GET", path, host)
                result.requests += 1
                result.statuses[reply.status] = result.statuses.get(reply.status, 0) + 1
                if reply.status != 200:
                    result.errors += 1
        finally:
            await conn.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    result.seconds = time.perf_counter() - start
    return result


@dataclass(frozen=True, slots=True)
class BurstResult:
    clients: int
    ok: int
    seconds: float  # from sending every request to the last answer
    connect_seconds: float  # to open every connection first


async def burst(port: int, host: str, paths: list[str]) -> BurstResult:
    """Open one connection per path first, then send every request at once."""
    began = time.perf_counter()
    conns = await asyncio.gather(*(Connection.open(port) for _ in paths))
    connect_seconds = time.perf_counter() - began
    try:
        start = time.perf_counter()
        for conn, path in zip(conns, paths, strict=True):
            conn.send("GET", path, host)
        replies = await asyncio.gather(*(conn.receive() for conn in conns))
        seconds = time.perf_counter() - start
    finally:
        await asyncio.gather(*(conn.close() for conn in conns))
    return BurstResult(
        clients=len(paths),
        ok=sum(r.status == 200 for r in replies),
        seconds=seconds,
        connect_seconds=connect_seconds,
    )


@dataclass(slots=True)
class LoopResult:
    sent: int = 0
    ok: int = 0
    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.sent / self.seconds if self.seconds else 0.0


async def clear_loop(
    port: int,
    path: str,
    host: str,
    headers: list[tuple[str, str]],
    body: bytes,
    per_second: float,
    stop: asyncio.Event,
    connections: int = 4,
) -> LoopResult:
    """POST ``body`` to ``path`` ``per_second`` times a second until ``stop`` is set.

    Requests leave on a fixed schedule, one every 1/per_second s, each on a free keep-alive
    connection of a small pool: a slow answer delays no later request unless every
    connection is busy.
    """
    result = LoopResult()
    interval = 1.0 / per_second
    pool: asyncio.Queue[Connection] = asyncio.Queue()
    for conn in await asyncio.gather(*(Connection.open(port) for _ in range(connections))):
        pool.put_nowait(conn)
    pending: set[asyncio.Task[None]] = set()

    async def one() -> None:
        conn = await pool.get()
        try:
            start = time.perf_counter()
            reply = await conn.request("POST", path, host, headers, body)
            result.latencies_ms.append((time.perf_counter() - start) * 1000)
            result.ok += reply.status == 200
        finally:
            pool.put_nowait(conn)

    began = due = time.perf_counter()
    try:
        while not stop.is_set():
            task = asyncio.create_task(one())
            pending.add(task)
            task.add_done_callback(pending.discard)
            result.sent += 1
            due += interval
            delay = due - time.perf_counter()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
        result.seconds = time.perf_counter() - began
        if pending:
            await asyncio.gather(*pending)
    finally:
        while not pool.empty():
            await pool.get_nowait().close()
    return result
