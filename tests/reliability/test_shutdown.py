"""Issue 13, failure 7a: SIGTERM with ``shutdown_timeout = 3`` took 6.08 s.

``edge.shutdown_timeout`` bounds the whole shutdown: a real ``cdn-proxy serve`` (one process,
and a node with two edge workers) with a request that never finishes (an origin that never
answers) exits 0 within shutdown_timeout and a small margin after SIGTERM.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest
from aiohttp import web

from tests.conftest import Origin
from tests.nodes import WORKER_COUNTS
from tests.reliability.connections_support import HOST, config_text, served

SHUTDOWN_TIMEOUT = 3.0
MARGIN = 1.0


@pytest.mark.slow
@pytest.mark.parametrize(
    "workers",
    WORKER_COUNTS,
)
async def test_sigterm_with_a_request_that_never_ends_exits_within_the_timeout(
    tmp_path: Path, origin: Origin, workers: int
) -> None:
    arrived = asyncio.Event()
    never = asyncio.Event()

    async def stuck(request: web.Request) -> web.StreamResponse:
        arrived.set()
        await never.wait()  # the origin never answers
        raise AssertionError("unreachable")

    origin.route("/stuck", stuck)
    text = config_text(origin.url, workers=workers, edge=f"shutdown_timeout = {SHUTDOWN_TIMEOUT}\n")
    async with served(tmp_path, text) as proxy:
        host, port = proxy.edge_address
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(f"GET /stuck HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
        async with asyncio.timeout(10):
            await arrived.wait()
        # An idle keep-alive connection as well: it must not hold the shutdown either.
        idle_reader, idle_writer = await asyncio.open_connection(host, port)
        started = time.monotonic()
        proxy.process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(SHUTDOWN_TIMEOUT + 10):
            status = await proxy.process.wait()
        took = time.monotonic() - started
        assert status == 0
        assert took <= SHUTDOWN_TIMEOUT + MARGIN, f"shutdown took {took:.2f} s"
        # The stuck client was cut off, not left hanging.
        async with asyncio.timeout(1):
            await reader.read()
            await idle_reader.read()
        writer.close()
        idle_writer.close()
        assert "Traceback" not in proxy.log_text()
