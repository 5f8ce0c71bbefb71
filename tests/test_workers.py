"""``[edge] workers = 2``: two edge processes on one port, each with its own cache, and a clear
that is true on both; a worker that dies is restarted and counted.

Real processes throughout: the node (``cdn-proxy serve``), its workers and the embedded Valkey
it starts; a real origin whose body carries a version the test bumps before each clear.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.conftest import Origin
from tests.nodes import Node, cli, exited, write_config
from tests.polling import until

# slow: nodes of several worker processes; not in the quick subset (README)
pytestmark = pytest.mark.slow

CACHEABLE = {"Cache-Control": "max-age=600"}
HOST = {"Host": "example.com"}
CONNECTIONS = 200  # fresh connections to reach both workers (the kernel spreads them)


class Versioned:
    """An origin route whose body is its current version."""

    def __init__(self, origin: Origin, target: str) -> None:
        self.version = 1
        origin.route(target, self.handle)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text=f"v{self.version}", headers=CACHEABLE)


@pytest.fixture
async def node(tmp_path: Path, origin: Origin) -> AsyncIterator[Node]:
    started = await Node.start(write_config(tmp_path, origin.url, workers=2))
    yield started
    await started.kill()  # the node, and anything of its group still running


async def read_fresh(node: Node, path: str) -> str:
    """One GET on a connection of its own, so the kernel may hand it to either worker."""
    connector = aiohttp.TCPConnector(force_close=True)
    async with (
        aiohttp.ClientSession(connector=connector) as client,
        client.get(node.edge + path, headers=HOST) as response,
    ):
        assert response.status == 200
        return await response.text()


async def token(tmp_path: Path) -> str:
    config = str(tmp_path / "proxy.toml")
    status, out, err = await cli("token", "create", "deploy", "--all-domains", "--config", config)
    assert status == 0, err
    return out.strip()


async def clear(node: Node, secret: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as client,
        client.post(
            node.api + "/api/v1/cdn/clear-cache",
            json={"domain": "example.com"},
            headers={"Authorization": f"Bearer {secret}"},
        ) as response,
    ):
        return response.status, await response.text()


async def test_two_workers_serve_from_two_caches_and_a_clear_is_true_on_both(
    node: Node, origin: Origin, tmp_path: Path
) -> None:
    page = Versioned(origin, "/page")
    assert len(node.worker_pids()) == 2
    # Each worker fills its own cache: the origin is asked once per worker that is reached.
    for _ in range(CONNECTIONS):
        assert await read_fresh(node, "/page") == "v1"
        if origin.count("/page") == 2:
            break
    assert origin.count("/page") == 2, "the connections all reached one worker"

    page.version = 2
    assert await clear(node, await token(tmp_path)) == (200, "Cache cleared")
    bodies = {await read_fresh(node, "/page") for _ in range(CONNECTIONS // 4)}
    assert bodies == {"v2"}
    assert origin.count("/page") <= 4  # each worker fetched v2 once (at most)


async def test_a_killed_worker_is_restarted_logged_and_counted(node: Node, origin: Origin) -> None:
    Versioned(origin, "/page")
    before = node.worker_pids()
    victim = min(before)
    os.kill(victim, signal.SIGKILL)
    await exited(victim)
    await until(lambda: len(node.worker_pids()) == 2, within=30.0, every=0.05)
    assert len(node.worker_pids() - before) == 1
    for _ in range(10):
        assert await read_fresh(node, "/page") == "v1"
    async with aiohttp.ClientSession() as client, client.get(node.api + "/metrics") as response:
        metrics = await response.text()
    restarts = [
        line for line in metrics.splitlines() if line.startswith("cdn_proxy_worker_restarts_total")
    ]
    # One worker restarted; the other's series is there at zero.
    assert sorted(line.rpartition(" ")[2] for line in restarts) == ["0.0", "1.0"], restarts


async def test_a_node_killed_outright_takes_its_workers_with_it_and_starts_again(
    node: Node, origin: Origin, tmp_path: Path
) -> None:
    """SIGKILL leaves the node no time to stop its workers; each notices its node is gone
    (its standard input closes) and exits rather than serve unsupervised. The node starts
    again with the same config: it stops the embedded Valkey the killed run left behind."""
    workers = node.worker_pids()
    assert len(workers) == 2
    node.process.send_signal(signal.SIGKILL)
    await node.process.wait()
    async with asyncio.timeout(30):
        for pid in workers:
            await exited(pid)
    Versioned(origin, "/page")
    again = await Node.start(tmp_path / "proxy.toml")
    try:
        assert len(again.worker_pids()) == 2
        assert await read_fresh(again, "/page") == "v1"
    finally:
        await again.kill()


async def test_metrics_show_the_whole_machine(node: Node, origin: Origin) -> None:
    """/metrics on the control process sums both workers' responses and stores (each
    reports with its lease renewals; the control process reads them once a second)."""
    Versioned(origin, "/page")
    reads = 0
    while origin.count("/page") < 2 and reads < CONNECTIONS:
        await read_fresh(node, "/page")
        reads += 1
    assert origin.count("/page") == 2
    wanted = {
        'cdn_proxy_requests_total{cache_status="miss",domain="example.com"}': "2.0",
        'cdn_proxy_requests_total{cache_status="hit",domain="example.com"}': f"{reads - 2}.0",
        'cdn_proxy_domain_entries{domain="example.com"}': "2.0",
        "cdn_proxy_fleet_live_processes": "2.0",
        "cdn_proxy_fleet_fenced_processes": "0.0",
    }
    seen: dict[str, str] = {}
    async with aiohttp.ClientSession() as client:

        async def summed() -> bool:
            async with client.get(node.api + "/metrics") as response:
                samples = dict(
                    line.rsplit(" ", 1)
                    for line in (await response.text()).splitlines()
                    if line and not line.startswith("#")
                )
            seen.update((name, samples.get(name, "absent")) for name in wanted)
            return seen == wanted

        # Reports arrive every 0.5 s and are read every 1 s: polled, up to 10 s.
        with contextlib.suppress(AssertionError):
            await until(summed, within=10.0, every=0.1)
    assert seen == wanted  # (what was seen last, if it never came)
