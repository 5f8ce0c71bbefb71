"""Request collapsing against a slow origin, through a real ``cdn-proxy serve`` process.

Issue 13, failure 4: collapsed waiters gave up after connect_timeout + read_timeout of total
time and each went to the origin, so 100 misses on a body that trickled for 15 s made 100
origin requests. Waiters now follow the leader while its response makes progress, and stop
waiting only when it makes none (decision 0004).

The node runs with connect_timeout = 0.5 s and read_timeout = 1 s (one test sets 5 s), so the
old patience was 1.5 s, and the origin's bodies take longer than that.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.conftest import Origin
from tests.nodes import Node, write_config

PIECE = b"x" * 1024
PIECES = 15  # one every 0.2 s: the body takes 3 s, twice the old patience
EVERY = 0.2
CLIENTS = 100
MAX_OBJECT = 64 * 1024


@pytest.fixture
async def node(
    request: pytest.FixtureRequest, tmp_path: Path, origin: Origin
) -> AsyncIterator[Node]:
    """The node, with connect_timeout = 0.5 s and read_timeout = 1 s unless the test asks for
    another read_timeout (``indirect`` parametrisation)."""
    read_timeout = getattr(request, "param", 1)
    extra = f"connect_timeout = 0.5\nread_timeout = {read_timeout}\n"
    config = write_config(tmp_path, origin.url, extra=extra)
    # A small max_object_bytes, so that "too large to share" is quick to reach.
    text = config.read_text(encoding="utf-8")
    config.write_text(
        text.replace('max_bytes = "8MiB"', f'max_bytes = "8MiB"\nmax_object_bytes = {MAX_OBJECT}'),
        encoding="utf-8",
    )
    started = await Node.start(config)
    yield started
    await started.kill()


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    # One connection per request: the requests must reach the edge at the same time.
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        yield session


async def get_all(
    client: aiohttp.ClientSession, url: str, count: int
) -> list[tuple[int, str, bytes]]:
    """``count`` concurrent GETs of ``url`` for example.com: status, Cache-Status, body each."""

    async def one() -> tuple[int, str, bytes]:
        async with client.get(url, headers={"Host": "example.com"}) as response:
            return response.status, response.headers.get("Cache-Status", ""), await response.read()

    return await asyncio.gather(*(one() for _ in range(count)))


async def trickle(request: web.Request, pieces: int, headers: dict[str, str]) -> web.StreamResponse:
    """Send the headers at once, then ``pieces`` small pieces of body, one every EVERY
    seconds; the caller ends the body (or does not)."""
    response = web.StreamResponse(headers=headers)
    await response.prepare(request)
    for _ in range(pieces):
        await asyncio.sleep(EVERY)  # the origin's pace, not synchronisation
        await response.write(PIECE)
    return response


@pytest.mark.slow
async def test_a_trickling_body_makes_one_origin_request(
    node: Node, origin: Origin, client: aiohttp.ClientSession
) -> None:
    async def slow(request: web.Request) -> web.StreamResponse:
        length = str(len(PIECE) * PIECES)
        headers = {"Cache-Control": "max-age=60", "Content-Length": length}
        response = await trickle(request, PIECES, headers)
        await response.write_eof()
        return response

    origin.route("/slow", slow)
    async with asyncio.timeout(20):
        results = await get_all(client, node.edge + "/slow", CLIENTS)
    assert origin.count("/slow") == 1
    assert [status for status, _, _ in results] == [200] * CLIENTS
    assert {body for _, _, body in results} == {PIECE * PIECES}
    statuses = [cache_status for _, cache_status, _ in results]
    assert statuses.count("cdn-proxy; fwd=uri-miss; stored") == 1
    # The others followed the leader (or, had one arrived after the body was stored, hit).
    assert set(statuses) <= {
        "cdn-proxy; fwd=uri-miss; stored",
        "cdn-proxy; fwd=uri-miss; collapsed",
        "cdn-proxy; hit",
    }
    assert "cdn-proxy; fwd=uri-miss; collapsed" in statuses


@pytest.mark.slow
async def test_a_stalled_origin_releases_the_waiters_with_the_leaders_error(
    node: Node, origin: Origin, client: aiohttp.ClientSession
) -> None:
    """The body arrives for 2 s, then stops: the leader times out read_timeout after the last
    byte, and its waiters, who followed it until then, share its 504 instead of each asking
    an origin that has stopped answering."""
    resumed = asyncio.Event()

    async def stalling(request: web.Request) -> web.StreamResponse:
        response = await trickle(request, 10, {"Cache-Control": "max-age=60"})
        await resumed.wait()  # the origin stops sending until the test has its answers
        return response

    origin.route("/stalls", stalling)
    started = time.monotonic()
    try:
        async with asyncio.timeout(20):
            results = await get_all(client, node.edge + "/stalls", 20)
    finally:
        resumed.set()
    elapsed = time.monotonic() - started
    assert origin.count("/stalls") == 1
    assert [status for status, _, _ in results] == [504] * 20
    # 2 s of body, then read_timeout (1 s) without a byte; the rest is slack for a busy machine.
    assert elapsed < 2 + 1 + 3


@pytest.mark.slow
@pytest.mark.parametrize("node", [5], indirect=True)
@pytest.mark.parametrize("framing", ["content-length", "chunked"])
async def test_waiters_are_released_once_the_body_is_known_too_large_to_share(
    node: Node, origin: Origin, client: aiohttp.ClientSession, framing: str
) -> None:
    """A body larger than max_object_bytes is streamed to its client and never stored, so
    its waiters must not follow it: they are released as soon as the leader knows (from
    Content-Length, or once max_object_bytes have arrived) and each asks the origin, while
    the first body is still trickling.

    read_timeout is 5 s here, so a waiter that stayed until the leader went quiet would reach
    the origin after 5.5 s, long after the 2 s this test allows."""
    clients = 20
    full = b"y" * (2 * MAX_OBJECT)
    others_came_while_streaming = False

    async def big(request: web.Request) -> web.StreamResponse:
        nonlocal others_came_while_streaming
        if origin.count("/big") > 1:
            return web.Response(body=full, headers={"Cache-Control": "max-age=60"})
        headers = {"Cache-Control": "max-age=60"}
        sent = 0
        if framing == "content-length":
            headers["Content-Length"] = str(len(full))
        else:
            sent = MAX_OBJECT + 1  # the leader learns the size only by reading past the limit
        response = web.StreamResponse(headers=headers)
        await response.prepare(request)
        await response.write(full[:sent])
        # Keep the body moving (so a waiter that follows progress would follow it) until
        # every waiter has come to the origin itself, for at most 2 s.
        for _ in range(10):
            if origin.count("/big") == clients:
                others_came_while_streaming = True
                break
            await asyncio.sleep(EVERY)  # the origin's pace, not synchronisation
            await response.write(full[sent : sent + len(PIECE)])
            sent += len(PIECE)
        await response.write(full[sent:])
        await response.write_eof()
        return response

    origin.route("/big", big)
    async with asyncio.timeout(20):
        results = await get_all(client, node.edge + "/big", clients)
    assert others_came_while_streaming
    assert origin.count("/big") == clients
    assert [status for status, _, _ in results] == [200] * clients
    assert all(body == full for _, _, body in results)
    assert {cache_status for _, cache_status, _ in results} == {
        'cdn-proxy; fwd=uri-miss; detail="too-large"'
    }
