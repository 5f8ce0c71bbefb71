"""Helpers for the tests of the access log, trusted proxies and response metrics: nodes in
child processes with [edge] keys of the test's choosing, and requests as clients send them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from tests.nodes import write_config
from tests.polling import until


def node_config(
    tmp_path: Path,
    origin_url: str,
    *,
    edge: str = "",
    api: str = "",
    workers: int = 1,
) -> Path:
    """A node with both roles on ports the OS chooses; ``edge`` and ``api``: more keys."""
    return write_config(tmp_path, origin_url, workers=workers, edge=edge, api=api)


async def get(
    url: str, *, host: str = "example.com", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One GET on a connection of its own: status, headers, body."""
    connector = aiohttp.TCPConnector(force_close=True)
    async with (
        aiohttp.ClientSession(connector=connector, auto_decompress=False) as client,
        client.get(url, headers={"Host": host, **(headers or {})}) as response,
    ):
        return response.status, dict(response.headers), await response.read()


async def raw(edge_url: str, data: bytes) -> bytes:
    """Send ``data`` as it is on a new connection; what came back until the server closed it."""
    host, _, port = edge_url.removeprefix("http://").rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        async with asyncio.timeout(10):  # a bound, not a wait
            writer.write(data)
            return await reader.read()
    finally:
        writer.close()


async def lines_of(path: Path, count: int, *, seconds: float = 10.0) -> list[str]:
    """The file's lines once it has at least ``count`` (the writer thread writes in batches)."""

    lines: list[str] = []

    def enough() -> bool:
        nonlocal lines
        lines = path.read_text().splitlines() if path.exists() else []
        return len(lines) >= count

    await until(enough, within=seconds, every=0.05)
    return lines


async def keep_alive_get(edge_url: str, path: str, count: int = 1) -> list[bytes]:
    """``count`` GETs of ``path`` on one keep-alive HTTP/1.1 connection (the fast path's
    kind): each whole answer, head and body, as it came."""
    host, _, port = edge_url.removeprefix("http://").rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    answers = []
    try:
        async with asyncio.timeout(10):  # a bound, not a wait
            for _ in range(count):
                writer.write(f"GET {path} HTTP/1.1\r\nHost: example.com\r\n\r\n".encode())
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.partition(b":")[2])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                answers.append(head + await reader.readexactly(length))
    finally:
        writer.close()
    return answers
