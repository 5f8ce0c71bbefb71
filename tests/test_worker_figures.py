"""What a node's control process shows of its workers (issue 23 §7-8, issue 25 §2): hits by
tier, collapsed misses and the shared tier's faults, and each origin server's figures, summed
over ``workers = 2`` in /metrics and /readyz.

Real processes: a node (``cdn-proxy serve``) with two workers and its embedded Valkey, real
origins counting what they are asked, a real cache directory. Each worker reports with its
lease renewals and the control process reads the reports once a second, so the figures are
polled for (tests/polling.py).
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import Origin
from tests.nodes import Node, write_config
from tests.polling import until
from tests.test_shared_tier import DISK_HIT, get_fresh, serve, tiered_config

pytestmark = pytest.mark.slow  # nodes of real processes

SLOW = 0.5  # seconds the collapsing test's origin takes to answer
CLIENTS = 16  # concurrent misses: the chance that all reach one worker is 2**-15

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape(node: Node) -> Samples:
    """Every sample of the node's /metrics: (name, sorted labels) -> value."""
    async with aiohttp.ClientSession() as client, client.get(node.api + "/metrics") as response:
        assert response.status == 200
        text = await response.text()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def polled(
    node: Node, wanted: dict[tuple[str, tuple[tuple[str, str], ...]], float]
) -> Samples:
    """/metrics once it shows every sample of ``wanted`` with its value (reports come every
    0.5 s and are read every 1 s); fails with what it saw last."""
    seen: Samples = {}

    async def shows() -> bool:
        seen.clear()
        seen.update(await scrape(node))
        return all(seen.get(name) == value for name, value in wanted.items())

    try:
        await until(shows, within=15.0, every=0.2)
    except AssertionError:
        raise AssertionError(
            {name: (seen.get(name), value) for name, value in wanted.items()}
        ) from None
    return seen


def tier(name: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return "cdn_proxy_tier_hits_total", (("tier", name),)


def plain(name: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, ()


async def test_metrics_sum_both_workers_hits_by_tier(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    targets = [f"/t{i}" for i in range(8)]
    serve(origin, *targets)
    node = await Node.start(tiered_config(tmp_path, origin, workers=2))
    nodes.append(node)
    statuses = [(await get_fresh(node, t))[1] for t in targets for _ in range(6)]
    assert {t: origin.count(t) for t in targets} == dict.fromkeys(targets, 1)
    disk = statuses.count(DISK_HIT)
    hits = sum(1 for s in statuses if s.startswith("cdn-proxy; hit"))
    assert disk >= 1 and hits == len(statuses) - len(targets), statuses
    # The worker that did not fill an object answered it once from the shared tier: every
    # such hit is counted as a disk hit, every other hit as a memory hit, both workers summed.
    seen = await polled(
        node,
        {
            tier("disk"): float(disk),
            tier("memory"): float(hits - disk),
            plain("cdn_proxy_shared_tier_entries"): float(len(targets)),
            plain("cdn_proxy_shared_tier_collapsed_total"): 0.0,
        },
    )
    assert seen[plain("cdn_proxy_shared_tier_write_errors_total")] == 0.0
    assert seen[plain("cdn_proxy_shared_tier_degraded")] == 0.0


async def test_metrics_count_misses_collapsed_across_workers(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    async def slow(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(SLOW)  # the origin's pace, not a synchronisation
        return web.Response(text="the one body", headers={"Cache-Control": "max-age=600"})

    origin.route("/slow", slow)
    node = await Node.start(tiered_config(tmp_path, origin, workers=2))
    nodes.append(node)
    answers = await asyncio.gather(*(get_fresh(node, "/slow") for _ in range(CLIENTS)))
    assert origin.count("/slow") == 1, answers
    across = [
        cs for _, cs, _ in answers if cs == 'cdn-proxy; fwd=uri-miss; collapsed; detail="disk"'
    ]
    assert across, answers  # the other worker waited on the marker
    # Each of those is a miss that was served the other worker's fill: not a hit of any tier.
    await polled(
        node,
        {
            plain("cdn_proxy_shared_tier_collapsed_total"): float(len(across)),
            tier("disk"): 0.0,
            tier("memory"): 0.0,
        },
    )


async def test_a_workers_write_errors_reach_metrics_and_readyz(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    serve(origin, "/before", "/after")
    node = await Node.start(tiered_config(tmp_path, origin, workers=2))
    nodes.append(node)
    assert (await get_fresh(node, "/before"))[0] == 200
    shutil.rmtree(tmp_path / "cache")
    for _ in range(6):  # a fill on each worker meets the deleted directory: no 5xx
        assert (await get_fresh(node, "/after"))[0] == 200
    await polled(node, {plain("cdn_proxy_shared_tier_degraded"): 1.0})
    ready: dict[str, Any] = {}

    async def workers_say_so() -> bool:
        async with aiohttp.ClientSession() as client, client.get(node.api + "/readyz") as answer:
            assert answer.status == 200  # a warning: the edge answers from memory and origin
            ready.update(json.loads(await answer.text()))
        # The workers' own faults, which only their reports carry, join the node's own.
        return "worker " in str(ready["disk"]["degraded"])

    await until(workers_say_so, within=15.0, every=0.2)
    assert ready["disk"]["ok"] is False, ready
    assert ready["warnings"][0].startswith("shared tier degraded: "), ready
    assert ready["disk"]["stopped"] is True, ready


@pytest.fixture
async def second_origin(aiohttp_server: Callable[..., Awaitable[TestServer]]) -> Origin:
    state = Origin()
    app = web.Application()
    app.router.add_route("*", r"/{tail:[\s\S]*}", state.handle)
    server = await aiohttp_server(app)
    state.url = str(server.make_url("")).rstrip("/")
    return state


async def test_origin_server_figures_are_summed_over_the_workers(
    tmp_path: Path, origin: Origin, second_origin: Origin, nodes: list[Node]
) -> None:
    """Issue 25 §2 with workers: each server's requests in /metrics and /readyz are what it
    was asked, whichever worker asked it; a server refusing connections is down."""
    for each in (origin, second_origin):
        each.default = _uncacheable
    dead = "http://127.0.0.1:9"  # the discard port: nothing listens, the connect is refused
    config = write_config(tmp_path, origin.url, workers=2, extra="")
    text = config.read_text().replace(
        f'origin = "{origin.url}"',
        f'origins = ["{origin.url}", "{second_origin.url}", "{dead}"]',
    )
    config.write_text(text)
    node = await Node.start(config)
    nodes.append(node)
    for n in range(30):
        status, _, _ = await get_fresh(node, f"/p{n}")
        assert status == 200
    asked = {origin.url: len(origin.seen), second_origin.url: len(second_origin.seen)}
    assert sum(asked.values()) == 30 and all(asked.values()), asked

    def key(name: str, url: str) -> tuple[str, tuple[tuple[str, str], ...]]:
        return name, (("domain", "example.com"), ("origin", url))

    wanted = {key("cdn_proxy_origin_server_requests_total", u): float(n) for u, n in asked.items()}
    wanted[key("cdn_proxy_origin_server_up", origin.url)] = 1.0
    wanted[key("cdn_proxy_origin_server_up", dead)] = 0.0
    seen = await polled(node, wanted)
    # The refused connections were retried on another server: counted as the dead one's
    # errors, in whichever worker met them.
    dead_requests = seen[key("cdn_proxy_origin_server_requests_total", dead)]
    assert seen[key("cdn_proxy_origin_server_errors_total", dead)] == dead_requests >= 1
    async with aiohttp.ClientSession() as client, client.get(node.api + "/readyz") as response:
        ready = json.loads(await response.text())
    (row,) = ready["domains"]
    edge = {server["origin"]: server.get("edge") for server in row["origins"]}
    assert edge[origin.url] is not None and edge[origin.url]["requests"] == asked[origin.url]
    assert edge[dead] is not None and edge[dead]["up"] is False, edge


async def _uncacheable(request: web.Request) -> web.StreamResponse:
    return web.Response(text="fresh", headers={"Cache-Control": "no-store"})
