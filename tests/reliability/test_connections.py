"""Issue 13, failure 1: idle and partial connections never closed, and enough of them made
every new edge and API connection fail, with nothing logged.

Against a real ``cdn-proxy serve`` child: connections that send nothing, or half a request
head, are closed after ``edge.header_timeout``; an idle keep-alive connection after
``edge.keepalive_timeout``; at ``edge.max_connections`` new edge connections are refused
(logged, counted) while the API listener keeps answering; the open-files limit is raised to
the hard limit at start.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
import pytest

from tests.conftest import Origin
from tests.polling import until
from tests.reliability.connections_support import (
    HOST,
    close_all,
    closed_by_server,
    config_text,
    first_bytes,
    metric,
    open_silent,
    served,
)

TIMEOUTS = "header_timeout = 1\nkeepalive_timeout = 2\n"
NO_PER_CLIENT = "max_connections_per_client = 0\n"


@pytest.mark.slow
async def test_a_silent_connection_is_closed_after_the_header_timeout(
    tmp_path: Path, origin: Origin
) -> None:
    async with served(tmp_path, config_text(origin.url, edge=TIMEOUTS, api=TIMEOUTS)) as proxy:
        for address in (proxy.edge_address, proxy.api_address):
            reader, writer = await asyncio.open_connection(*address)
            started = time.monotonic()
            assert await closed_by_server(reader, within=3) == b""
            assert time.monotonic() - started >= 0.9  # not at once: after the timeout
            writer.close()
        for listener in ("edge", "api"):
            name = f'cdn_proxy_header_timeouts_total{{listener="{listener}"}}'
            assert await metric(proxy, name) == 1


@pytest.mark.slow
@pytest.mark.parametrize(
    "partial",
    [
        b"GET / HTTP/1.1\r\nHost: exa",
        b"\r\n\r\n\r\n",  # empty lines only, never a request line (issue 13, 7d)
    ],
    ids=["half-a-head", "crlf-only"],
)
async def test_half_a_request_head_is_closed_after_the_header_timeout(
    tmp_path: Path, origin: Origin, partial: bytes
) -> None:
    async with served(tmp_path, config_text(origin.url, edge=TIMEOUTS, api=TIMEOUTS)) as proxy:
        for address in (proxy.edge_address, proxy.api_address):
            reader, writer = await asyncio.open_connection(*address)
            writer.write(partial)
            started = time.monotonic()
            received = await closed_by_server(reader, within=3)
            assert received.startswith(b"HTTP/1.1 408 "), received
            assert time.monotonic() - started >= 0.9
            writer.close()


@pytest.mark.slow
async def test_an_idle_keep_alive_connection_is_closed_after_the_keepalive_timeout(
    tmp_path: Path, origin: Origin
) -> None:
    origin.reply("/page", b"hello")
    async with served(tmp_path, config_text(origin.url, edge=TIMEOUTS, api=TIMEOUTS)) as proxy:
        reader, writer = await asyncio.open_connection(*proxy.edge_address)
        writer.write(b"GET /page HTTP/1.1\r\nHost: example.com\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ")
        assert await reader.readexactly(5) == b"hello"
        started = time.monotonic()
        # The keep-alive timeout, not the header timeout, bounds the idle time between requests.
        assert await closed_by_server(reader, within=4) == b""
        assert time.monotonic() - started >= 1.9
        writer.close()


@pytest.mark.slow
async def test_a_slow_but_steady_client_is_served_within_the_timeouts(
    tmp_path: Path, origin: Origin
) -> None:
    """Three requests on one connection, each head trickled in well inside header_timeout and
    each after a pause shorter than keepalive_timeout: all are answered."""
    origin.reply("/page", b"hello")
    async with served(tmp_path, config_text(origin.url, edge=TIMEOUTS, api=TIMEOUTS)) as proxy:
        reader, writer = await asyncio.open_connection(*proxy.edge_address)
        for _ in range(3):
            for piece in (b"GET /page HTTP/1.1\r\n", b"Host: example.com\r\n", b"\r\n"):
                writer.write(piece)
                await asyncio.sleep(0.2)  # the client's pace, the subject of the test
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 ")
            assert await reader.readexactly(5) == b"hello"
            await asyncio.sleep(1.0)  # idle, within keepalive_timeout
        writer.close()


@pytest.mark.slow
async def test_at_the_fd_limit_the_edge_refuses_and_the_api_still_answers(
    tmp_path: Path, origin: Origin
) -> None:
    """The issue's failure, with the defaults: a child limited to 256 open files, 300 silent
    connections to the edge. Before, every new edge and API connection failed and nothing
    was logged."""
    origin.reply("/page", b"hello", headers={"Cache-Control": "max-age=60"})
    # One address opens every connection here: the per-client limit (decision 0032) is off, so
    # that the listener's own limit is what they meet.
    text = config_text(origin.url, edge=NO_PER_CLIENT)
    async with served(tmp_path, text, nofile=(256, 256)) as proxy:
        silent = await open_silent(proxy.edge_address, 300)
        try:
            timeout = aiohttp.ClientTimeout(total=5)
            async with aiohttp.ClientSession(timeout=timeout) as client:
                async with client.get(proxy.api + "/healthz") as response:
                    assert response.status == 200
                # A new edge connection is answered at once (503), not left hanging.
                connector = aiohttp.TCPConnector(force_close=True)
                async with (
                    aiohttp.ClientSession(connector=connector, timeout=timeout) as edge,
                    edge.get(proxy.edge + "/page", headers={"Host": HOST}) as response,
                ):
                    assert response.status == 503
                    assert response.headers["Retry-After"]
            refused = await metric(
                proxy, 'cdn_proxy_connections_refused_total{listener="edge",reason="limit"}'
            )
            assert refused >= 1
            limit = await metric(proxy, 'cdn_proxy_connections_max{listener="edge"}')
            open_ = await metric(proxy, 'cdn_proxy_connections_open{listener="edge"}')
            assert 0 < open_ <= limit < 256
            refusals = [line for line in proxy.log_lines() if "connection limit" in line]
            assert 1 <= len(refusals) <= 2  # logged, and not once per connection
        finally:
            close_all(silent)

        # Once the server has seen the silent connections go, the edge serves again.
        async def none_open() -> bool:  # a state in another process: polled, bounded
            return not await metric(proxy, 'cdn_proxy_connections_open{listener="edge"}')

        await until(none_open, within=5.0, every=0.05)
        async with (
            aiohttp.ClientSession() as client,
            client.get(proxy.edge + "/page", headers={"Host": HOST}) as response,
        ):
            assert response.status == 200


@pytest.mark.slow
async def test_the_open_files_limit_is_raised_to_the_hard_limit(
    tmp_path: Path, origin: Origin
) -> None:
    async with served(tmp_path, config_text(origin.url), nofile=(256, 512)) as proxy:
        assert open_files(proxy.process.pid) == ("512", "512")
        assert any("open files limit raised from 256 to 512" in line for line in proxy.log_lines())


@pytest.mark.slow
async def test_each_worker_enforces_its_share_of_max_connections(
    tmp_path: Path, origin: Origin
) -> None:
    """max_connections = 20 over two workers: at most 10 each, so 20 silent connections spread
    by the kernel fill them, and at most 20 are held in all."""
    text = config_text(origin.url, workers=2, edge="max_connections = 20\n" + NO_PER_CLIENT)
    async with served(tmp_path, text) as proxy:
        silent = await open_silent(proxy.edge_address, 40)
        try:
            answers = await asyncio.gather(*(first_bytes(c, within=1.0) for c in silent))
            held = answers.count(b"")  # admitted: nothing sent, still open
            assert 10 <= held <= 20
            assert answers.count(b"HTTP/1.1 503") == 40 - held
        finally:
            close_all(silent)


def open_files(pid: int) -> tuple[str, str]:
    """The process's soft and hard open-files limits, as /proc shows them."""
    limits = Path(f"/proc/{pid}/limits").read_text()
    row = next(line for line in limits.splitlines() if line.startswith("Max open files"))
    soft, hard = row.split()[3:5]
    return soft, hard
