"""Stale content and failing origins, as an operator met them (issue 14 §8): collapsed requests
to a failing origin, a stale-while-revalidate hit on /metrics, a domain's stale_if_error; each
against a node run as ``cdn-proxy serve`` in a child process, or the edge on a real listener."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.conftest import EdgeFactory, Origin
from tests.edge.test_targeted import flaky
from tests.nodes import Node, write_config


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@contextlib.asynccontextmanager
async def silent_origin() -> AsyncIterator[str]:
    """An origin that accepts connections and never answers: every request times out."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


def closed_port() -> int:
    """A loopback port nothing listens on (connections to it are refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def metric(client: aiohttp.ClientSession, api: str, name: str) -> float:
    """The sum of the samples on /metrics whose line starts with ``name`` (a metric's name
    and, optionally, the start of its labels)."""
    prefix = name if "{" in name else name + "{"
    async with client.get(api + "/metrics") as response:
        text = await response.text()
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix)
    )


@pytest.mark.slow
@pytest.mark.parametrize("failure", ["timeout", "unreachable"])
async def test_collapsed_requests_to_a_failing_origin_log_and_count_each_attempt_once(
    tmp_path: Path, client: aiohttp.ClientSession, failure: str
) -> None:
    """Ten clients miss at once while the origin fails: one origin_errors_total per origin
    attempt, at most one warning per attempt (the flood filter, decision 0051, writes one
    line per kind per 10 s: attempts that fail within it are counted, not each written), and
    each client's 502/504 is one request with outcome error. Before, every collapsed waiter
    logged the leader's error again: 10 warnings for 1 counted error."""
    log = tmp_path / "node.log"
    async with contextlib.AsyncExitStack() as stack:
        if failure == "timeout":
            origin_url = await stack.enter_async_context(silent_origin())
        else:
            origin_url = f"http://127.0.0.1:{closed_port()}"
        config = write_config(tmp_path, origin_url, extra="read_timeout = 0.5")
        node = await Node.start(config, log=log)
        stack.push_async_callback(node.kill)

        async def get() -> int:
            async with client.get(node.edge + "/x", headers={"Host": "example.com"}) as r:
                await r.read()
                return r.status

        statuses = await asyncio.gather(*(get() for _ in range(10)))
        assert set(statuses) == {504 if failure == "timeout" else 502}
        errors = await metric(client, node.api, "cdn_proxy_origin_errors_total")
        failed = await metric(client, node.api, 'cdn_proxy_requests_total{cache_status="error"')
    warnings = [line for line in log.read_text().splitlines() if " WARNING proxy.edge " in line]
    assert 1 <= len(warnings) <= errors
    if failure == "timeout":
        assert errors == 1  # the ten were collapsed behind one origin request
        assert len(warnings) == 1
    assert failed == 10


@pytest.mark.slow
async def test_a_stale_while_revalidate_hit_is_one_request_on_metrics(
    tmp_path: Path, origin: Origin, client: aiohttp.ClientSession
) -> None:
    """requests_total of a served node: a fill (miss) then a stale-while-revalidate hit are
    one miss and one hit; the background revalidation is no request, and not "stale"."""
    revalidated = asyncio.Event()

    async def stale_at_once(request: web.Request) -> web.StreamResponse:
        if len(origin.seen) == 2:
            revalidated.set()
        headers = {"Cache-Control": "max-age=10, stale-while-revalidate=60", "Age": "30"}
        return web.Response(text="w", headers=headers)

    origin.route("/w", stale_at_once)
    node = await Node.start(write_config(tmp_path, origin.url))
    try:
        statuses = []
        for _ in range(2):
            async with client.get(node.edge + "/w", headers={"Host": "example.com"}) as r:
                statuses.append(r.headers["Cache-Status"])
        assert statuses[1] == 'cdn-proxy; hit; detail="stale-while-revalidate"'
        async with asyncio.timeout(5):
            await revalidated.wait()
        for outcome, count in [("hit", 1), ("miss", 1), ("stale", 0), ("error", 0)]:
            name = f'cdn_proxy_requests_total{{cache_status="{outcome}"'
            assert await metric(client, node.api, name) == count, outcome
    finally:
        await node.kill()


@pytest.mark.parametrize("status", [500, 502, 503, 504])
async def test_a_domains_stale_if_error_covers_the_origins_5xx(
    make_edge: EdgeFactory, origin: Origin, status: int
) -> None:
    """RFC 5861 §4: stale-if-error covers 500, 502, 503 and 504; the domain's stale_if_error
    (its default for responses without one) now does too, not only an unreachable origin."""
    edge = await make_edge(
        domains=[
            {"name": "example.com", "origin": origin.url, "read_timeout": 5, "stale_if_error": 60}
        ]
    )
    mode = flaky(origin, "/s", "max-age=10")
    await edge.get("/s")
    mode.append(str(status))
    edge.clock.advance(30)
    response, body = await edge.get("/s")
    assert (response.status, body) == (200, b"good")
    assert 'detail="stale-if-error"' in response.headers["Cache-Status"]
    edge.clock.advance(60)  # 80 s past expiry: beyond the window, the origin's answer
    response, body = await edge.get("/s")
    assert (response.status, body) == (status, b"origin error")


@pytest.mark.slow
async def test_a_domains_stale_if_error_leaves_other_statuses_alone(
    make_edge: EdgeFactory, origin: Origin
) -> None:
    """A 404 or a 501 is an answer, not a failure: it is passed on (RFC 5861 §4 lists only
    500, 502, 503, 504)."""
    edge = await make_edge(
        domains=[
            {"name": "example.com", "origin": origin.url, "read_timeout": 5, "stale_if_error": 60}
        ]
    )
    mode = flaky(origin, "/s", "max-age=10")
    await edge.get("/s")
    for status in (404, 501):
        mode.append(str(status))
        edge.clock.advance(30)
        response, body = await edge.get("/s")
        assert (response.status, body) == (status, b"origin error")
