"""Upgrade requests (WebSocket) go to one of the domain's origin servers, chosen and retried
as other requests are (issue 25 §2, decision 0034): a server that refuses the connection is
passed over, round robin spreads tunnels, and with every server refusing the answer is 502."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from proxy.observe.telemetry import Telemetry
from proxy.process.listeners import Draining, ProcessContext, edge_listening
from proxy.store.memory import MemoryStore
from tests.conftest import make_config
from tests.edge.origins_support import Refusing

HOST = {"Host": "example.com"}


class NamedSockets:
    """A WebSocket origin on 127.0.0.1 that greets each socket with its name."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.sockets = 0
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/ws", self._socket)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        self.sockets += 1
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_str(self.name)
        await ws.close()
        return ws


@asynccontextmanager
async def edge_on(tmp_path: Path, origins: list[str], **domain: Any) -> AsyncIterator[str]:
    """The edge, listening as ``cdn-proxy serve`` does, for example.com on ``origins``."""
    domains = [{"name": "example.com", "origins": origins, "read_timeout": 5, **domain}]
    config = make_config(tmp_path, origins[0], domains=domains)
    store = MemoryStore(max_bytes=config.edge_role()[1].max_bytes)
    telemetry = Telemetry(store=store, domains=["example.com"])
    draining = Draining(5)
    process = ProcessContext(config, telemetry, draining=draining)
    async with edge_listening(process, store=store) as (_, url):
        yield url


async def greeting(client: aiohttp.ClientSession, url: str) -> str:
    async with client.ws_connect(url + "/ws", headers=HOST) as ws, asyncio.timeout(5):
        return await ws.receive_str()


async def test_a_refusing_origin_server_is_passed_over_for_an_upgrade(tmp_path: Path) -> None:
    live = NamedSockets("b")
    await live.start()
    try:
        async with (
            edge_on(tmp_path, [Refusing().url, live.url]) as url,
            aiohttp.ClientSession() as client,
        ):
            greetings = [await greeting(client, url) for _ in range(4)]
        assert greetings == ["b"] * 4
        assert live.sockets == 4
    finally:
        await live.stop()


async def test_round_robin_spreads_tunnels_over_the_origin_servers(tmp_path: Path) -> None:
    servers = [NamedSockets("a"), NamedSockets("b")]
    for server in servers:
        await server.start()
    try:
        async with (
            edge_on(tmp_path, [s.url for s in servers]) as url,
            aiohttp.ClientSession() as client,
        ):
            greetings = [await greeting(client, url) for _ in range(6)]
        assert sorted(greetings) == ["a"] * 3 + ["b"] * 3
        assert [s.sockets for s in servers] == [3, 3]
    finally:
        for server in servers:
            await server.stop()


@pytest.mark.slow
async def test_an_upgrade_with_every_origin_server_refusing_gets_a_5xx_not_a_tunnel(
    tmp_path: Path,
) -> None:
    handshake = {
        **HOST,
        "Connection": "Upgrade",
        "Upgrade": "websocket",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    }
    async with (
        edge_on(tmp_path, [Refusing().url, Refusing().url]) as url,
        aiohttp.ClientSession() as client,
        client.get(url + "/ws", headers=handshake) as response,
    ):
        assert response.status == 502
        assert "origin" in await response.text()
