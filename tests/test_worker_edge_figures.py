"""A node's /metrics with workers shows its edge processes' budgets and origin counters
(issue 32, decision 0051): the fill budget and the compression queue summed over the workers
(they were the control process's own, none), and ``origin_errors_total``,
``origin_busy_total`` and ``request_body_timeouts_total``, which only the workers count, and
the answers' budget and send timeouts, through their connection figures.

A real node of two workers and its embedded Valkey; reports come with lease renewals and are
read once a second, so the figures are polled for.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest

from tests.conftest import Origin
from tests.nodes import Node, write_config
from tests.test_worker_figures import plain, polled

pytestmark = pytest.mark.slow  # nodes of real processes

MIB = 1 << 20
DEAD = "http://127.0.0.1:9"  # the discard port: nothing listens, the connect is refused


def labelled(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted(labels.items()))


async def body_stops(edge: str) -> None:
    """A POST whose body stops after 10 of its 1,000 bytes: 408 after body_timeout."""
    host, _, port = edge.split("://", 1)[1].rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        b"POST /upload HTTP/1.1\r\nHost: example.com\r\nContent-Length: 1000\r\n\r\n0123456789"
    )
    await writer.drain()
    status = await asyncio.wait_for(reader.readline(), 10)
    writer.close()
    assert status.startswith(b"HTTP/1.1 408"), status


async def test_node_metrics_carry_the_workers_budgets_and_origin_counters(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    extra = f'\n[[domains]]\nname = "dead.test"\norigin = "{DEAD}"\n'
    edge = 'body_timeout = 0.5\nfill_buffer_total_bytes = "8MiB"\ncompress_queue_bytes = "2MiB"'
    node = await Node.start(write_config(tmp_path, origin.url, workers=2, edge=edge, extra=extra))
    nodes.append(node)
    async with aiohttp.ClientSession() as client:
        for n in range(4):
            async with client.get(node.edge + f"/x{n}", headers={"Host": "dead.test"}) as answer:
                assert answer.status == 502
    for _ in range(2):
        await body_stops(node.edge)
    await polled(
        node,
        {
            plain("cdn_proxy_fill_buffer_max_bytes"): 16.0 * MIB,  # 8 MiB in each worker
            plain("cdn_proxy_compress_queue_max_bytes"): 4.0 * MIB,
            plain("cdn_proxy_fill_buffer_bytes"): 0.0,
            plain("cdn_proxy_fills_over_budget_total"): 0.0,
            plain("cdn_proxy_compress_refused_total"): 0.0,
            plain("cdn_proxy_hit_lane_answers_total"): 0.0,  # no hit yet (decision 0050)
            labelled("cdn_proxy_origin_errors_total", domain="dead.test", kind="unreachable"): 4.0,
            labelled("cdn_proxy_origin_errors_total", domain="example.com", kind="timeout"): 0.0,
            labelled("cdn_proxy_origin_busy_total", domain="example.com", reason="uploads"): 0.0,
            labelled("cdn_proxy_request_body_timeouts_total", domain="example.com"): 2.0,
            labelled("cdn_proxy_send_timeouts_total", listener="edge"): 0.0,
            # The per-connection budget is each worker's whole one; the per-client one, each
            # worker's share of the node's.
            labelled("cdn_proxy_answers_held_connection_max_bytes", listener="edge"): 16.0 * MIB,
            labelled("cdn_proxy_answers_held_client_max_bytes", listener="edge"): 64.0 * MIB,
        },
    )
