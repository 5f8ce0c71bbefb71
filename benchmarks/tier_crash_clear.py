"""kill -9 during 20 large fills, a restart, then a clear of every domain: the shared tier's
directory ends with its LMDB files and nothing else (issue 31, "benchmarks").

Run: .venv/bin/python -m benchmarks.tier_crash_clear [--fills 20] [--size 8MiB] [--workers 2]
         [--sweep-pause 1] [--cpu 1]

1. A node (``cdn-proxy serve``, ``--workers`` edge processes and the embedded Valkey, the
   shared tier on, pinned with ``taskset``) in front of an origin in this process.
2. ``--fills`` GETs at once of objects of ``--size`` bytes over four domains: half of them
   are answered whole (their fills commit: body files), the other half stop after half
   their body and hang (their fills are under way: temporary files, in the workers).
3. Once both halves are there, the node's process group is killed with SIGKILL, and the node
   is started again on the same directory.
4. Every domain is cleared through the API (``/api/v1/cdn/clear-cache``), then the directory
   is watched until no body file and no temporary file is left (the node's sweep,
   ``[cache] sweep_pause``), or 60 s. It prints the files before the kill, after the
   restart, after the clears and at the end, and how long the sweep took.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web

from benchmarks.soak_server import SoakServer
from benchmarks.systems import free_port

DOMAINS = ("a.example", "b.example", "c.example", "d.example")
LMDB = {"data.mdb", "lock.mdb"}
# The tier's own small files: its lock and boot record, S3-FIFO's hit counters, the purge
# state's stamp, and what the node's fleet member applied (applied.py).
CONTROL = {"lock", "boot", "hits", "stamp", "distrust", "fleet-applied"}


class Origin:
    def __init__(self, size: int) -> None:
        self.body = bytes(range(256)) * (size // 256)
        self.halves = 0
        self.half_sent = asyncio.Event()
        self.runner: web.AppRunner | None = None
        self.port = free_port()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self, hanging: int) -> None:
        app = web.Application()

        async def big(request: web.Request) -> web.StreamResponse:
            index = int(request.match_info["index"])
            response = web.StreamResponse(
                headers={"Cache-Control": "max-age=3600", "Content-Length": str(len(self.body))}
            )
            await response.prepare(request)
            if index % 2 == 0 or (self.half_sent.is_set() and self.halves >= hanging):
                await response.write(self.body)
                return response
            await response.write(self.body[: len(self.body) // 2])
            self.halves += 1
            if self.halves >= hanging:
                self.half_sent.set()
            await asyncio.Event().wait()  # until the node is killed
            return response

        app.router.add_get("/big/{index}", big)
        self.runner = web.AppRunner(app, handle_signals=False)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

    async def close(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


def files(cache: Path) -> dict[str, int]:
    """Every file under the tier's directory: its path and size."""
    return {
        str(path.relative_to(cache)): path.stat().st_size
        for path in sorted(cache.rglob("*"))
        if path.is_file()
    }


def leftovers(cache: Path) -> list[str]:
    """The files that are neither LMDB's nor the tier's small control files."""
    return [name for name in files(cache) if Path(name).name not in LMDB | CONTROL]


def show(title: str, cache: Path) -> None:
    found = files(cache)
    bodies = [n for n in found if n.startswith("bodies/")]
    print(
        f"\n{title}: {len(found)} files, {len(bodies)} under bodies/, "
        f"{sum(found[n] for n in bodies) / 2**20:,.1f} MiB of bodies"
    )
    for name, size in found.items():
        if not name.startswith("bodies/"):
            print(f"  {name:<24} {size:>12,}")


async def get(client: aiohttp.ClientSession, url: str, domain: str) -> int:
    with contextlib.suppress(aiohttp.ClientError):
        async with client.get(url, headers={"Host": domain}) as response:
            return len(await response.read())
    return -1


async def run(args: argparse.Namespace, home: Path) -> int:
    origin = Origin(args.size)
    await origin.start(hanging=args.fills // 2)
    server = SoakServer(
        home / "node",
        origin_url=origin.url,
        domains=DOMAINS,
        max_bytes=max(8 << 20, 4 * args.size),  # a memory share of an eighth: fills stream
        workers=args.workers,
        cpu=args.cpu,
        disk_max_bytes=max(1 << 30, 4 * args.fills * args.size),
        cache_extra=f"sweep_pause = {args.sweep_pause}\n",
    )
    cache = server.directory / "cache"
    try:
        await server.start()
        token = await server.token("create", "bench", "--all-domains")
        async with aiohttp.ClientSession() as client:
            gets = [
                asyncio.ensure_future(
                    get(client, f"{server.edge_url}/big/{i}", DOMAINS[i % len(DOMAINS)])
                )
                for i in range(args.fills)
            ]
            whole = [g for i, g in enumerate(gets) if i % 2 == 0]
            await asyncio.wait_for(asyncio.gather(*whole), 120)
            await asyncio.wait_for(origin.half_sent.wait(), 120)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # the whole ones committed, the others written
                found = files(cache)
                stored = [n for n in found if n.endswith(".body")]
                partial = [n for n in found if n.startswith("bodies/tmp/") and found[n]]
                if len(stored) >= len(whole) and len(partial) >= args.fills - len(whole):
                    break
                await asyncio.sleep(0.05)
            show("before the kill -9", cache)
            await server.kill()
            for pending in gets:
                pending.cancel()
            await asyncio.gather(*gets, return_exceptions=True)
        await server.start()
        show("after the restart", cache)
        headers = {"Authorization": f"Bearer {token}"}
        async with aiohttp.ClientSession(headers=headers) as client:
            started = time.monotonic()
            for domain in DOMAINS:
                async with client.post(
                    f"{server.api_url}/api/v1/cdn/clear-cache", json={"domain": domain}
                ) as response:
                    assert response.status == 200, await response.text()
            cleared = time.monotonic()
            show("after the clears", cache)
            # The directory, watched: no event tells when the sweep has been.
            while leftovers(cache) and time.monotonic() < cleared + 60:  # noqa: ASYNC110
                await asyncio.sleep(0.1)
            done = time.monotonic()
        show("at the end", cache)
        left = leftovers(cache)
        print(
            f"\nclears of {len(DOMAINS)} domains: {1000 * (cleared - started):,.0f} ms; "
            f"the directory held only LMDB and control files "
            f"{done - cleared:,.1f} s after the last clear"
            if not left
            else f"\nstill there after 60 s: {left}"
        )
        return 1 if left else 0
    finally:
        await server.stop()
        await origin.close()


def _size(text: str) -> int:
    for unit, factor in {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}.items():
        if text.endswith(unit):
            return int(text.removesuffix(unit)) * factor
    return int(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.tier_crash_clear", description=__doc__
    )
    parser.add_argument("--fills", type=int, default=20)
    parser.add_argument("--size", type=_size, default=8 << 20, help="bytes of each object")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sweep-pause", type=float, default=1.0, help="[cache] sweep_pause")
    parser.add_argument("--cpu", default="1", help="cores for the node (taskset -c)")
    args = parser.parse_args(argv)
    allowed = sorted(os.sched_getaffinity(0))
    if not {int(c) for c in args.cpu.split(",")} <= set(allowed):
        args.cpu = str(allowed[-1])
    with tempfile.TemporaryDirectory(prefix="tier-crash-") as home:
        return asyncio.run(run(args, Path(home)))


if __name__ == "__main__":
    raise SystemExit(main())
