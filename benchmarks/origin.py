"""The benchmark origin: any number of objects of any size, cacheable for a day, and a counter.

Run: taskset -c 0 .venv/bin/python -m benchmarks.origin --port 19000 [--slow-ms 50]

- ``GET /o/{size}/{name}`` answers ``size`` bytes at once, ``Cache-Control: public,
  max-age=86400``. ``name`` is anything: every name is a distinct object to a cache.
- ``GET /tagged/{size}/{name}`` is the same with five tags (``Surrogate-Key``), for the hit
  cost of a tagged entry (``benchmarks.instructions --tagged``).
- ``GET /slow/{size}/{name}`` is the same after ``--slow-ms`` milliseconds, like an origin
  across a network; the origin-protection scenario uses it so concurrent misses overlap.
- ``GET /etag/{size}/{name}`` is the slow object with a validator: ``ETag`` (the same for
  the life of the origin), answered ``304 Not Modified`` to a matching ``If-None-Match``;
  ``/swr/{size}/{name}`` adds ``stale-while-revalidate=60``. The soft-purge benchmark
  (``benchmarks.soft_purge``) uses them: a soft purge makes the cache revalidate.
- ``GET /private/{size}/{name}`` is the slow object with ``Cache-Control: private``: never
  stored by a shared cache (the hit-for-miss benchmark, ``benchmarks.hit_for_miss``).
- ``GET /__origin/counts`` answers ``FULL NOT_MODIFIED``: the object requests answered with
  the body and with 304 since the last reset.
- ``GET /__origin/count`` answers how many object requests were served since the last
  ``POST /__origin/reset`` (the counter requests themselves are not counted). Caches never
  see these paths: the runner asks the origin directly.
- ``GET /__origin/bytes`` answers the body bytes sent since the last reset (the origin
  bytes of a hit-ratio replay, benchmarks/shared_replay.py).

A low-level ``web.Server`` on uvloop with bodies built once per size, so the origin is never
what limits a fill.
"""

from __future__ import annotations

import argparse
import asyncio

import uvloop
from aiohttp import web

MAX_SIZE = 64 * 1024 * 1024
HEADERS = {"Cache-Control": "public, max-age=86400", "Content-Type": "application/octet-stream"}
TAGGED = {**HEADERS, "Surrogate-Key": "product-1 category-2 page-3 author-4 site"}
VALIDATED = {**HEADERS, "ETag": '"v1"'}
PRIVATE = {**HEADERS, "Cache-Control": "private, max-age=86400"}
SWR = {
    **VALIDATED,
    "Cache-Control": "public, max-age=86400, stale-while-revalidate=60",
}


class Origin:
    def __init__(self, slow_ms: float) -> None:
        self.slow = slow_ms / 1000
        self.count = 0
        self.not_modified = 0
        self.bytes = 0  # body bytes sent
        self._bodies: dict[int, bytes] = {}

    def body(self, size: int) -> bytes:
        body = self._bodies.get(size)
        if body is None:
            body = self._bodies[size] = b"x" * size
        return body

    async def handle(self, request: web.BaseRequest) -> web.Response:
        path = request.path
        if path.startswith("/__origin/"):
            if path == "/__origin/count":
                return web.Response(text=f"{self.count}\n")
            if path == "/__origin/counts":
                full = self.count - self.not_modified
                return web.Response(text=f"{full} {self.not_modified}\n")
            if path == "/__origin/bytes":
                return web.Response(text=f"{self.bytes}\n")
            if path == "/__origin/reset" and request.method == "POST":
                self.count = self.not_modified = self.bytes = 0
                return web.Response(text="0\n")
            return web.Response(status=404)
        kind, _, rest = path[1:].partition("/")
        size_text, _, name = rest.partition("/")
        if (
            kind not in ("o", "slow", "tagged", "etag", "swr", "private")
            or not size_text.isdigit()
            or not name
        ):
            return web.Response(status=404, text="not an object path\n")
        size = int(size_text)
        if size > MAX_SIZE:
            return web.Response(status=413)
        self.count += 1
        if kind in ("slow", "etag", "swr", "private") and self.slow > 0:
            await asyncio.sleep(self.slow)
        if kind in ("etag", "swr"):
            headers = SWR if kind == "swr" else VALIDATED
            if request.headers.get("If-None-Match") == VALIDATED["ETag"]:
                self.not_modified += 1
                return web.Response(status=304, headers=headers)
            self.bytes += size
            return web.Response(body=self.body(size), headers=headers)
        headers = TAGGED if kind == "tagged" else PRIVATE if kind == "private" else HEADERS
        self.bytes += size
        return web.Response(body=self.body(size), headers=headers)


async def serve(host: str, port: int, slow_ms: float) -> None:
    origin = Origin(slow_ms)
    runner = web.ServerRunner(web.Server(origin.handle, access_log=None))
    await runner.setup()
    await web.TCPSite(runner, host, port, backlog=4096).start()
    print(f"origin http://{host}:{port}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=19000)
    parser.add_argument("--slow-ms", type=float, default=50.0, help="delay of /slow/ objects")
    args = parser.parse_args()
    uvloop.run(serve(args.host, args.port, args.slow_ms))


if __name__ == "__main__":
    main()
