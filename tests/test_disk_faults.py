"""Faults of the disk under a running edge (issue 23 §7, decision 0030): a full disk, the cache
directory deleted or made read-only, corrupt entries and body files. The edge keeps answering
from its memory tier and the origin: never a 5xx, never a body other than the origin's (the
bytes compared), ``/readyz`` says the tier is degraded, ``/metrics`` counts the fault, and
the log says so once per interval, not once per request.

Real processes throughout: ``python -m proxy serve`` with a disk tier, a real origin, a real
tmpfs for the full disk, the node run without root's
override of file modes for the read-only directory.
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import shutil
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from proxy.store.shared.health import LOG_INTERVAL
from tests.conftest import Origin
from tests.nodes import Node, write_config

pytestmark = pytest.mark.slow  # nodes of real processes, restarted

HOST = {"Host": "example.com"}
DISK_HIT = 'cdn-proxy; hit; detail="disk"'


def body(target: str, size: int) -> bytes:
    return random.Random(target).randbytes(size)


def serve(origin: Origin, sizes: dict[str, int]) -> None:
    """Cacheable answers: each target's own random bytes."""
    for target in sizes:

        async def handler(request: web.Request, target: str = target) -> web.StreamResponse:
            headers = {"Cache-Control": "max-age=600", "Content-Type": "application/octet-stream"}
            return web.Response(body=body(target, sizes[target]), headers=headers)

        origin.route(target, handler)


async def get(node: Node, target: str) -> tuple[int, str, bytes]:
    """One GET on a connection of its own: status, Cache-Status, body."""
    connector = aiohttp.TCPConnector(force_close=True)
    async with (
        aiohttp.ClientSession(connector=connector) as client,
        client.get(node.edge + target, headers=HOST) as response,
    ):
        return response.status, response.headers.get("Cache-Status", ""), await response.read()


async def get_right(node: Node, target: str, size: int) -> str:
    """GET, which must be a 200 with the origin's bytes: its Cache-Status."""
    status, cache_status, data = await get(node, target)
    assert status == 200, (target, status, data[:200])
    assert data == body(target, size), f"{target}: not the origin's bytes ({cache_status})"
    return cache_status


async def readyz_and_metrics(node: Node) -> tuple[dict[str, Any], dict[str, float]]:
    async with aiohttp.ClientSession() as client:
        async with client.get(node.api + "/readyz") as response:
            assert response.status == 200  # a warning: the edge answers from memory and origin
            ready = json.loads(await response.text())
        async with client.get(node.api + "/metrics") as response:
            lines = (await response.text()).splitlines()
    metrics = {
        name: float(value)
        for line in lines
        if line.startswith("cdn_proxy_shared_tier_")
        for name, _, value in [line.partition(" ")]
    }
    return ready, metrics


def tier_log_lines(log: Path) -> list[str]:
    """The tier's log lines; nothing else of the node's is a warning or worse (no traceback,
    no line per request)."""
    lines = log.read_text().splitlines()
    loud = [line for line in lines if " WARNING " in line or " ERROR " in line]
    assert all(" proxy.store.shared" in line and "shared tier " in line for line in loud), loud
    assert not [line for line in lines if line.startswith("Traceback")], lines
    return [line for line in lines if "shared tier " in line]


async def start(nodes: list[Node], config: Path, log: Path, **options: Any) -> Node:
    node = await Node.start(config, log=log, **options)
    nodes.append(node)
    return node


async def stop(node: Node) -> None:
    node.process.terminate()
    assert await node.process.wait() == 0


# -- a full disk --------------------------------------------------------------------------------


async def test_a_full_disk_costs_no_5xx_and_is_reported_once_per_interval(
    tmp_path: Path, origin: Origin, nodes: list[Node], small_disk: Path
) -> None:
    sizes = {f"/big/{n}": 400_000 for n in range(10)} | {"/small": 2_000}
    serve(origin, sizes)
    config = write_config(
        tmp_path,
        origin.url,
        cache=f'disk_path = "{small_disk / "cache"}"\ndisk_max_bytes = "64MiB"',
    )
    log = tmp_path / "node.log"
    node = await start(nodes, config, log)
    began = time.monotonic()
    assert "stored" in await get_right(node, "/small", 2_000)
    for target, size in sizes.items():  # 4 MB of bodies on a 2 MiB disk
        await get_right(node, target, size)
    ready, metrics = await readyz_and_metrics(node)
    elapsed = time.monotonic() - began
    assert ready["disk"]["ok"] is False and not ready["disk"]["stopped"], ready
    assert "No space left on device" in ready["disk"]["degraded"], ready
    assert ready["warnings"][0].startswith("shared tier degraded: "), ready
    dropped = metrics["cdn_proxy_shared_tier_write_errors_total"]
    assert dropped >= 5, metrics  # the 400 KB bodies that did not fit
    assert metrics["cdn_proxy_shared_tier_faults_total"] >= dropped
    for target, size in sizes.items():  # still the origin's bytes: from memory, disk or origin
        await get_right(node, target, size)
    lines = tier_log_lines(log)
    assert 1 <= len(lines) <= 1 + elapsed // LOG_INTERVAL, lines  # not one per fault
    assert "No space left on device" in lines[0]
    await stop(node)


async def test_a_full_disk_costs_no_5xx_with_two_workers(
    tmp_path: Path, origin: Origin, nodes: list[Node], small_disk: Path
) -> None:
    """Each worker fills the one tier: every answer right, each worker's log line once per
    interval. (What the node's /readyz and /metrics say of its workers' faults is the
    workers' report to the node, not tested here.)"""
    sizes = {f"/big/{n}": 400_000 for n in range(10)} | {"/small": 2_000}
    serve(origin, sizes)
    config = write_config(
        tmp_path,
        origin.url,
        workers=2,
        cache=f'disk_path = "{small_disk / "cache"}"\ndisk_max_bytes = "64MiB"',
    )
    log = tmp_path / "node.log"
    node = await start(nodes, config, log)
    began = time.monotonic()
    for _ in range(3):
        for target, size in sizes.items():
            await get_right(node, target, size)
    elapsed = time.monotonic() - began
    lines = tier_log_lines(log)
    assert all("No space left on device" in line for line in lines), lines
    assert 1 <= len(lines) <= 2 * (1 + elapsed // LOG_INTERVAL), lines
    await stop(node)


# -- the directory deleted while running -------------------------------------------------------


async def test_a_deleted_directory_is_counted_and_logged_once(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    sizes = {"/before": 300_000, "/after": 300_000, "/small": 1_000}
    serve(origin, sizes)
    config = write_config(tmp_path, origin.url, cache=f'disk_path = "{tmp_path / "cache"}"')
    log = tmp_path / "node.log"
    node = await start(nodes, config, log)
    began = time.monotonic()
    await get_right(node, "/before", 300_000)
    shutil.rmtree(tmp_path / "cache")
    for _ in range(5):
        for target, size in sizes.items():
            await get_right(node, target, size)
    ready, metrics = await readyz_and_metrics(node)
    elapsed = time.monotonic() - began
    assert ready["disk"]["stopped"] is True, ready
    assert "cache directory deleted or replaced" in ready["disk"]["degraded"], ready
    assert metrics["cdn_proxy_shared_tier_faults_total"] >= 1
    assert metrics["cdn_proxy_shared_tier_stopped"] == 1
    lines = tier_log_lines(log)
    assert 1 <= len(lines) <= 1 + elapsed // LOG_INTERVAL, lines
    assert "cache directory deleted or replaced" in lines[0]
    assert "not serving from it until restarted" in lines[0]


# -- read-only while running --------------------------------------------------------------------


PR_CAPBSET_DROP = 24  # prctl(2)
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER = 1, 2, 3  # capabilities(7)


def without_root_s_override() -> None:
    """Run as root, but without the capabilities that let root write where the mode says
    no (dropped from the bounding set, so the exec that follows cannot regain them): the
    owner's bits apply to it as to anyone. (A node run as nobody cannot exec this Python,
    which is under /root; a read-only remount is refused while LMDB holds its file open.)"""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER):
        if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            os._exit(97)  # the test sees the node exit before listening


async def test_a_directory_made_read_only_costs_no_5xx(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    """The cache directory is made read-only under the node (which may not override the
    mode): the files it holds open still take small fills, a large body's file cannot be
    made, so those fills are dropped and counted, and every answer is right."""
    if os.getuid() != 0:
        pytest.skip("needs root, to drop root's override")
    sizes = {"/before": 300_000, "/big/1": 300_000, "/big/2": 300_000, "/small": 1_000}
    serve(origin, sizes)
    cache = tmp_path / "cache"
    config = write_config(tmp_path, origin.url, cache=f'disk_path = "{cache}"')
    log = tmp_path / "node.log"
    node = await start(nodes, config, log, preexec_fn=without_root_s_override)
    await get_right(node, "/before", 300_000)
    read_only = (cache / "bodies" / "tmp", cache / "bodies", cache)
    try:
        for directory in read_only:
            directory.chmod(0o555)
        for _ in range(3):
            for target, size in sizes.items():
                await get_right(node, target, size)
        ready, metrics = await readyz_and_metrics(node)
    finally:
        for directory in read_only:
            directory.chmod(0o755)
    assert ready["disk"]["ok"] is False and not ready["disk"]["stopped"], ready
    assert "Permission denied" in ready["disk"]["degraded"], ready
    assert metrics["cdn_proxy_shared_tier_write_errors_total"] >= 2
    lines = tier_log_lines(log)
    assert len(lines) >= 1 and "Permission denied" in lines[0], lines
    await stop(node)


# -- corrupt entries and body files --------------------------------------------------------------


def flip_everywhere(path: Path, needle: bytes) -> int:
    """Flip one bit in the middle of every copy of ``needle`` in the file: how many."""
    data = bytearray(path.read_bytes())
    found = 0
    at = data.find(needle)
    while at != -1:
        middle = at + len(needle) // 2
        with path.open("r+b") as file:
            file.seek(middle)
            file.write(bytes([data[middle] ^ 0x10]))
        found += 1
        at = data.find(needle, at + 1)
    return found


def flip(path: Path, offset: int) -> None:
    with path.open("r+b") as file:
        file.seek(offset)
        byte = file.read(1)[0]
        file.seek(offset)
        file.write(bytes([byte ^ 0x10]))


def damage(cache: Path, sizes: dict[str, int]) -> None:
    """Flip a bit of /inline's record in LMDB's data file and of /file's body file."""
    assert flip_everywhere(cache / "entries" / "data.mdb", body("/inline", 20_000)[:64]) >= 1
    (body_file,) = (cache / "bodies").glob("*.body")
    assert body_file.stat().st_size > sizes["/file"]
    flip(body_file, 70_000)  # in the second of its 64 KiB chunks


@pytest.mark.parametrize("when", ["while running", "after a restart"])
async def test_corrupt_entries_and_bodies_are_never_served(
    tmp_path: Path, origin: Origin, nodes: list[Node], when: str
) -> None:
    """A memory tier too small to keep them (objects up to 8 KiB), so every hit reads the
    shared tier: a record of LMDB and a body file are damaged under the edge, or while it
    is stopped; each is found by its checksum, never served, fetched again and stored
    again; /readyz says so and /metrics counts them."""
    sizes = {"/inline": 20_000, "/file": 300_000}
    serve(origin, sizes)
    cache = tmp_path / "cache"
    config = write_config(
        tmp_path, origin.url, cache=f'max_object_bytes = "1MiB"\ndisk_path = "{cache}"'
    )
    text = config.read_text()
    config.write_text(text.replace('max_bytes = "8MiB"', 'max_bytes = "64KiB"', 1))
    log = tmp_path / "node.log"
    node = await start(nodes, config, log)
    for target, size in sizes.items():
        assert "stored" in await get_right(node, target, size)
        assert await get_right(node, target, size) == DISK_HIT
    if when == "after a restart":
        await stop(node)
        damage(cache, sizes)
        node = await start(nodes, config, log)
    else:
        damage(cache, sizes)
    for target, size in sizes.items():
        assert "stored" in await get_right(node, target, size)  # not a hit: fetched again
        assert origin.count(target) == 2
        assert await get_right(node, target, size) == DISK_HIT  # the new copy
    ready, metrics = await readyz_and_metrics(node)
    assert ready["disk"]["degraded"].startswith("corrupt entry: "), ready
    assert metrics["cdn_proxy_shared_tier_corrupt_total"] == 2, metrics
    assert len([line for line in tier_log_lines(log) if "corrupt entry" in line]) == 1
    await stop(node)
