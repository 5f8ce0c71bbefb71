"""A real ``cdn-proxy serve`` child for the connection, shutdown and malformed-request tests:
its log kept in a file the test reads, and optionally a low open-files limit (RLIMIT_NOFILE)
so that a test can run it out of descriptors with a few hundred connections."""

from __future__ import annotations

import asyncio
import resource
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.nodes import Node, alive

HOST = "example.com"


def config_text(origin_url: str, *, workers: int = 1, edge: str = "", api: str = "") -> str:
    return f"""
[edge]
listen = "127.0.0.1:0"
workers = {workers}
{edge}
[api]
listen = "127.0.0.1:0"
{api}
[cache]
max_bytes = "8MiB"
[state]
path = "state.db"
[[domains]]
name = "{HOST}"
origin = "{origin_url}"
read_timeout = 30
"""


@dataclass
class Served:
    process: asyncio.subprocess.Process
    edge: str
    api: str
    log: Path

    @property
    def edge_address(self) -> tuple[str, int]:
        return _address(self.edge)

    @property
    def api_address(self) -> tuple[str, int]:
        return _address(self.api)

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def log_lines(self) -> list[str]:
        return self.log_text().splitlines()


def _address(url: str) -> tuple[str, int]:
    host, _, port = url.removeprefix("http://").rpartition(":")
    return host, int(port)


def _limit_files(soft: int, hard: int) -> Callable[[], None]:
    def apply() -> None:  # in the child, before exec: its limit, and its workers'
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return apply


@asynccontextmanager
async def served(
    tmp_path: Path, text: str, *, nofile: tuple[int, int] | None = None
) -> AsyncIterator[Served]:
    """``cdn-proxy serve`` on ``text`` (a config), killed with its process group at the end."""
    config = tmp_path / "proxy.toml"
    config.write_text(text, encoding="utf-8")
    log = tmp_path / "serve.log"
    log.write_bytes(b"")
    preexec = None if nofile is None else _limit_files(*nofile)
    node = await Node.start(config, log=log, preexec_fn=preexec)
    try:
        yield Served(node.process, node.edge, node.api, log)
    finally:
        await node.kill()


async def closed_by_server(reader: asyncio.StreamReader, *, within: float) -> bytes:
    """Everything the server sends until it closes the connection; fails after ``within``
    seconds if it has not closed it."""
    received = b""
    async with asyncio.timeout(within):
        while chunk := await reader.read(65536):
            received += chunk
    return received


Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def open_silent(address: tuple[str, int], count: int) -> list[Connection]:
    """``count`` connections that send nothing."""
    return [await asyncio.open_connection(*address) for _ in range(count)]


async def first_bytes(connection: Connection, *, within: float) -> bytes:
    """What the server sends first, or b"" if it sends nothing within ``within`` seconds."""
    try:
        async with asyncio.timeout(within):
            return await connection[0].read(12)
    except TimeoutError:
        return b""


def close_all(connections: list[Connection]) -> None:
    for _, writer in connections:
        writer.transport.abort()


async def metric(served: Served, name: str) -> float:
    """One sample of /metrics by its full name with labels (0 when absent)."""
    import aiohttp

    async with aiohttp.ClientSession() as client, client.get(served.api + "/metrics") as r:
        text = await r.text()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def still_running(pid: int) -> bool:
    return alive(pid)


def elapsed_since(start: float) -> float:
    return time.monotonic() - start
