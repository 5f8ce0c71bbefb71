"""Issue 13, failure 3: encoded bodies pass through the edge byte for byte, both ways.

A request with Content-Encoding reached the origin decoded by aiohttp's server, still
labelled gzip and cut to the original Content-Length (73 of 12,000 bytes). The edge now
decodes nothing: the origin (bodies_support.RawOrigin, which decodes nothing either) must see
exactly the client's bytes and Content-Encoding, and the client exactly the origin's.
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.nodes import Node, write_config
from tests.reliability.bodies_support import (
    HOST,
    RawOrigin,
    Responder,
    chunked,
    connect,
    raw_origin,
    request_head,
)

# Text that compresses well, so a decoded body would differ from the encoded one in length.
TEXT = b"".join(b"line %d of an upload that compresses well\n" % n for n in range(300))
# brotli is not installed here: the edge must not decode, so any bytes labelled br will do,
# and bytes no decoder accepts show that none ran.
ENCODED = {
    "gzip": gzip.compress(TEXT),
    "deflate": zlib.compress(TEXT),
    "br": b"\x1b\xff\xff" + os.urandom(2000),
    "x-unknown": os.urandom(2000),
}


@pytest.fixture
async def origin() -> AsyncIterator[RawOrigin]:
    async with raw_origin() as started:
        yield started


@pytest.fixture
async def node(tmp_path: Path, origin: RawOrigin) -> AsyncIterator[Node]:
    started = await Node.start(write_config(tmp_path, origin.url))
    yield started
    await started.kill()


@pytest.mark.slow
@pytest.mark.parametrize("coding", sorted(ENCODED))
async def test_an_encoded_upload_reaches_the_origin_as_sent(
    node: Node, origin: RawOrigin, coding: str
) -> None:
    """With Content-Length and chunked: the origin gets the client's bytes, still labelled
    with their Content-Encoding, and a length that is theirs."""
    body = ENCODED[coding]
    connection = await connect(node.edge)
    try:
        headers = {"Content-Encoding": coding, "Content-Type": "text/plain"}
        await connection.send(request_head("POST", "/length", headers, length=len(body)) + body)
        assert (await connection.answer())[0] == 200
        headers["Transfer-Encoding"] = "chunked"
        await connection.send(request_head("POST", "/chunked", headers) + chunked(body))
        assert (await connection.answer())[0] == 200
    finally:
        connection.close()
    assert [seen.target for seen in origin.received] == ["/length", "/chunked"]
    for seen in origin.received:
        assert seen.body == body, seen.target
        assert seen.header("Content-Encoding") == coding
        assert seen.header("Content-Type") == "text/plain"
        length = seen.header("Content-Length")
        assert length is None or int(length) == len(body)


@pytest.mark.slow
async def test_encoded_responses_reach_the_client_as_sent(node: Node, origin: RawOrigin) -> None:
    """gzip and br responses pass through undecoded: on a miss, on the hit after it, and
    streamed (longer than cache.max_object_bytes, so neither stored nor held whole)."""
    large = os.urandom(9 * 1024**2)  # past the 8 MiB max_object_bytes that 8MiB max_bytes gives
    bodies = {
        "/small.gz": (ENCODED["gzip"], "gzip"),
        "/small.br": (ENCODED["br"], "br"),
        "/large.gz": (large, "gzip"),
    }
    for target, (payload, coding) in bodies.items():
        origin.routes[target] = _answer(payload, coding)
    async with aiohttp.ClientSession(auto_decompress=False) as client:
        for target, (payload, coding) in bodies.items():
            for attempt in ("miss", "hit"):
                async with client.get(
                    node.edge + target, headers={"Host": HOST, "Accept-Encoding": "gzip, br"}
                ) as response:
                    assert response.status == 200
                    assert response.headers["Content-Encoding"] == coding
                    assert await response.read() == payload, (target, attempt)
                    if target != "/large.gz":
                        status = response.headers["Cache-Status"]
                        assert ("hit" in status) == (attempt == "hit"), (target, status)
    assert sum(seen.target == "/large.gz" for seen in origin.received) == 2  # never stored


def _answer(payload: bytes, coding: str) -> Responder:
    """The origin's answer. gzip ones Vary on Accept-Encoding, so their hits take the full
    path; the br one does not, so its hit takes the fast path (respond.Hit)."""
    headers = {
        "Content-Encoding": coding,
        "Content-Type": "application/octet-stream",
        "Cache-Control": "max-age=60",
    }
    if coding == "gzip":
        headers["Vary"] = "Accept-Encoding"

    async def responder(request: web.BaseRequest) -> web.StreamResponse:
        return web.Response(body=payload, headers=headers)

    return responder
