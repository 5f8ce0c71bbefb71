"""Issue 24 §1: a small Range must not make the origin send a whole object (the RangeAmp
"small-range amplification" attack). Decision 0031.

Against ``cdn-proxy serve`` in a child process and a real origin that honours single byte
ranges and counts every body byte it writes. Each repro of the issue is replayed on one
keep-alive connection, and the origin's bytes per client request are measured."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.nodes import Node, start, write_config

MIB = 1024 * 1024
REQUESTS = 20
# What one forwarded 1-byte range may cost the origin: its one byte; a whole-object fill would
# cost 1 MiB or more. The bound leaves room for nothing but small ranges.
BYTES_PER_REQUEST = 1024
PIECE = 64 * 1024
BODY = random.Random(24).randbytes(10 * MIB)


@dataclass
class CountingOrigin:
    """An origin whose objects are prefixes of BODY; it answers one ``bytes=a-b`` range with a
    206, anything else with the whole object, and counts the body bytes it wrote."""

    url: str = ""
    sent: int = 0
    requests: int = 0
    ranges: list[str | None] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        self.ranges.append(request.headers.get("Range"))
        name = request.match_info["name"]
        size, cache_control, chunked = {
            "nostore3m": (3 * MIB, "no-store", False),
            "big": (MIB, "max-age=600", False),
            "chunked10m": (10 * MIB, "max-age=600", True),
        }[name]
        body = BODY[:size]
        spec = request.headers.get("Range", "")
        headers = {"Cache-Control": cache_control, "Accept-Ranges": "bytes"}
        first, dash, last = spec.removeprefix("bytes=").partition("-")
        if spec.startswith("bytes=") and dash and first.isdigit() and last.isdigit():
            start, end = int(first), min(int(last), size - 1)
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
            self.sent += end - start + 1
            return web.Response(status=206, body=body[start : end + 1], headers=headers)
        response = web.StreamResponse(headers=headers)
        if chunked:
            response.enable_chunked_encoding()
        else:
            response.content_length = size
        await response.prepare(request)
        try:
            for offset in range(0, size, PIECE):
                await response.write(body[offset : offset + PIECE])
                self.sent += len(body[offset : offset + PIECE])
            await response.write_eof()
        except ConnectionError:
            pass  # the edge let go of it
        return response


@pytest.fixture
async def counting_origin(
    aiohttp_server: Callable[..., Awaitable[TestServer]],
) -> CountingOrigin:
    origin = CountingOrigin()
    app = web.Application()
    app.router.add_get("/{name}", origin.handle)
    server = await aiohttp_server(app)
    origin.url = str(server.make_url("")).rstrip("/")
    return origin


@pytest.mark.slow
@pytest.mark.parametrize(
    ("path", "cache"),
    [
        ("/nostore3m", 'max_bytes = "16MiB"'),  # not storable: every request a miss
        ("/big?bust={n}", 'max_bytes = "16MiB"'),  # cacheable, every URL new
        ("/chunked10m", 'max_bytes = "16MiB"\nmax_object_bytes = "8MiB"'),  # chunked, too large
    ],
)
async def test_a_one_byte_range_costs_the_origin_no_whole_object(
    tmp_path: Path, counting_origin: CountingOrigin, nodes: list[Node], path: str, cache: str
) -> None:
    config = write_config(tmp_path, counting_origin.url)
    text = config.read_text(encoding="utf-8").replace('max_bytes = "8MiB"', cache)
    config.write_text(text, encoding="utf-8")
    node = await start(nodes, config)
    connector = aiohttp.TCPConnector(limit=1)  # one keep-alive connection, as the repros
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as client:
        for n in range(REQUESTS):
            headers = {"Host": "example.com", "Range": "bytes=0-0"}
            async with client.get(node.edge + path.format(n=n), headers=headers) as response:
                body = await response.read()
                assert response.status == 206, (n, response.status)
                assert body == BODY[:1]
                assert response.headers["Content-Range"].startswith("bytes 0-0/")
    per_request = counting_origin.sent / REQUESTS
    assert per_request <= BYTES_PER_REQUEST, (
        f"{per_request:,.0f} origin bytes per 1-byte range ({counting_origin.requests} "
        f"origin requests for {REQUESTS})"
    )
    assert counting_origin.requests == REQUESTS
