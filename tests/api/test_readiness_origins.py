"""/readyz with several origin servers per domain (issue 25 §2, decision 0034), and origin
servers added by a reload, against ``cdn-proxy serve`` in a child process."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.conftest import Origin
from tests.edge.origins_support import Killable, Refusing
from tests.nodes import WORKER_COUNTS, Node, cli, write_config


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
async def servers() -> AsyncIterator[list[Killable]]:
    made = [Killable(name) for name in "abc"]
    for server in made:
        await server.start()
    yield made
    for server in made:
        await server.kill()


def multi(origins: list[str], backups: list[str]) -> str:
    return (
        '\n[[domains]]\nname = "multi.test"\n'
        f"origins = {json.dumps(origins)}\nbackup_origins = {json.dumps(backups)}\n"
    )


async def readyz(client: aiohttp.ClientSession, node: Node) -> tuple[int, dict[str, Any]]:
    async with client.get(node.api + "/readyz") as response:
        return response.status, await response.json()


async def get(client: aiohttp.ClientSession, node: Node, path: str) -> tuple[int, str]:
    async with client.get(node.edge + path, headers={"Host": "multi.test"}) as response:
        return response.status, await response.text()


@pytest.mark.slow
async def test_readyz_shows_each_origin_server_with_the_edges_view(
    tmp_path: Path, origin: Origin, client: aiohttp.ClientSession, servers: list[Killable]
) -> None:
    a, _, c = servers
    dead = Refusing()
    extra = multi([a.url, dead.url], [c.url])
    node = await Node.start(write_config(tmp_path, origin.url, extra=extra))
    try:
        answers = [await get(client, node, f"/page/{n}") for n in range(4)]
        status, body = await readyz(client, node)
    finally:
        await node.kill()
    assert answers == [(200, "a")] * 4  # the dead server's tries were retried on a
    assert (status, body["ready"], body["failing"]) == (200, True, [])
    row = {r["domain"]: r for r in body["domains"]}["multi.test"]
    assert (row["ok"], row["origin"]) == (True, a.url)
    rows = {r["origin"]: r for r in row["origins"]}
    assert [(r["origin"], r["backup"], r["ok"]) for r in row["origins"]] == [
        (a.url, False, True),
        (dead.url, False, False),
        (c.url, True, True),
    ]
    assert "origin unreachable" in rows[dead.url]["error"]
    assert "origin unreachable" in rows[dead.url]["last_failure"]
    assert rows[a.url]["last_failure"] is None and rows[a.url]["since_seconds"] >= 0
    # The edge's own view (this node serves the edge in the same process).
    assert rows[dead.url]["edge"]["up"] is False
    assert rows[dead.url]["edge"]["errors"] >= 1
    assert rows[a.url]["edge"]["requests"] == 4 and rows[a.url]["edge"]["errors"] == 0
    assert rows[c.url]["edge"]["requests"] == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "workers",
    WORKER_COUNTS,
)
async def test_origin_servers_added_and_removed_by_a_reload_take_traffic_without_restart(
    tmp_path: Path,
    origin: Origin,
    client: aiohttp.ClientSession,
    servers: list[Killable],
    workers: int,
) -> None:
    a, b, _ = servers
    config = write_config(tmp_path, origin.url, workers=workers, extra=multi([a.url], []))
    node = await Node.start(config)
    try:
        before = [await get(client, node, f"/one/{n}") for n in range(6)]
        text = config.read_text(encoding="utf-8").replace(
            f'origins = ["{a.url}"]', f'origins = ["{b.url}"]'
        )
        config.write_text(text, encoding="utf-8")
        status, out, err = await cli("reload", "--config", str(config))
        assert status == 0, err
        after = [await get(client, node, f"/two/{n}") for n in range(6)]
        _, body = await readyz(client, node)
    finally:
        await node.kill()
    assert before == [(200, "a")] * 6
    assert "re-pointed" in out  # no server in common: another site, its entries cleared
    assert after == [(200, "b")] * 6
    assert sum(a.seen[f"/one/{n}"] + b.seen[f"/two/{n}"] for n in range(6)) == 12
    assert not any(t.startswith("/two") for t in a.seen) and "/" not in a.seen  # unprobed
    row = {r["domain"]: r for r in body["domains"]}["multi.test"]
    assert [r["origin"] for r in row["origins"]] == [b.url]


@pytest.mark.slow
async def test_readyz_asks_with_the_health_checks_method(
    tmp_path: Path, origin: Origin, client: aiohttp.ClientSession, servers: list[Killable]
) -> None:
    """Issue 34 §4: ``method = "HEAD"`` is the method of /readyz's probes too, not only of
    the edge's (the edge probes once at its start, then not for an hour)."""
    a = servers[0]
    extra = multi([a.url], []) + (
        '[domains.health_check]\npath = "/healthz"\nmethod = "HEAD"\ninterval = "1h"\n'
    )
    node = await Node.start(write_config(tmp_path, origin.url, extra=extra))
    try:
        before = a.health_methods.copy()
        status, body = await readyz(client, node)
    finally:
        await node.kill()
    assert status == 200 and body["ready"], body
    assert sum((a.health_methods - before).values()) >= 1  # /readyz's probe
    assert set(a.health_methods) == {"HEAD"}
