"""Origin requests for one trace, by worker count, with and without the shared tier (issue 23).

Run:
    .venv/bin/python -m benchmarks.worker_fills [--workers 1,2,4] [--urls 200] [--requests 2000]
        [--clients 1]

For each worker count, cdn-proxy is started twice (memory tiers only, then with
``[cache] disk_path``) in front of an origin that counts what it is asked. The same trace
(``--requests`` GETs over ``--urls`` cacheable URLs, each URL once first, then a seeded
random order) is sent one request per fresh connection, so the kernel spreads them over the
workers. With ``--clients N``, N clients share the trace, each taking the next request as
it is done, so concurrent misses for one URL reach different workers (collapsing across
workers). The goal is one origin request per URL, whatever the worker count.
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


async def origin(counts: dict[str, int]) -> web.AppRunner:
    async def handle(request: web.Request) -> web.Response:
        counts[request.path] = counts.get(request.path, 0) + 1
        return web.Response(body=b"x" * 1024, headers={"Cache-Control": "max-age=600"})

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner


async def replay(port: int, trace: list[str], clients: int) -> None:
    paths = iter(trace)
    await asyncio.gather(*(client(port, paths) for _ in range(clients)))


async def client(port: int, paths: Iterator[str]) -> None:
    for path in paths:
        connector = aiohttp.TCPConnector(force_close=True)
        async with (
            aiohttp.ClientSession(connector=connector) as client,
            client.get(f"http://127.0.0.1:{port}{path}", headers={"Host": HOST}) as response,
        ):
            await response.read()
            if response.status != 200:
                raise SystemExit(f"GET {path}: {response.status}")


async def one(workers: int, disk: bool, trace: list[str], home: Path, clients: int) -> int:
    counts: dict[str, int] = {}
    runner = await origin(counts)
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
        await replay(port, trace, clients)
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
    args = parser.parse_args()
    urls = [f"/o/{i}" for i in range(args.urls)]
    rest = random.Random(23).choices(urls, k=max(0, args.requests - len(urls)))
    trace = urls + rest
    print(
        f"{len(trace)} requests over {len(urls)} URLs, one fresh connection each, "
        f"{args.clients} client(s) at once"
    )
    with tempfile.TemporaryDirectory(prefix="cdn-proxy-fills-") as name:
        for workers in map(int, args.workers.split(",")):
            for disk in (False, True):
                home = Path(name) / f"w{workers}-{'disk' if disk else 'memory'}"
                home.mkdir()
                fills = asyncio.run(one(workers, disk, trace, home, args.clients))
                tiers = "memory + shared tier" if disk else "memory tiers only"
                print(f"workers = {workers}, {tiers}: {fills} origin requests", flush=True)
    print("command:", shlex.join(["python", "-m", "benchmarks.worker_fills", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
