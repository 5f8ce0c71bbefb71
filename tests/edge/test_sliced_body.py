"""A large stored body is handed to the socket a slice per turn of the loop (issue 32's HTTP/2
soak, decision 0057): one write of a whole 1 MiB body held the event loop for the length of
the kernel's copy, and four such answers a second doubled another client's hit p99.

- a 1 MiB hit written through a real aiohttp server: the loop turns while the body is
  being written (a task sees part of it written), the client gets it whole with its
  Content-Length, over HTTP/1.1 and through the edge over HTTP/2;
- a body of a slice or less is written at once, and keeps the fast path's lines.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from proxy.core.cache.entry import StoredResponse
from proxy.edge import respond
from proxy.process.service import running
from tests.conftest import Origin, make_config
from tests.edge.h2_support import RawH2
from tests.edge.test_fast_path import DATE, stored

BODY = bytes(range(256)) * 4096  # 1 MiB


def entry(body: bytes) -> StoredResponse:
    return stored(body=body, content_type="application/octet-stream", date=DATE)


async def written_in_steps(
    aiohttp_server: Callable[[web.Application], Awaitable[TestServer]], body: bytes
) -> tuple[bytes, str, list[int]]:
    """The body a client got from a server answering ``from_stored``, its Content-Length, and
    the sizes of the body's writes that a task running beside the write saw, one per turn."""
    seen: list[int] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        response = respond.from_stored(request, entry(body), now=0.0, via="t", status="t; hit")
        await response.prepare(request)
        writer = request._payload_writer  # aiohttp's own: what it has written

        async def watch() -> None:
            while True:
                seen.append(writer.output_size)
                await asyncio.sleep(0)

        watcher = asyncio.ensure_future(watch())
        try:
            await response.write_eof()
        finally:
            watcher.cancel()
        return response

    app = web.Application()
    app.router.add_get("/", handler)
    server = await aiohttp_server(app)
    async with aiohttp.ClientSession() as client, client.get(server.make_url("/")) as answer:
        got = await answer.read()
        length = answer.headers["Content-Length"]
    return got, length, seen


async def test_a_large_body_is_written_a_slice_per_turn(
    aiohttp_server: Callable[[web.Application], Awaitable[TestServer]],
) -> None:
    got, length, seen = await written_in_steps(aiohttp_server, BODY)
    assert got == BODY and length == str(len(BODY))
    # A turn between each two slices, each seeing one slice more written (the head goes out
    # with the first). Before: written in one call, so the task beside it never ran.
    assert len(seen) == len(BODY) // respond.SLICE - 1, seen
    assert [later - earlier for earlier, later in itertools.pairwise(seen)] == [respond.SLICE] * (
        len(seen) - 1
    )
    assert respond.hit_lines(entry(BODY), via="t", status="t") is None  # not the fast path's


async def test_a_body_of_a_slice_is_written_at_once(
    aiohttp_server: Callable[[web.Application], Awaitable[TestServer]],
) -> None:
    body = BODY[: respond.SLICE]
    got, length, seen = await written_in_steps(aiohttp_server, body)
    assert got == body and length == str(len(body))
    assert seen == []  # written at once: the task beside it never ran
    assert respond.hit_lines(entry(body), via="t", status="t") is not None


async def test_a_large_hit_over_http2_comes_whole(tmp_path: Path, origin: Origin) -> None:
    origin.reply("/big", BODY, headers={"Cache-Control": "max-age=60"})
    edge = {"listen": "127.0.0.1:0", "h2c": True}
    config = make_config(tmp_path, origin.url, edge=edge)
    async with running(config) as service:
        client = await RawH2.open(service.edge_url)
        try:
            first = await client.answer(client.request("/big"), wait=10)
            second = await client.answer(client.request("/big"), wait=10)
        finally:
            await client.close()
    assert first.status == second.status == 200
    assert first.body == second.body == BODY
    assert second.headers["content-length"] == str(len(BODY))
    assert "hit" in second.headers["cache-status"]
    assert origin.count("/big") == 1
