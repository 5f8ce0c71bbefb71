"""Purges through the fleet on real processes: ``cdn-proxy serve`` with two edge workers and
its embedded Valkey, a real origin whose bodies carry a version the test bumps, and a
``FleetPurger`` on the node's Valkey (as the purge API will call it). After the purge
returns, no read of a covered page gets its old version, on either worker; the pages it
does not cover are still hits on both (the origin sees no new request for them)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from proxy.core.purges import purge_request
from proxy.fleet.purger import FleetPurger
from proxy.fleet.settings import FleetSettings
from proxy.node import EMBEDDED_SOCKET
from tests.conftest import Origin
from tests.nodes import Node, write_config

HOST = {"Host": "example.com"}
CONNECTIONS = 200  # fresh connections to reach both workers (the kernel spreads them)
PAGES = {"/assets/a.css": "t-a", "/assets/b.css": "t-b", "/index.html": "t-index"}


class Pages:
    """Origin routes whose body is their current version, tagged with Surrogate-Key."""

    def __init__(self, origin: Origin) -> None:
        self.versions = dict.fromkeys(PAGES, 1)
        for target in PAGES:
            origin.route(target, self.handle)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        target = request.path
        headers = {"Cache-Control": "max-age=600", "Surrogate-Key": PAGES[target]}
        return web.Response(text=f"v{self.versions[target]}", headers=headers)


@pytest.fixture
async def node(tmp_path: Path, origin: Origin) -> AsyncIterator[Node]:
    started = await Node.start(write_config(tmp_path, origin.url, workers=2))
    yield started
    await started.kill()


@pytest.fixture
async def purger(tmp_path: Path, node: Node) -> AsyncIterator[FleetPurger]:
    url = f"unix://{tmp_path / EMBEDDED_SOCKET}"
    started = FleetPurger(settings=FleetSettings(url=url), name="test")
    yield started
    await started.aclose()


async def read(node: Node, target: str) -> tuple[str, str]:
    """One GET on a connection of its own (either worker): body and Cache-Status."""
    connector = aiohttp.TCPConnector(force_close=True)
    async with (
        aiohttp.ClientSession(connector=connector) as client,
        client.get(node.edge + target, headers=HOST) as response,
    ):
        assert response.status == 200
        assert "Surrogate-Key" not in response.headers
        return await response.text(), response.headers.get("Cache-Status", "")


@pytest.mark.parametrize(
    ("kind", "items", "soft", "covered"),
    [
        ("url", ["/assets/a.css"], False, {"/assets/a.css"}),
        ("prefix", ["/assets/"], True, {"/assets/a.css", "/assets/b.css"}),
        ("tag", ["t-index", "t-b"], False, {"/index.html", "/assets/b.css"}),
        ("all", [], True, set(PAGES)),
    ],
)
async def test_a_purge_is_true_on_both_workers(
    node: Node,
    origin: Origin,
    purger: FleetPurger,
    kind: str,
    items: list[str],
    soft: bool,
    covered: set[str],
) -> None:
    pages = Pages(origin)
    for target in PAGES:  # each worker fills its own cache with v1
        for _ in range(CONNECTIONS):
            assert (await read(node, target))[0] == "v1"
            if origin.count(target) == 2:
                break
        assert origin.count(target) == 2, "the connections all reached one worker"
    for target in covered:
        pages.versions[target] = 2

    result = await purger.purge("example.com", purge_request(kind, items, soft=soft))
    assert (result.acked, result.live, result.reported) == (2, 2, 2)

    for target in PAGES:
        seen = {await read(node, target) for _ in range(CONNECTIONS // 5)}
        bodies = {body for body, _ in seen}
        if target in covered:
            assert bodies == {"v2"}, target
            assert origin.count(target) <= 4  # each worker fetched v2 once (at most)
        else:
            assert bodies == {"v1"}, target
            assert all("hit" in status for _, status in seen), seen
            assert origin.count(target) == 2  # still the two fills: hits on both workers
