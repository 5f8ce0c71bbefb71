"""The hit lane (decision 0050) on a node of two workers with the shared tier: the node's
/metrics sums the workers' lane answers, and a clear answered 200 holds through the lane: no
later request, on any worker, gets the body stored before it. (A node's workers are fleet
members: their store is fenced, so their hits from disk are the full path's, lane or not;
the memory copy each keeps is the lane's.)

Real processes: ``cdn-proxy serve`` with two workers and its embedded Valkey, a real origin
whose body changes with every request it answers, raw keep-alive connections (the kernel
picks a worker for each).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiohttp import web

from tests.conftest import Origin
from tests.nodes import Node
from tests.test_shared_tier import post, start, stop, tiered_config, token
from tests.test_worker_figures import plain, polled

pytestmark = pytest.mark.slow  # nodes of real processes, restarted

GET = b"GET /p/x HTTP/1.1\r\nHost: example.com\r\n\r\n"
CONNECTIONS = 12


def versioned(origin: Origin) -> None:
    """/p/x, cacheable, its body the number of times the origin has answered it."""
    answered = 0

    async def handler(request: web.Request) -> web.StreamResponse:
        nonlocal answered
        answered += 1
        return web.Response(text=f"version {answered}", headers={"Cache-Control": "max-age=600"})

    origin.route("/p/x", handler)


async def fetch(node: Node, count: int = CONNECTIONS) -> list[tuple[str, str]]:
    """``count`` GETs of /p/x, each alone on a keep-alive connection: Cache-Status, body."""
    host, _, port = node.edge.removeprefix("http://").rpartition(":")
    answers = []
    for _ in range(count):
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            async with asyncio.timeout(5):  # a bound
                writer.write(GET)
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
                body = await reader.readexactly(length)
        finally:
            writer.close()
        status = head.split(b"Cache-Status: ")[1].split(b"\r\n")[0].decode()
        answers.append((status, body.decode()))
    return answers


async def test_disk_hits_take_the_lane_and_a_clear_holds_through_it(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    versioned(origin)
    config = tiered_config(tmp_path, origin, workers=2)
    secret = await token(tmp_path)
    node = await start(nodes, config)
    assert (await fetch(node, 1))[0][1] == "version 1"
    await stop(node)
    node = await start(nodes, config)  # memory tiers empty, the shared tier warm
    await polled(node, {plain("cdn_proxy_hit_lane_answers_total"): 0.0})
    answers = await fetch(node)
    assert {body for _, body in answers} == {"version 1"}
    assert all(status.startswith("cdn-proxy; hit") for status, _ in answers), answers
    # The memory hits are the lane's; each worker's first, from disk, the full path's.
    memory = sum(status == "cdn-proxy; hit" for status, _ in answers)
    assert memory >= CONNECTIONS - 2, answers
    await polled(node, {plain("cdn_proxy_hit_lane_answers_total"): float(memory)})
    assert await post(node, secret, "/api/v1/cdn/clear-cache", {"domain": "example.com"}) == 200
    after = await fetch(node)
    assert "version 1" not in {body for _, body in after}, after
    assert after[0] == ("cdn-proxy; fwd=uri-miss; stored", "version 2"), after
    assert {body for _, body in after} == {"version 2"}, after
    memory += sum(status == "cdn-proxy; hit" for status, _ in after)
    await polled(node, {plain("cdn_proxy_hit_lane_answers_total"): float(memory)})
