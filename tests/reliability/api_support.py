"""A real ``cdn-proxy serve`` for the API's abuse tests: its log kept in a file, a token made
with the CLI, and raw sockets to its API listener."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from proxy.core.routes import CLEAR_CACHE_PATH
from tests.nodes import Node, cli, write_config

DOMAIN = "example.com"
UNUSED_ORIGIN = "http://127.0.0.1:9"  # the API tests never reach an origin


@dataclass
class Served:
    """A node with both roles, its config, its log file and one all-domains token."""

    node: Node
    config: Path
    log: Path
    token: str

    @property
    def api(self) -> str:
        return self.node.api

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


async def start_node(config: Path, log: Path) -> Node:
    """``cdn-proxy serve`` in a child process, its stderr (the log) appended to ``log``."""
    return await Node.start(config, log=log)


@asynccontextmanager
async def served(
    tmp_path: Path, *, api_extra: str = "", extra: str = "", workers: int = 1
) -> AsyncIterator[Served]:
    """A node with both roles; ``api_extra`` lines go into its [api] table, ``extra`` at the
    end of the file."""
    config = write_config(tmp_path, UNUSED_ORIGIN, workers=workers, extra=extra)
    api_table = '[api]\nlisten = "127.0.0.1:0"\n'
    text = config.read_text(encoding="utf-8")
    assert api_table in text
    config.write_text(text.replace(api_table, api_table + api_extra + "\n"), encoding="utf-8")
    status, token, err = await cli(
        "token", "create", "deploy", "--all-domains", "--config", str(config)
    )
    assert status == 0, err
    log = tmp_path / "serve.log"
    node = await start_node(config, log)
    try:
        yield Served(node, config, log, token.strip())
    finally:
        await node.kill()


async def clear(
    session: aiohttp.ClientSession,
    api: str,
    token: str | None,
    body: bytes = json.dumps({"domain": DOMAIN}).encode(),
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One POST to the clear-cache endpoint: its status, headers and body."""
    sent = {"Content-Type": "application/json", **(headers or {})}
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    async with session.post(api + CLEAR_CACHE_PATH, data=body, headers=sent) as response:
        return response.status, dict(response.headers), await response.read()


async def raw_exchange(api: str, data: bytes, *, bound: float) -> Exchange:
    """Send ``data`` on a fresh connection, then read until a whole response head has come
    back, the server closes the connection, or ``bound`` seconds pass."""
    host, port = api.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    loop = asyncio.get_running_loop()
    started = loop.time()
    received = b""
    closed = False
    try:
        writer.write(data)
        await writer.drain()
        async with asyncio.timeout(bound):
            while b"\r\n\r\n" not in received:
                chunk = await reader.read(65536)
                if not chunk:
                    closed = True
                    break
                received += chunk
    except TimeoutError:
        pass
    except ConnectionResetError:
        closed = True
    finally:
        writer.close()
    return Exchange(received, closed, loop.time() - started)


@dataclass(frozen=True)
class Exchange:
    """What a raw connection got back: the bytes, whether the server closed it, and when."""

    received: bytes
    closed: bool
    seconds: float

    @property
    def status(self) -> int | None:
        """The response's status code, or None if no status line came back."""
        if not self.received.startswith(b"HTTP/1."):
            return None
        return int(self.received.split(b" ", 2)[1])
