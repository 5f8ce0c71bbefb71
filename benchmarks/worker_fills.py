"""Origin requests for one trace, by worker count, with and without the shared tier (issue 23).

Run:
    .venv/bin/python -m benchmarks.worker_fills [--workers 1,2,4] [--urls 200] [--requests 2000]
        [--clients 1] [--burst K --origin-ms 50]

For each worker count, cdn-proxy is started twice (memory tiers only, then with
``[cache] disk_path``) in front of an origin that counts what it is asked. The same trace
(``--requests`` GETs over ``--urls`` cacheable URLs, each URL once first, then a seeded
random order) is sent one request per fresh connection, so the kernel spreads them over the
workers. With ``--clients N``, N clients share the trace, each taking the next request as
it is done. With ``--burst K`` (and ``--origin-ms``, an origin that takes that long), each
URL is asked for once by K clients at once instead, so concurrent misses for one URL reach
different workers (collapsing across workers). The goal is one origin request per URL,
whatever the worker count.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shlex
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import aiohttp
from aiohttp import web

from benchmarks.systems import ROOT, Server, proxy_addresses, proxy_argv, proxy_config

HOST = "h.example"
CPUS = "0,1"


async def origin(counts: dict[str, int], delay: float) -> web.AppRunner:
    async def handle(request: web.Request) -> web.Response:
        counts[request.path] = counts.get(request.path, 0) + 1
        if delay:
            await asyncio.sleep(delay)  # an origin across a network: concurrent misses overlap
        return web.Response(body=b"x" * 1024, headers={"Cache-Control": "max-age=600"})

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner


async def replay(port: int, trace: list[str], clients: int, burst: int) -> None:
    if burst:
        for path in dict.fromkeys(trace):  # each URL once, by ``burst`` clients at once
            await asyncio.gather(*(get(port, path) for _ in range(burst)))
        return
    paths = iter(trace)
    await asyncio.gather(*(client(port, paths) for _ in range(clients)))


async def client(port: int, paths: Iterator[str]) -> None:
    for path in paths:
        await get(port, path)


async def get(port: int, path: str) -> None:
    """One GET on a fresh connection."""
    connector = aiohttp.TCPConnector(force_close=True)
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.get(f"http://127.0.0.1:{port}{path}", headers={"Host": HOST}) as response,
    ):
        await response.read()
        if response.status != 200:
            raise SystemExit(f"GET {path}: {response.status}")


async def one(
    workers: int, disk: bool, trace: list[str], home: Path, args: argparse.Namespace
) -> int:
    counts: dict[str, int] = {}
    runner = await origin(counts, args.origin_ms / 1000)
    origin_port = runner.addresses[0][1]
    config = proxy_config(home, origin_port, workers)
    if disk:
        text = config.read_text().replace(
            "[cache]\n", '[cache]\ndisk_path = "cache"\ndisk_max_bytes = "1GiB"\n', 1
        )
        config.write_text(text)
    server = Server("cdn-proxy", proxy_argv(config), home / "proxy.log", CPUS, cwd=ROOT)
    server.start()
    try:
        port = proxy_addresses(server, 60.0)[0]
        await replay(port, trace, args.clients, args.burst)
    finally:
        server.stop()
        await runner.cleanup()
    return sum(counts.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--urls", type=int, default=200)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=1, help="concurrent clients")
    parser.add_argument(
        "--burst", type=int, default=0, help="instead: each URL once, by this many clients at once"
    )
    parser.add_argument("--origin-ms", type=float, default=0.0, help="the origin's delay")
    args = parser.parse_args()
    urls = [f"/o/{i}" for i in range(args.urls)]
    rest = random.Random(23).choices(urls, k=max(0, args.requests - len(urls)))
    trace = urls + rest
    if args.burst:
        print(
            f"{len(urls)} URLs, each asked for by {args.burst} clients at once (fresh "
            f"connections), origin delay {args.origin_ms:g} ms"
        )
    else:
        print(
            f"{len(trace)} requests over {len(urls)} URLs, one fresh connection each, "
            f"{args.clients} client(s) at once"
        )
    with tempfile.TemporaryDirectory(prefix="cdn-proxy-fills-") as name:
        for workers in map(int, args.workers.split(",")):
            for disk in (False, True):
                home = Path(name) / f"w{workers}-{'disk' if disk else 'memory'}"
                home.mkdir()
                fills = asyncio.run(one(workers, disk, trace, home, args))
                tiers = "memory + shared tier" if disk else "memory tiers only"
                print(f"workers = {workers}, {tiers}: {fills} origin requests", flush=True)
    print("command:", shlex.join(["python", "-m", "benchmarks.worker_fills", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
