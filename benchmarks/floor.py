"""The bare-aiohttp floor: a low-level ``web.Server``, a dict, nothing else.

Run: taskset -c 1 .venv/bin/python -m benchmarks.floor --port 18090 [--sizes 1024,102400]
Every GET of ``/obj`` (1 KiB) or ``/o/{size}/0`` (one object of each ``--sizes``) answers a
body from a dict, as cheaply as aiohttp can answer at all. The paths are the ones the
benchmark origin serves, so the same wrk command line measures the floor and the caches.
"""

from __future__ import annotations

import argparse
import asyncio

import uvloop
from aiohttp import web

HEADERS = {"Cache-Control": "max-age=600"}


def bodies(sizes: list[int]) -> dict[str, bytes]:
    table = {"/obj": b"x" * 1024}
    table.update({f"/o/{size}/0": b"x" * size for size in sizes})
    return table


async def serve(port: int, sizes: list[int]) -> None:
    table = bodies(sizes)

    async def handle(request: web.BaseRequest) -> web.Response:
        body = table.get(request.raw_path)
        if body is None:
            return web.Response(status=404)
        return web.Response(body=body, headers=HEADERS)

    runner = web.ServerRunner(web.Server(handle, access_log=None))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, backlog=4096).start()
    print(f"floor http://127.0.0.1:{port}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=18090)
    parser.add_argument("--sizes", default="1024,102400", help="object sizes in bytes")
    args = parser.parse_args()
    uvloop.run(serve(args.port, [int(s) for s in args.sizes.split(",")]))


if __name__ == "__main__":
    main()
