"""The budget of answers not yet sent, per connection and per client address (issue 32 §2,
decision 0051), against a real ``cdn-proxy serve``: one HTTP/2 connection could hold 128
streams x about 1 MiB of answers its client never reads, one client address that times its
connections.

- one zero-window HTTP/2 connection asking many large ``no-store`` objects holds at most its
  connection's budget (RSS measured on a node in a child process), the streams past it are
  answered 503, and /metrics shows the bytes held, the budgets and the refusals;
- one client's HTTP/1.1 connections and HTTP/2 streams together hold at most the client's
  budget;
- the send timeout's cuts are counted in /metrics, on both protocols.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest
from h2.settings import SettingCodes
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.large_objects import memory
from proxy.edge.answer_budget import STREAM_HELD
from proxy.process.service import running
from tests.conftest import Origin, make_config
from tests.edge.h2_support import RawH2
from tests.edge.test_answers_held import (
    ANSWER_BUFFER,
    KIB,
    MARGIN,
    MIB,
    asked,
    established,
    port_of,
    serve_large,
    settled,
    silent_clients,
)
from tests.nodes import Node, write_config
from tests.polling import until

# What the budget charges a streamed answer: the read-ahead and the sockets' buffers.
CHARGE = ANSWER_BUFFER + STREAM_HELD


async def samples(api: str) -> dict[str, float]:
    """/metrics's edge-listener samples, by name."""
    async with aiohttp.ClientSession() as client, client.get(api + "/metrics") as response:
        text = await response.text()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.labels.get("listener", "edge") == "edge" and len(sample.labels) <= 1
    }


async def zero_window(url: str) -> RawH2:
    client = await RawH2.open(url)
    client.h2.update_settings({SettingCodes.INITIAL_WINDOW_SIZE: 0})
    client.flush()
    await client.read_events()
    return client


async def statuses(client: RawH2, streams: list[int], within: float = 30.0) -> list[int]:
    """The status of each of ``streams``' answers, once every one has its head."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while any(not client.answers[s].status for s in streams) and loop.time() < deadline:
        await client.read_events(1)
    return [client.answers[s].status for s in streams]


@pytest.mark.slow
async def test_one_zero_window_connection_holds_at_most_its_budget(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    written = serve_large(origin)
    budget = 4 * MIB
    edge = f'h2c = true\nanswers_held_per_connection_bytes = "{budget}"'
    node = await Node.start(write_config(tmp_path, origin.url, edge=edge))
    nodes.append(node)
    idle = memory(node.process.pid)["VmRSS"]
    count = 96
    client = await zero_window(node.edge)
    streams = [client.request(f"/big?n={n}") for n in range(count)]
    # Each stream's answer: those past the budget refused once the first refusal has blocked
    # the connection, before the origin is asked (so the origin sees at most ``count``).
    seen = await statuses(client, streams)
    assert asked(origin) <= count
    await settled(written)
    peak = memory(node.process.pid)["VmHWM"]
    figures = await samples(node.api)
    await client.close()
    admitted = budget // CHARGE
    assert seen.count(200) == admitted, seen
    assert seen.count(503) == count - admitted, seen
    # Before: 96 streams x about 0.9 MiB (+86 MiB); now the budget and the 503s' noise.
    assert peak - idle < budget + MARGIN, (peak - idle) // KIB
    assert figures["cdn_proxy_answers_held_connection_max_bytes"] == budget
    assert figures["cdn_proxy_answers_refused_total"] == count - admitted
    assert 0 < figures["cdn_proxy_answers_held_bytes"] <= budget


async def test_one_client_holds_at_most_its_budget_over_both_protocols(
    tmp_path: Path, origin: Origin
) -> None:
    """Four HTTP/1.1 connections that never read and four zero-window HTTP/2 streams from one
    address, a client budget of five streamed answers: five are answered, three refused."""
    serve_large(origin)
    per_client = 5 * CHARGE + CHARGE // 2
    edge = {
        "listen": "127.0.0.1:0",
        "h2c": True,
        "answers_held_per_connection_bytes": 4 * CHARGE,
        "answers_held_per_client_bytes": per_client,
    }
    config = make_config(tmp_path, origin.url, edge=edge)
    async with running(config) as service:
        client = await zero_window(service.edge_url)
        streams = [client.request(f"/big?n=h2-{n}") for n in range(4)]
        await until(lambda: asked(origin) == 4, within=10, every=0.05)
        seen = await statuses(client, streams)
        with silent_clients(port_of(service.edge_url), 4, "/big"):
            await until(lambda: asked(origin) == 8, within=10, every=0.05)

            async def refused() -> bool:
                return (await samples(service.api_url))["cdn_proxy_answers_refused_total"] == 3

            await until(refused, within=10, every=0.1)
            figures = await samples(service.api_url)
        await client.close()
    assert seen == [200] * 4  # within the connection's budget (4 answers)
    assert figures["cdn_proxy_answers_held_client_max_bytes"] == per_client
    assert figures["cdn_proxy_answers_held_bytes"] == 5 * CHARGE


async def test_send_timeout_cuts_are_counted_on_both_protocols(
    tmp_path: Path, origin: Origin
) -> None:
    serve_large(origin)
    edge = {"listen": "127.0.0.1:0", "send_timeout": 0.5, "h2c": True}
    config = make_config(tmp_path, origin.url, edge=edge)
    async with running(config) as service:
        port = port_of(service.edge_url)
        with silent_clients(port, 2, "/big"):
            await until(lambda: established(port) == 2, every=0.05)
            await until(lambda: established(port) == 0, within=10, every=0.1)
        client = await zero_window(service.edge_url)
        stream = client.request("/big?n=h2")
        answer = client.answers[stream]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while answer.reset is None and loop.time() < deadline:
            await client.read_events(1)
        await client.close()

        async def counted() -> bool:
            return (await samples(service.api_url)).get("cdn_proxy_send_timeouts_total") == 3

        await until(counted, within=5, every=0.1)
