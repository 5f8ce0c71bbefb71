"""The bare-aiohttp floor: a low-level ``web.Server``, a dict, nothing else.

Run: taskset -c 1 .venv/bin/python -m benchmarks.floor --port 18090
Every GET answers the same 1 KiB body from a dict, as cheaply as aiohttp can answer at all.
"""

from __future__ import annotations

import argparse
import asyncio

import uvloop
from aiohttp import web

BODIES = {"/obj": b"x" * 1024}


async def handle(request: web.BaseRequest) -> web.Response:
    body = BODIES.get(request.raw_path)
    if body is None:
        return web.Response(status=404)
    return web.Response(body=body, headers={"Cache-Control": "max-age=600"})


async def serve(port: int) -> None:
    runner = web.ServerRunner(web.Server(handle, access_log=None))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=18090)
    uvloop.run(serve(parser.parse_args().port))


if __name__ == "__main__":
    main()
