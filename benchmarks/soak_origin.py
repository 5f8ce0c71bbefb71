"""The soak's origin (benchmarks/soak.py): versioned bodies, and faults on purpose.

It runs in the soak's own process (on the load core), so that bumping a domain's version
before a clear is one assignment, seen by the next origin request at once. Any Host is
served; the body of every answer starts with ``v<version> `` of that Host's domain:

- ``GET /v/{name}``: ``object_bytes`` bytes, ``Cache-Control: public, max-age=600``;
- ``GET /slow/{name}``: the same after a random delay of up to ``slow_max`` seconds;
- ``GET /err/{name}``: ``503`` with ``X-Soak-Fault: 5xx`` and ``no-store``: a 5xx the origin
  made on purpose, which the edge must pass through as it is (the soak tells it apart from a
  5xx the edge made by this header);
- ``GET /reset/{name}``: a ``200`` whose ``Content-Length`` promises ``object_bytes``, half
  the body, then a TCP reset (SO_LINGER 0): the edge must answer a clean 502 or cut the
  client's response, never serve or store the half;
- ``POST`` anything: reads the whole request body, then answers its length (``no-store``):
  the soak's stalled uploads sit here until the edge gives up on them.

``counts`` says how many requests of each kind reached the origin.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
from collections import Counter

from aiohttp import web

FAULT_HEADER = "X-Soak-Fault"
CACHEABLE = {"Cache-Control": "public, max-age=600", "Content-Type": "application/octet-stream"}


class SoakOrigin:
    def __init__(self, *, object_bytes: int, slow_max: float, seed: int = 0) -> None:
        self.object_bytes = object_bytes
        self.slow_max = slow_max
        self.versions: Counter[str] = Counter()  # domain -> version (0 until bumped)
        self.counts: Counter[str] = Counter()
        self.url = ""
        self._rng = random.Random(seed)
        self._runner: web.ServerRunner | None = None

    def bump(self, domain: str) -> int:
        """The domain's next version: every answer from now on carries it."""
        self.versions[domain] += 1
        return self.versions[domain]

    async def start(self) -> None:
        self._runner = web.ServerRunner(web.Server(self._handle, access_log=None))
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, backlog=4096)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def _body(self, domain: str) -> bytes:
        head = f"v{self.versions[domain]} ".encode()
        return head + b"x" * max(0, self.object_bytes - len(head))

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        domain = (request.host or "").partition(":")[0].lower()
        if request.method == "POST":
            self.counts["post"] += 1
            try:
                body = await request.read()
            except ConnectionResetError:  # the edge gave up on a stalled upload: expected
                self.counts["post abandoned"] += 1
                return web.Response(status=499)
            return web.Response(text=f"{len(body)}\n", headers={"Cache-Control": "no-store"})
        kind = request.path[1:].partition("/")[0]
        self.counts[kind] += 1
        if kind == "slow":
            await asyncio.sleep(self._rng.uniform(0.0, self.slow_max))
        elif kind == "err":
            return web.Response(
                status=503,
                body=self._body(domain),
                headers={FAULT_HEADER: "5xx", "Cache-Control": "no-store"},
            )
        elif kind == "reset":
            return await self._reset(request, domain)
        elif kind != "v":
            return web.Response(status=404, text="not a soak path\n")
        return web.Response(body=self._body(domain), headers=CACHEABLE)

    async def _reset(self, request: web.BaseRequest, domain: str) -> web.StreamResponse:
        body = self._body(domain)
        response = web.StreamResponse(headers={**CACHEABLE, FAULT_HEADER: "reset"})
        response.content_length = len(body)
        await response.prepare(request)
        await response.write(body[: len(body) // 2])
        transport = request.transport
        if transport is not None:
            sock = transport.get_extra_info("socket")
            if sock is not None:  # a reset, not a clean close: the peer sees ECONNRESET
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            transport.abort()
        return response
