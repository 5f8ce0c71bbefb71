"""The naive design: an aiohttp server that forwards to the origin through aiohttp-client-cache.

Run: taskset -c 1 .venv/bin/python -m benchmarks.peers.client_cache_proxy \\
         --port 18070 --origin-port 19000 [--backend memory|sqlite] [--db PATH]

This is the design the project's first sketch named, written the way its documentation
suggests: one ``CachedSession`` (``cache_control=True``, so max-age is honoured) shared by every
request, the response body and headers copied back to the client. It is the baseline the
budget says the proxy must beat by 5x on hits.

- Every Host is fetched as ``http://{host}:{origin-port}{path}``, and a resolver that answers
  127.0.0.1 for every name sends it to the benchmark origin. So the cache key (a hash of the
  URL) includes the host, as a multi-domain edge needs, and nothing leaves loopback.
- ``POST /__clear?host=H`` deletes every cached response of host H: the library keys entries
  by a hash, so the only way is to walk every key, read its response and compare the URL's
  host. That walk is what the clear scenario measures.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
from typing import Any

import uvloop
from aiohttp import TCPConnector, web
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp_client_cache.backends.base import CacheBackend
from aiohttp_client_cache.session import CachedSession

# Not copied to the client: hop-by-hop fields, and the ones aiohttp sets from the body it sends.
DROP = frozenset(
    {
        "connection",
        "keep-alive",
        "transfer-encoding",
        "content-length",
        "content-encoding",
        "date",
        "server",
        "upgrade",
        "te",
        "trailer",
        "proxy-authenticate",
        "proxy-authorization",
    }
)


class LoopbackResolver(AbstractResolver):
    """Every host name is 127.0.0.1: the origin is on loopback whatever the Host says."""

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [
            {
                "hostname": host,
                "host": "127.0.0.1",
                "port": port,
                "family": socket.AF_INET,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
        ]

    async def close(self) -> None:
        return None


def make_backend(kind: str, db: str) -> CacheBackend:
    if kind == "sqlite":
        # Needs aiosqlite (aiohttp-client-cache[sqlite]); the memory backend does not.
        from aiohttp_client_cache.backends.sqlite import SQLiteBackend

        return SQLiteBackend(cache_name=db, cache_control=True, fast_save=True)
    return CacheBackend(cache_control=True)


async def clear_host(cache: Any, host: str) -> int:
    """Delete every cached response whose URL has this host; return how many."""
    keys = [key async for key in cache.responses.keys()]  # noqa: SIM118 (an async iterator)
    dropped = 0
    for key in keys:
        response = await cache.responses.read(key)
        if response is not None and response.url.host == host:
            await cache.delete(key)
            dropped += 1
    return dropped


async def serve(port: int, origin_port: int, backend: str, db: str) -> None:
    session = CachedSession(
        cache=make_backend(backend, db),
        connector=TCPConnector(resolver=LoopbackResolver(), limit=256),
    )

    async def handle(request: web.BaseRequest) -> web.Response:
        if request.method == "POST" and request.path == "/__clear":
            dropped = await clear_host(session.cache, request.query.get("host", ""))
            return web.Response(text=f"cleared {dropped}\n")
        host = (request.host or "").rsplit(":", 1)[0]
        url = f"http://{host}:{origin_port}{request.raw_path}"
        async with session.get(url) as response:
            body = await response.read()
            headers = [(k, v) for k, v in response.headers.items() if k.lower() not in DROP]
            return web.Response(status=response.status, body=body, headers=headers)

    runner = web.ServerRunner(web.Server(handle, access_log=None))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, backlog=4096).start()
    print(f"client-cache http://127.0.0.1:{port}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await session.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=18070)
    parser.add_argument("--origin-port", type=int, default=19000)
    parser.add_argument("--backend", choices=("memory", "sqlite"), default="memory")
    parser.add_argument("--db", default="client-cache.sqlite", help="the SQLite backend's file")
    args = parser.parse_args()
    uvloop.run(serve(args.port, args.origin_port, args.backend, args.db))


if __name__ == "__main__":
    main()
