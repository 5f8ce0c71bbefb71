"""Orphaned body files on a running node (issue 31 §5): a worker killed -9 in the middle of a
large fill from a slow origin leaves its temporary body file; the node's sweep removes it
while the node runs (the supervisor has started another worker), counts it in /metrics, and
the object is stored whole by the next fill.

Real processes: a node with two workers and its embedded Valkey, a real origin streaming the
body slowly, a real directory.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.conftest import Origin
from tests.nodes import Node, start, write_config
from tests.polling import until

pytestmark = pytest.mark.slow  # a node of real processes

HOST = {"Host": "example.com"}
SIZE = 4 << 20
BODY = bytes(range(256)) * (SIZE // 256)


def metric(text: str, name: str) -> float:
    (line,) = [line for line in text.splitlines() if line.startswith(name + " ")]
    return float(line.split()[1])


async def test_a_worker_killed_mid_fill_leaves_no_file_once_swept(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    half_sent = asyncio.Event()
    slow = asyncio.Event()  # set: the origin sends the whole body at once

    async def big(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Cache-Control": "max-age=600", "Content-Length": str(SIZE)}
        )
        await response.prepare(request)
        if slow.is_set():
            await response.write(BODY)
            return response
        await response.write(BODY[: SIZE // 2])
        half_sent.set()
        await asyncio.Event().wait()  # until the test ends: the worker is killed first
        return response

    origin.route("/big", big)
    cache = tmp_path / "cache"
    config = write_config(
        tmp_path,
        origin.url,
        workers=2,
        cache=f'disk_path = "{cache}"\ndisk_max_bytes = "64MiB"\nsweep_pause = 0.2',
    )
    node = await start(nodes, config)
    tmp = cache / "bodies" / "tmp"

    async with aiohttp.ClientSession() as client:
        request = asyncio.ensure_future(client.get(node.edge + "/big", headers=HOST))
        await half_sent.wait()
        files = await until(lambda: [p for p in tmp.iterdir() if p.stat().st_size > 0])
        (partial,) = files
        filler = int(partial.name.split(".")[0])  # a temporary body names its writer
        assert filler in node.worker_pids()
        os.kill(filler, signal.SIGKILL)
        (answer,) = await asyncio.gather(request, return_exceptions=True)
        if isinstance(answer, aiohttp.ClientResponse):  # its headers came: the body is cut
            with pytest.raises(aiohttp.ClientPayloadError):
                await answer.read()
            answer.close()
        await until(lambda: len(node.worker_pids()) == 2, within=30.0, every=0.05)

        await until(lambda: not any(tmp.iterdir()), within=30.0, every=0.05)
        async with client.get(node.api + "/metrics") as response:
            text = await response.text()
        assert metric(text, "cdn_proxy_shared_tier_orphans_reclaimed_total") == 1
        assert metric(text, "cdn_proxy_shared_tier_orphan_bytes_reclaimed_total") > 0

        slow.set()
        async with client.get(node.edge + "/big", headers=HOST) as response:
            assert await response.read() == BODY
        async with client.get(node.edge + "/big", headers=HOST) as response:
            assert await response.read() == BODY
            assert "hit" in response.headers.get("Cache-Status", "")
        assert [p.name for p in (cache / "bodies").iterdir() if p.is_file()] != []
        assert not any(tmp.iterdir())
