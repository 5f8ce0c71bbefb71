"""A large object cached and served by cdn-proxy with a shared tier (issue 23 §6, decision 0039).

Run:
    taskset -c 0 .venv/bin/python -m benchmarks.large_objects [--size 1GiB] [--clients 20]

One ``cdn-proxy serve`` (pinned to core 1, ``[cache] disk_path`` in a temporary directory) in
front of an origin in this process that generates a deterministic body of ``--size`` bytes
as it sends it (``LargeBody``: never held whole). Then:

1. ``--clients`` clients at once on a cold cache: one fills (streamed to it and to the tier),
   the others are collapsed onto that fill and sent the stored file once it is committed;
2. ``--clients`` clients at once again: hits, sent from the file (``sendfile``);
3. the proxy restarted, ``--clients`` hits at once: a process that has checked no file yet
   reads and checks every chunk it sends (decision 0039).

Every client hashes what it receives (SHA-256) and it is compared with the body's own hash.
Reported: seconds and aggregate MB/s of each round, origin requests, and the proxy's resident
memory: at idle, its peak (``VmHWM`` from /proc) and the peak above idle.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import struct
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
from aiohttp import web

PIECE = 64 * 1024
ROOT = Path(__file__).resolve().parent.parent
_BASE = hashlib.shake_256(b"cdn-proxy large object").digest(2 * PIECE)


class LargeBody:
    """``size`` deterministic bytes, made piece by piece: piece ``i`` (PIECE bytes) is its
    number, then a window of a fixed random block that shifts with ``i`` and ``seed``. Any
    misplaced, repeated or altered piece changes the hash."""

    def __init__(self, size: int, seed: int = 0) -> None:
        self.size = size
        self.seed = seed

    def _piece(self, index: int) -> bytes:
        offset = (index * 4099 + self.seed * 7919) % PIECE
        piece = struct.pack("<QQ", index, self.seed) + _BASE[offset : offset + PIECE - 16]
        return piece[: min(PIECE, self.size - index * PIECE)]

    def chunks(self, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """The bytes ``start`` to ``end`` (exclusive), at most PIECE at a time."""
        end = self.size if end is None else min(end, self.size)
        index = start // PIECE
        while index * PIECE < end:
            piece = self._piece(index)
            low = max(start - index * PIECE, 0)
            high = min(end - index * PIECE, len(piece))
            yield piece[low:high]
            index += 1

    def sha256(self, start: int = 0, end: int | None = None) -> str:
        digest = hashlib.sha256()
        for chunk in self.chunks(start, end):
            digest.update(chunk)
        return digest.hexdigest()


def origin_app(
    bodies: dict[str, LargeBody], counts: dict[str, int], *, chunked: frozenset[str] = frozenset()
) -> web.Application:
    """An origin sending each body as it generates it, cacheable for ten minutes; with
    Content-Length, or chunked for the paths in ``chunked``. ``counts``: requests per path."""

    async def handle(request: web.Request) -> web.StreamResponse:
        body = bodies.get(request.path)
        counts[request.path] = counts.get(request.path, 0) + 1
        if body is None:
            return web.Response(status=404)
        response = web.StreamResponse(
            headers={
                "Cache-Control": "max-age=600",
                "Content-Type": "application/octet-stream",
                "ETag": f'"{body.seed}-{body.size}"',
            }
        )
        if request.path not in chunked:
            response.content_length = body.size
        await response.prepare(request)
        for chunk in body.chunks():
            await response.write(chunk)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    return app


def memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in bytes."""
    figures = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            figures[name] = int(value.split()[0]) * 1024
    return figures


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds a process has used (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def config_text(origin_url: str, cache_dir: Path, *, max_object: str, disk: str) -> str:
    return f"""
[edge]
listen = "127.0.0.1:0"
[api]
listen = "127.0.0.1:0"
[cache]
max_bytes = "64MiB"
max_object_bytes = "{max_object}"
disk_path = "{cache_dir}"
disk_max_bytes = "{disk}"
[state]
path = "state.db"
[[domains]]
name = "example.com"
origin = "{origin_url}"
"""


async def fetch(
    edge: str, target: str, headers: dict[str, str] | None = None
) -> tuple[int, str, str, int]:
    """One GET on a connection of its own: status, Cache-Status, SHA-256 of the body, and its
    length, read in pieces (never held whole)."""
    connector = aiohttp.TCPConnector(force_close=True)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
    async with (
        aiohttp.ClientSession(connector=connector, timeout=timeout) as client,
        client.get(edge + target, headers={"Host": "example.com", **(headers or {})}) as response,
    ):
        digest = hashlib.sha256()
        length = 0
        async for chunk in response.content.iter_any():
            digest.update(chunk)
            length += len(chunk)
        return response.status, response.headers.get("Cache-Status", ""), digest.hexdigest(), length


async def start_proxy(config: Path, cpus: str) -> tuple[asyncio.subprocess.Process, str]:
    """``cdn-proxy serve`` pinned to ``cpus``, and its edge's URL once it listens."""
    process = await asyncio.create_subprocess_exec(
        "taskset",
        "-c",
        cpus,
        sys.executable,
        "-m",
        "proxy",
        "serve",
        "--config",
        str(config),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        cwd=ROOT,
    )
    assert process.stdout is not None
    addresses: dict[str, str] = {}
    async with asyncio.timeout(60):
        while len(addresses) < 2:
            line = (await process.stdout.readline()).decode()
            if not line:
                raise SystemExit("cdn-proxy exited before it listened")
            name, _, url = line.strip().partition(" ")
            addresses[name] = url
    return process, addresses["edge"]


async def round_of(
    edge: str, clients: int, body: LargeBody, expected: str, pid: int
) -> dict[str, float]:
    cpu = cpu_seconds(pid)
    started = time.perf_counter()
    results = await asyncio.gather(*(fetch(edge, "/big") for _ in range(clients)))
    seconds = time.perf_counter() - started
    bad = [r for r in results if (r[0], r[2], r[3]) != (200, expected, body.size)]
    if bad:
        raise SystemExit(f"{len(bad)} of {clients} answers were not the body: {bad[:2]}")
    gib = clients * body.size / (1 << 30)
    return {
        "seconds": seconds,
        "mb_s": clients * body.size / seconds / 1e6,
        "cpu_per_gib": (cpu_seconds(pid) - cpu) / gib,
    }


def parse_size(text: str) -> int:
    units = {"gib": 1 << 30, "mib": 1 << 20, "kib": 1 << 10, "": 1}
    lowered = text.lower()
    for unit, factor in units.items():
        if unit and lowered.endswith(unit):
            return int(float(lowered[: -len(unit)]) * factor)
    return int(lowered)


async def main(size: int, clients: int, cpus: str) -> None:
    body = LargeBody(size, seed=1)
    expected = body.sha256()
    counts: dict[str, int] = {}
    runner = web.AppRunner(origin_app({"/big": body}, counts), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    origin_url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    with tempfile.TemporaryDirectory(dir="/var/tmp") as home:
        config = Path(home) / "proxy.toml"
        # Over ten times the object: S3-FIFO keeps an object of 10% of the tier or more only
        # from its second fill, and this measures the first.
        disk = f"{max(2, -(-size * 16 // (1 << 30)))}GiB"
        config.write_text(
            config_text(origin_url, Path(home) / "cache", max_object=f"{size}", disk=disk)
        )
        process, edge = await start_proxy(config, cpus)
        try:
            idle = memory(process.pid)["VmRSS"]
            cold = await round_of(edge, clients, body, expected, process.pid)
            after_cold = memory(process.pid)
            warm = await round_of(edge, clients, body, expected, process.pid)
            after = memory(process.pid)
        finally:
            process.terminate()
            await process.wait()
        # A new process has checked no file yet: every send of this round reads and checks
        # its chunks (no sendfile) until one has read the file through.
        process, edge = await start_proxy(config, cpus)
        try:
            restarted_idle = memory(process.pid)["VmRSS"]
            checked = await round_of(edge, clients, body, expected, process.pid)
            restarted = memory(process.pid)
        finally:
            process.terminate()
            await process.wait()
    await runner.cleanup()
    mib = 1 << 20
    print(f"object {size / mib:.0f} MiB, {clients} clients, proxy on CPUs {cpus}")
    print(f"origin requests: {counts.get('/big', 0)}")
    for name, figures in (
        (f"cold (1 fill, {clients - 1} collapsed)", cold),
        (f"warm ({clients} hits)", warm),
        (f"after a restart ({clients} hits, checked)", checked),
    ):
        print(
            f"{name}: {figures['seconds']:.1f} s, {figures['mb_s']:.0f} MB/s, "
            f"proxy CPU {figures['cpu_per_gib']:.2f} s per GiB sent"
        )
    print(
        f"proxy RSS: idle {idle / mib:.0f} MiB, peak {after['VmHWM'] / mib:.0f} MiB "
        f"(+{(after['VmHWM'] - idle) / mib:.0f} MiB; "
        f"+{(after_cold['VmHWM'] - idle) / mib:.0f} MiB after the cold round); "
        f"after the restart: peak +{(restarted['VmHWM'] - restarted_idle) / mib:.0f} MiB"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="1GiB", help="the object's size (default 1GiB)")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--cpus", default="1", help="CPUs for the proxy (taskset -c)")
    arguments = parser.parse_args()
    asyncio.run(main(parse_size(arguments.size), arguments.clients, arguments.cpus))
