"""No line a client can cause is logged more than once per interval, and never with a
traceback (issue 32 §9, decision 0051), on a real ``cdn-proxy serve`` whose log is read.

The flood: 300 requests whose origin drops the connection (each logged its origin error),
300 malformed HTTP/1.1 requests, 300 HTTP/2 connections of malformed frames. The log then
holds a few lines, one per kind of trouble, and the count of those held back comes with the
next line of the kind once its quiet time is over.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.conftest import Origin
from tests.edge.h2_support import RawH2
from tests.nodes import Node, write_config
from tests.polling import until

pytestmark = pytest.mark.slow  # a node, and a quiet time of 10 s

FLOOD = 300
HOST = {"Host": "example.com"}


def warnings(log: Path) -> list[str]:
    lines = log.read_text(errors="replace").splitlines()
    return [line for line in lines if " WARNING " in line or " ERROR " in line]


async def malformed(edge: str) -> None:
    host, _, port = edge.split("://", 1)[1].rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"GET / HTTP/1.1\r\nHost: example.com\r\nBad Header\x01: x\r\n\r\n")
    await writer.drain()
    await reader.read()
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()


async def bad_frames(edge: str) -> None:
    client = await RawH2.open(edge)
    client.send_raw(b"\x00\x00\x04\x08\x00\x00\x00\x00\x07")  # WINDOW_UPDATE, stream 7 idle
    client.send_raw(b"\x00\x00\x01\x01\x05\x00\x00\x00\x01\xff")  # HEADERS of junk
    with contextlib.suppress(ConnectionError):  # closed after GOAWAY, or reset
        await client.until_closed()
    with contextlib.suppress(ConnectionError):
        await client.close()


async def test_a_flood_of_client_caused_troubles_logs_a_few_lines(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    async def broken(request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        request.transport.abort()  # the origin drops every such request
        return web.Response()

    origin.default = broken  # every /broken?n=...
    log = tmp_path / "node.log"
    node = await Node.start(write_config(tmp_path, origin.url, edge="h2c = true"), log=log)
    nodes.append(node)
    before = len(warnings(log))
    began = time.monotonic()
    async with aiohttp.ClientSession() as client:
        for n in range(FLOOD):
            async with client.get(node.edge + f"/broken?n={n}", headers=HOST) as answer:
                assert answer.status == 502
        for _ in range(FLOOD):
            await malformed(node.edge)
        for _ in range(FLOOD):
            await bad_frames(node.edge)
        flood = warnings(log)[before:]
        # A line per kind (the origin's failure, the retry, malformed requests, and one
        # spare) per 10 s the flood took, on a machine where 900 requests may take a while.
        allowed = 4 * (1 + int((time.monotonic() - began) // 10))
        assert len(flood) <= allowed, "\n".join(flood[:20])
        assert "Traceback" not in log.read_text(errors="replace")

        # The count of the lines held back comes with the next one, once the quiet time is
        # over (a request every 0.5 s until it does).
        async def counted() -> bool:
            async with client.get(node.edge + "/broken?n=late", headers=HOST) as answer:
                assert answer.status == 502
            return any("more like it" in line for line in warnings(log))

        await until(counted, within=20, every=0.5)
    summary = next(line for line in warnings(log) if "more like it" in line)
    held = re.search(r"\((\d+) more like it", summary)
    assert held is not None and int(held.group(1)) >= FLOOD - 1, summary
