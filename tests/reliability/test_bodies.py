"""Issue 13, failure 2: request bodies that stall must not take the origin's connections.

Each test runs ``cdn-proxy serve`` in a child process in front of a real origin
(bodies_support.RawOrigin) and talks to it over raw sockets, so a body can stop mid-way.
Decision 0015 says what the edge does with request bodies.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.nodes import Node, write_config
from tests.reliability.bodies_support import (
    HOST,
    RawOrigin,
    chunked,
    connect,
    metric,
    raw_origin,
    request_head,
)


@pytest.fixture
async def origin() -> AsyncIterator[RawOrigin]:
    async with raw_origin() as started:
        yield started


async def start(tmp_path: Path, origin: RawOrigin, edge: str = "", domain: str = "") -> Node:
    """A node whose [edge] and example.com's [[domains]] table get the extra keys given."""
    config = write_config(tmp_path, origin.url, extra=domain)
    if edge:
        text = config.read_text().replace("[edge]\n", "[edge]\n" + edge + "\n", 1)
        config.write_text(text)
    return await Node.start(config)


async def get(node: Node, path: str, seconds: float = 5.0) -> tuple[int, bytes]:
    async with (
        asyncio.timeout(seconds),
        aiohttp.ClientSession() as client,
        client.get(node.edge + path, headers={"Host": HOST}) as response,
    ):
        return response.status, await response.read()


@pytest.mark.slow
async def test_stalled_bodies_do_not_block_the_domains_misses(
    tmp_path: Path, origin: RawOrigin
) -> None:
    """260 POSTs that stop after 10 bytes of their body took all 256 origin connections of
    the domain, and every miss after them hung. With the default config, a miss after them
    is answered at once, and the origin never saw the stalled POSTs (their bodies are
    buffered before the origin is asked)."""
    node = await start(tmp_path, origin)
    stalled = []
    try:
        for index in range(260):
            connection = await connect(node.edge)
            await connection.send(request_head("POST", f"/upload/{index}", length=1000))
            await connection.send(b"x" * 10)
            stalled.append(connection)
        status, body = await get(node, "/page")
        assert (status, body) == (200, b"ok /page")
        assert [r.target for r in origin.received] == ["/page"]
        assert origin.arrived == 1
    finally:
        for connection in stalled:
            connection.close()
        await node.kill()


@pytest.mark.slow
async def test_a_stalled_body_is_answered_408_and_closed(tmp_path: Path, origin: RawOrigin) -> None:
    """A body that stops arriving for edge.body_timeout seconds gets 408 and a close; the
    origin is never asked, and the timeout is counted."""
    node = await start(tmp_path, origin, edge="body_timeout = 0.5")
    try:
        connection = await connect(node.edge)
        await connection.send(request_head("POST", "/upload", length=1000) + b"x" * 10)
        status, headers, body = await connection.answer()
        assert status == 408
        assert b"request body stopped arriving" in body
        assert headers.get("connection") == "close"
        assert await connection.closed()
        connection.close()
        assert origin.arrived == 0
        assert await metric(node.api, "cdn_proxy_request_body_timeouts_total") == 1
    finally:
        await node.kill()


@pytest.mark.slow
async def test_waiting_for_an_origin_connection_is_bounded(
    tmp_path: Path, origin: RawOrigin
) -> None:
    """With the domain's origin connections all in use, a request waits at most
    origin_queue_timeout for one, then gets 503 with a clear message, counted; once one is
    free, requests are answered again."""
    release = asyncio.Event()

    async def slow(request: web.BaseRequest) -> web.StreamResponse:
        await release.wait()
        return web.Response(text="slow", headers={"Cache-Control": "no-store"})

    origin.routes["/slow/1"] = origin.routes["/slow/2"] = slow
    node = await start(
        tmp_path, origin, domain="origin_connections = 2\norigin_queue_timeout = 0.5"
    )
    try:
        held = [asyncio.create_task(get(node, f"/slow/{n}")) for n in (1, 2)]
        await origin.until(lambda: origin.arrived == 2)
        async with asyncio.timeout(3):  # 0.5 s of queueing, and the rest for a loaded machine
            status, body = await get(node, "/page")
        assert status == 503
        assert b"too many requests are waiting for the origin" in body
        assert origin.arrived == 2
        assert await metric(node.api, "cdn_proxy_origin_busy_total") == 1
        release.set()
        assert [await task for task in held] == [(200, b"slow"), (200, b"slow")]
        assert await get(node, "/page") == (200, b"ok /page")
    finally:
        release.set()
        await node.kill()


@pytest.mark.slow
@pytest.mark.parametrize("framing", ["content-length", "chunked"])
async def test_a_body_longer_than_the_buffer_streams_through(
    tmp_path: Path, origin: RawOrigin, framing: str
) -> None:
    """A body past edge.request_buffer_bytes is streamed to the origin, byte for byte."""
    node = await start(tmp_path, origin, edge='request_buffer_bytes = "1KiB"')
    payload = bytes(range(256)) * 400  # 100 KiB
    try:
        connection = await connect(node.edge)
        if framing == "chunked":
            head = request_head("PUT", "/big", {"Transfer-Encoding": "chunked"})
            await connection.send(head + chunked(payload))
        else:
            await connection.send(request_head("PUT", "/big", length=len(payload)) + payload)
        status, _, body = await connection.answer()
        connection.close()
        assert (status, body) == (200, b"ok /big")
        [seen] = origin.received
        assert seen.body == payload
        assert seen.complete
    finally:
        await node.kill()


@pytest.mark.slow
async def test_a_stalled_streamed_body_frees_its_origin_connection(
    tmp_path: Path, origin: RawOrigin
) -> None:
    """A streamed body that stops arriving is cut off after edge.body_timeout: the client gets
    408 and a close, the origin sees the request end early, and the connection is free."""
    node = await start(
        tmp_path,
        origin,
        edge='body_timeout = 0.5\nrequest_buffer_bytes = "1KiB"',
        domain="origin_connections = 1\norigin_queue_timeout = 0.5",
    )
    try:
        connection = await connect(node.edge)
        await connection.send(request_head("POST", "/upload", length=100_000) + b"x" * 5000)
        status, _, _ = await connection.answer()
        assert status == 408
        assert await connection.closed()
        connection.close()
        await origin.until(lambda: len(origin.received) == 1)
        assert not origin.received[0].complete
        assert await get(node, "/page") == (200, b"ok /page")
        assert await metric(node.api, "cdn_proxy_request_body_timeouts_total") == 1
        assert await metric(node.api, "cdn_proxy_origin_errors_total") == 0
    finally:
        await node.kill()


@pytest.mark.slow
async def test_streamed_uploads_keep_to_their_share_of_the_connections(
    tmp_path: Path, origin: RawOrigin
) -> None:
    """Streamed uploads may hold only a quarter of the domain's origin connections: past
    that, another gets 503 at once, and misses still find a connection."""
    node = await start(
        tmp_path,
        origin,
        edge='request_buffer_bytes = "1KiB"',
        domain="origin_connections = 4\norigin_queue_timeout = 0.5",
    )
    first = await connect(node.edge)
    try:
        await first.send(request_head("POST", "/upload/1", length=100_000) + b"x" * 5000)
        await origin.until(lambda: origin.arrived == 1)
        second = await connect(node.edge)
        await second.send(request_head("POST", "/upload/2", length=100_000) + b"x" * 5000)
        status, headers, body = await second.answer()
        assert status == 503
        assert b"uploads" in body
        assert headers.get("retry-after") == "1"
        assert headers.get("connection") == "close"
        second.close()
        for n in range(3):
            assert await get(node, f"/page/{n}") == (200, f"ok /page/{n}".encode())
        assert origin.arrived == 4
    finally:
        first.close()
        await node.kill()


@pytest.mark.slow
async def test_expect_continue_is_answered_by_the_edge(tmp_path: Path, origin: RawOrigin) -> None:
    """The edge reads the body before asking the origin, so it answers Expect: 100-continue
    itself (a client would otherwise wait for a 100 that never comes), and the origin gets
    the body without the Expect."""
    node = await start(tmp_path, origin)
    connection = await connect(node.edge)
    try:
        head = request_head("POST", "/form", {"Expect": "100-continue"}, length=5)
        await connection.send(head)
        async with asyncio.timeout(5):
            assert (
                await connection.reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
            )
        await connection.send(b"hello")
        assert (await connection.answer())[0] == 200
        [seen] = origin.received
        assert seen.body == b"hello"
        assert seen.header("Expect") is None
    finally:
        connection.close()
        await node.kill()
