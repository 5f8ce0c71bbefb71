"""Issue 24, failure 3: buffered request bodies had no overall cap, and one byte a minute kept
a buffer for ever (decision 0032).

Against a real ``cdn-proxy serve`` child and a raw origin that records what it received:
bodies being buffered never hold more than ``edge.request_buffer_total_bytes`` (read from
``cdn_proxy_request_buffer_bytes`` on /metrics), the ones past it are streamed to the origin,
and a body that keeps arriving, but slower than ``edge.body_min_rate``, is cut off with 408
within its window, though every byte comes well within ``body_timeout``.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.reliability.bodies_support import (
    RawConnection,
    connect,
    metric,
    raw_origin,
    request_head,
)
from tests.reliability.connections_support import config_text, served

KIB = 1024
BUDGET = 200 * KIB
BUFFER = 100 * KIB
SENT = 80 * KIB  # of each stalled body, whose Content-Length is BUFFER: all of it is buffered
HELD = "cdn_proxy_request_buffer_bytes"


async def until_metric(api: str, name: str, value: float) -> None:
    """Poll the child's figure (a state in another process), bounded: 5 s."""
    seen = None
    for _ in range(100):
        seen = await metric(api, name)
        if seen == value:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} stayed {seen}, never {value}")


async def stalled_body(edge: str) -> RawConnection:
    """A POST whose body is announced as BUFFER bytes, of which SENT come, then nothing."""
    connection = await connect(edge)
    await connection.send(request_head("POST", "/upload", length=BUFFER) + b"x" * SENT)
    return connection


@pytest.mark.slow
async def test_buffered_bodies_never_hold_more_than_the_budget(tmp_path: Path) -> None:
    """Two stalled bodies are buffered whole (160 KiB); the third takes the last 40 KiB and
    streams the rest; the fourth finds the budget spent and streams from its first byte: the
    origin sees those two arrive, never the first two. An honest client's small POST is
    streamed too, and answered. When the stalled clients go, the budget is free again."""
    edge = (
        f"request_buffer_total_bytes = {BUDGET}\nrequest_buffer_bytes = {BUFFER}\n"
        "header_timeout = 30\n"
    )
    async with (
        raw_origin() as origin,
        served(tmp_path, config_text(origin.url, edge=edge)) as proxy,
    ):
        assert await metric(proxy.api, "cdn_proxy_request_buffer_max_bytes") == BUDGET
        stalled = [await stalled_body(proxy.edge)]
        await until_metric(proxy.api, HELD, SENT)
        stalled.append(await stalled_body(proxy.edge))
        await until_metric(proxy.api, HELD, 2 * SENT)
        stalled.append(await stalled_body(proxy.edge))
        await origin.until(lambda: origin.arrived == 1)  # streamed once the budget ran out
        assert await metric(proxy.api, HELD) == BUDGET
        stalled.append(await stalled_body(proxy.edge))
        await origin.until(lambda: origin.arrived == 2)
        assert await metric(proxy.api, HELD) == BUDGET  # never more
        assert await metric(proxy.api, "cdn_proxy_request_bodies_over_budget_total") == 2

        honest = await connect(proxy.edge)
        await honest.send(request_head("POST", "/form", length=5) + b"hello")
        status, _, body = await honest.answer()
        assert (status, body) == (200, b"ok /form")
        assert [r.body for r in origin.received if r.target == "/form"] == [b"hello"]
        honest.close()
        assert await metric(proxy.api, HELD) == BUDGET

        for connection in stalled:
            connection.close()
        await until_metric(proxy.api, HELD, 0)
        honest = await connect(proxy.edge)
        await honest.send(request_head("POST", "/after", length=5) + b"again")
        assert (await honest.answer())[0] == 200
        honest.close()
    assert "Traceback" not in proxy.log_text()


@pytest.mark.slow
async def test_a_trickling_body_is_cut_off_at_the_minimum_rate(tmp_path: Path) -> None:
    """body_timeout = 2 and body_min_rate = 1000: each 2 s of a body must bring 2,000 bytes.
    The issue's trickle, scaled down: a head announcing 1 MiB, 10 bytes, then one byte every
    0.5 s, each well within body_timeout. It is answered 408 and closed at the end of its
    first window (2 s), and the origin is never asked. Before, it was read for as long as
    the bytes kept coming."""
    edge = "body_timeout = 2\nbody_min_rate = 1000\n"
    async with (
        raw_origin() as origin,
        served(tmp_path, config_text(origin.url, edge=edge)) as proxy,
    ):
        connection = await connect(proxy.edge)
        started = time.monotonic()
        await connection.send(request_head("POST", "/upload", length=1024**2) + b"x" * 10)

        async def trickle() -> None:
            for _ in range(16):  # 8 s: the client's pace, the subject of the test
                await asyncio.sleep(0.5)
                try:
                    await connection.send(b"x")
                except ConnectionError:
                    return

        trickling = asyncio.create_task(trickle())
        try:
            status, headers, body = await connection.answer(seconds=6)
            elapsed = time.monotonic() - started
            assert status == 408, (status, body)
            assert body == b"408 Request Timeout: the request body stopped arriving\n"
            assert headers.get("connection") == "close"
            assert 1.5 <= elapsed <= 4.0, elapsed
            assert await connection.closed(seconds=2)
        finally:
            trickling.cancel()
            connection.close()
        assert origin.arrived == 0
        assert await metric(proxy.api, "cdn_proxy_request_bodies_too_slow_total") == 1
        assert await metric(proxy.api, "cdn_proxy_request_body_timeouts_total") == 1
        assert await metric(proxy.api, HELD) == 0


@pytest.mark.slow
async def test_a_slow_but_steady_body_above_the_rate_is_forwarded(tmp_path: Path) -> None:
    """The same limits, a body of 6,000 bytes sent 1,500 bytes every 0.5 s (3,000 bytes/s):
    above the rate in every window, it reaches the origin whole."""
    edge = "body_timeout = 2\nbody_min_rate = 1000\n"
    async with (
        raw_origin() as origin,
        served(tmp_path, config_text(origin.url, edge=edge)) as proxy,
    ):
        connection = await connect(proxy.edge)
        await connection.send(request_head("POST", "/steady", length=6000))
        for index in range(4):
            await asyncio.sleep(0.5)  # the client's pace, the subject of the test
            await connection.send(bytes([65 + index]) * 1500)
        status, _, body = await connection.answer()
        assert (status, body) == (200, b"ok /steady")
        assert [r.body for r in origin.received] == [
            b"A" * 1500 + b"B" * 1500 + b"C" * 1500 + b"D" * 1500
        ]
        connection.close()


@pytest.mark.slow
async def test_each_worker_takes_its_share_of_the_budget(tmp_path: Path) -> None:
    """Two workers: each enforces half the node's budget and of its per-client limit, and
    /metrics (the workers' reports, summed) shows the node's totals."""
    edge = "request_buffer_total_bytes = 300000\nmax_connections_per_client = 100\n"
    async with (
        raw_origin() as origin,
        served(tmp_path, config_text(origin.url, workers=2, edge=edge)) as proxy,
    ):
        name = "cdn_proxy_request_buffer_max_bytes"
        for _ in range(100):  # the workers' reports reach the control process in turn
            if await metric(proxy.api, name) == 300000:
                break
            await asyncio.sleep(0.05)
        assert await metric(proxy.api, name) == 300000
        assert await metric(proxy.api, "cdn_proxy_connections_per_client_max") == 100
