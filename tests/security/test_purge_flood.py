"""Issue 24 §2: a token for one domain must not make the edge hold purges without a bound.
Decision 0037.

Against ``cdn-proxy serve`` in a child process and a real origin: the repro of the issue
(``POST /api/v1/cdn/purge`` with a token scoped to a.test and 256 distinct 4,000-character
paths, repeated) must leave the purge state within ``cache.purge_state_max_bytes`` as
/metrics reports it, fold a.test's state only (b.test's cached entry is still a hit), and
keep the process's resident memory near that bound rather than a purge body per purge.
With two edge workers the purges reach each through the fleet log (decision 0026), each
folds its own state within its half of the budget, and /metrics sums their reports."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import aiohttp
import pytest

from tests.conftest import Origin
from tests.nodes import WORKER_COUNTS, Node, cli, start, write_config

MIB = 1024 * 1024
BUDGET = 4 * MIB
ROUNDS = 32  # 32 purge bodies of 1 MB each: eight times the budget
PATH_CHARS = 4000
DOMAINS = """
[[domains]]
name = "a.test"
origin = "{origin}"
[[domains]]
name = "b.test"
origin = "{origin}"
"""


def flood_body(round_: int) -> dict[str, object]:
    """The issue's purge: 256 distinct paths of 4,000 characters."""
    urls = []
    for i in range(256):
        head = f"/r{round_}/p{i}/"
        urls.append(head + "x" * (PATH_CHARS - len(head)))
    return {"domain": "a.test", "urls": urls}


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert match is not None, f"{name} is not in /metrics"
    return float(match.group(1))


def rss(node: Node) -> int:
    """The resident memory of the node and its edge workers."""
    total = 0
    for pid in (node.process.pid, *node.worker_pids()):
        status = Path(f"/proc/{pid}/status").read_text()
        match = re.search(r"^VmRSS:\s+(\d+) kB$", status, re.MULTILINE)
        assert match is not None
        total += int(match.group(1)) * 1024
    return total


async def folded_metrics(client: aiohttp.ClientSession, node: Node) -> str:
    """/metrics once the edge processes report having folded (workers report every
    fleet.renew; one process: at once)."""
    async with asyncio.timeout(20):
        while True:
            async with client.get(node.api + "/metrics") as response:
                text = await response.text()
            if metric(text, 'cdn_proxy_purge_state_folded_total{fold="forgotten"}') > 0:
                return text
            await asyncio.sleep(0.1)  # polling another process's report, not a sync


async def node_with_budget(tmp_path: Path, origin: Origin, nodes: list[Node], workers: int) -> Node:
    config = write_config(
        tmp_path, origin.url, workers=workers, extra=DOMAINS.format(origin=origin.url)
    )
    text = config.read_text(encoding="utf-8").replace(
        'max_bytes = "8MiB"', f'max_bytes = "8MiB"\npurge_state_max_bytes = {BUDGET}'
    )
    config.write_text(text, encoding="utf-8")
    return await start(nodes, config)


@pytest.mark.slow
@pytest.mark.parametrize(
    "workers",
    WORKER_COUNTS,
)
async def test_a_flood_of_one_domains_purges_stays_within_the_purge_state_budget(
    tmp_path: Path, origin: Origin, nodes: list[Node], workers: int
) -> None:
    origin.reply("/kept", body=b"kept", headers={"Cache-Control": "max-age=600"})
    node = await node_with_budget(tmp_path, origin, nodes, workers)
    status, token, err = await cli(
        "token", "create", "flood", "--domain", "a.test", "--config", str(tmp_path / "proxy.toml")
    )
    assert status == 0, err
    auth = {"Authorization": f"Bearer {token.strip()}"}
    # One connection each way: b.test's two requests reach the same edge process.
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as client:
        for _ in range(2):  # b.test's entry: a miss, then a hit
            async with client.get(node.edge + "/kept", headers={"Host": "b.test"}) as response:
                assert response.status == 200
                assert await response.read() == b"kept"
        assert origin.count("/kept") == 1
        async with client.post(
            node.api + "/api/v1/cdn/purge", json=flood_body(0), headers=auth
        ) as response:
            assert response.status == 200, await response.text()
        before = rss(node)
        for round_ in range(1, ROUNDS):
            async with client.post(
                node.api + "/api/v1/cdn/purge", json=flood_body(round_), headers=auth
            ) as response:
                assert response.status == 200, await response.text()
        grown = rss(node) - before
        metrics = await folded_metrics(client, node)
        async with client.get(node.edge + "/kept", headers={"Host": "b.test"}) as response:
            assert response.status == 200
            assert await response.read() == b"kept"
    assert origin.count("/kept") == 1  # b.test's entry was not touched: still a hit
    assert metric(metrics, "cdn_proxy_purge_state_max_bytes") == BUDGET
    held = metric(metrics, "cdn_proxy_purge_state_bytes")
    assert 0 < held <= BUDGET
    assert metric(metrics, 'cdn_proxy_purge_state_folded_total{fold="forgotten"}') > 0
    assert metric(metrics, 'cdn_proxy_purge_state_folded_total{fold="cleared"}') == 0
    # Without the budget every purge body stays in every edge process (about 1.1 MB each:
    # 35 MiB here with one process on main).
    assert grown < 2 * BUDGET + 8 * MIB, f"RSS grew by {grown / MIB:.1f} MiB"
