"""GET /readyz on the API listener (issue 14 §8): which origins fail, apart from /healthz.

Against ``cdn-proxy serve`` in a child process, with real origins: one that answers, one that
answers 503, and a port where nothing listens."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from proxy.api.readiness import PROBE_INTERVAL, Readiness
from tests.conftest import FakeClock, Origin, make_config
from tests.nodes import WORKER_COUNTS, Node, cli, write_config


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def get_json(client: aiohttp.ClientSession, url: str) -> tuple[int, Any, str]:
    async with client.get(url) as response:
        return response.status, await response.json(), response.headers["Cache-Control"]


async def healthz(client: aiohttp.ClientSession, node: Node) -> tuple[int, str]:
    async with client.get(node.api + "/healthz") as response:
        return response.status, await response.text()


@pytest.mark.slow
@pytest.mark.parametrize(
    "workers",
    WORKER_COUNTS,
)
async def test_ready_when_every_origin_answers(
    tmp_path: Path, origin: Origin, client: aiohttp.ClientSession, workers: int
) -> None:
    """An origin that answers at all is up (this one says 404 at /); the control plane
    probes it, with or without edge workers, and says so per domain."""
    node = await Node.start(write_config(tmp_path, origin.url, workers=workers))
    try:
        status, body, cache_control = await get_json(client, node.api + "/readyz")
    finally:
        await node.kill()
    assert (status, cache_control) == (200, "no-store")
    assert body["ready"] is True
    assert body["failing"] == []
    [row] = body["domains"]
    assert row["domain"] == "example.com"
    assert row["origin"] == origin.url
    assert (row["ok"], row["status"], row["error"]) == (True, 404, None)
    [probe] = [s for s in origin.seen if s.method == "HEAD"]
    assert (probe.target, probe.headers["Host"]) == ("/", "example.com")


@pytest.mark.slow
async def test_not_ready_names_the_failing_origins_while_healthz_stays_ok(
    tmp_path: Path, origin: Origin, client: aiohttp.ClientSession
) -> None:
    """/healthz said ok while every origin was down. Liveness stays as it was; readiness is
    503 and names each failing domain and why."""
    origin.reply("/", b"down for maintenance", status=503)
    down = f"http://127.0.0.1:{closed_port()}"
    extra = f'\n[[domains]]\nname = "down.test"\norigin = "{down}"\n'
    extra += f'\n[[domains]]\nname = "fine.test"\norigin = "{origin.url}"\n'
    node = await Node.start(write_config(tmp_path, origin.url, extra=extra))
    try:
        status, body, _ = await get_json(client, node.api + "/readyz")
        assert await healthz(client, node) == (200, "ok")
    finally:
        await node.kill()
    assert status == 503
    assert body["ready"] is False
    rows = {row["domain"]: row for row in body["domains"]}
    assert set(rows) == {"example.com", "down.test", "fine.test"}
    assert body["failing"] == ["example.com", "down.test", "fine.test"]
    assert rows["example.com"]["error"] == "the origin answered 503"
    assert rows["down.test"]["status"] is None
    assert "origin unreachable" in rows["down.test"]["error"]


@pytest.mark.slow
async def test_probes_are_rate_limited_however_often_readyz_is_asked(
    tmp_path: Path, origin: Origin, client: aiohttp.ClientSession
) -> None:
    """Twenty /readyz at once and twenty after: one probe of the origin in all (a round's
    results are reused for PROBE_INTERVAL seconds; requests during a round share it)."""
    arrived = asyncio.Event()
    release = asyncio.Event()

    async def slow(request: web.Request) -> web.StreamResponse:
        arrived.set()
        await release.wait()
        return web.Response(status=200)

    origin.route("/", slow)
    node = await Node.start(write_config(tmp_path, origin.url))
    try:
        first = [asyncio.create_task(get_json(client, node.api + "/readyz")) for _ in range(20)]
        await arrived.wait()
        release.set()
        answers = await asyncio.gather(*first)
        answers += [await get_json(client, node.api + "/readyz") for _ in range(20)]
    finally:
        await node.kill()
    assert {status for status, _, _ in answers} == {200}
    assert origin.count("/", "HEAD") == 1


async def test_reconfigure_keeps_unchanged_domains_and_probes_new_ones(
    tmp_path: Path, origin: Origin
) -> None:
    """``Readiness.reconfigure`` (wired to SIGHUP by the reload): a re-pointed domain's
    result is dropped and probed again at once; an unchanged one's is kept for its
    interval."""
    clock = FakeClock()
    readiness = Readiness(make_config(tmp_path, origin.url), clock=clock)
    try:
        before = await readiness.probes()
        assert [p.ok for p in before] == [True, True]
        down = f"http://127.0.0.1:{closed_port()}"
        domains = [
            {"name": "example.com", "origin": origin.url},
            {"name": "other.test", "origin": down},
        ]
        readiness.reconfigure(make_config(tmp_path, origin.url, domains=domains))
        after = await readiness.probes()
        assert [(p.domain, p.ok) for p in after] == [("example.com", True), ("other.test", False)]
        assert readiness.rounds == 2
        assert await readiness.probes() == after  # within the interval: no new round
        clock.advance(PROBE_INTERVAL)
        await readiness.probes()
        assert readiness.rounds == 3
    finally:
        await readiness.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    "workers",
    WORKER_COUNTS,
)
async def test_a_domain_added_by_reload_is_probed(
    tmp_path: Path, origin: Origin, client: aiohttp.ClientSession, workers: int
) -> None:
    """Issue 22 item 8: ``two.test`` added by ``cdn-proxy reload`` with an origin that is
    down. /readyz said 200 for it while the edge answered 502 (the readiness checker was
    never given the new config); after the reload it is probed, and named, at once."""
    config = write_config(tmp_path, origin.url, workers=workers)
    node = await Node.start(config)
    try:
        before, _, _ = await get_json(client, node.api + "/readyz")
        down = f"http://127.0.0.1:{closed_port()}"
        text = config.read_text(encoding="utf-8")
        config.write_text(text + f'\n[[domains]]\nname = "two.test"\norigin = "{down}"\n')
        status, out, err = await cli("reload", "--config", str(config))
        assert status == 0, err
        after_status, body, _ = await get_json(client, node.api + "/readyz")
    finally:
        await node.kill()
    assert before == 200
    assert "added two.test" in out
    assert (after_status, body["ready"], body["failing"]) == (503, False, ["two.test"])
    rows = {row["domain"]: row for row in body["domains"]}
    assert "origin unreachable" in rows["two.test"]["error"]
    assert rows["example.com"]["ok"] is True
