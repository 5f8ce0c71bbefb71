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
  the soak's stalled uploads sit here until the edge gives up on them;
- the range abuse's objects (issue 24, 1), each honouring a single ``Range: bytes=A-B`` with a
  ``206`` as an origin serving files does: ``GET /nostore3m/{name}`` (3 MiB, ``no-store``),
  ``GET /big1m/{name}`` (1 MiB, cacheable; the abuse adds a cache-busting query) and
  ``GET /chunked10m/{name}`` (10 MiB, cacheable, chunked: no ``Content-Length``, over
  ``cache.max_object_bytes``);
- ``GET /ws/{name}``: a WebSocket held open until the other side closes it (the tunnels of
  one address taking connections, issue 24, 4).

``counts`` says how many requests of each kind reached the origin, ``bytes_sent`` how many
body bytes it wrote for each kind (what the range abuse costs the origin).
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
MIB = 1024 * 1024
RANGED = {  # kind -> (size, headers, chunked)
    "nostore3m": (3 * MIB, {"Cache-Control": "no-store"}, False),
    "big1m": (1 * MIB, CACHEABLE, False),
    "chunked10m": (10 * MIB, CACHEABLE, True),
}
CHUNK = 64 * 1024
_PAYLOAD = bytes(range(256)) * (10 * MIB // 256)


class SoakOrigin:
    def __init__(self, *, object_bytes: int, slow_max: float, seed: int = 0) -> None:
        self.object_bytes = object_bytes
        self.slow_max = slow_max
        self.versions: Counter[str] = Counter()  # domain -> version (0 until bumped)
        self.counts: Counter[str] = Counter()
        self.bytes_sent: Counter[str] = Counter()  # kind -> body bytes written
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
            length = 0
            try:  # not request.read(): its 1 MiB client_max_size would answer 413 to uploads
                async for piece in request.content.iter_any():
                    length += len(piece)
            except ConnectionResetError:  # the edge gave up on a stalled upload: expected
                self.counts["post abandoned"] += 1
                return web.Response(status=499)
            return web.Response(text=f"{length}\n", headers={"Cache-Control": "no-store"})
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
        elif kind in RANGED:
            return await self._ranged(request, kind)
        elif kind == "ws":
            return await self._websocket(request)
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

    async def _ranged(self, request: web.BaseRequest, kind: str) -> web.StreamResponse:
        size, headers, chunked = RANGED[kind]
        span = _byte_range(request.headers.get("Range", ""), size)
        if span is not None:
            first, last = span
            body = _PAYLOAD[first : last + 1]
            self.bytes_sent[kind] += len(body)
            return web.Response(
                status=206,
                body=body,
                headers={**headers, "Content-Range": f"bytes {first}-{last}/{size}"},
            )
        if not chunked:
            self.bytes_sent[kind] += size
            return web.Response(body=_PAYLOAD[:size], headers=headers)
        response = web.StreamResponse(headers=headers)
        response.enable_chunked_encoding()
        await response.prepare(request)
        for at in range(0, size, CHUNK):
            await response.write(_PAYLOAD[at : at + CHUNK])  # raises when the edge lets go
            self.bytes_sent[kind] += min(CHUNK, size - at)
        await response.write_eof()
        return response

    async def _websocket(self, request: web.BaseRequest) -> web.StreamResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for _ in ws:  # held until the edge (or the client through it) closes it
            pass
        return ws


def _byte_range(value: str, size: int) -> tuple[int, int] | None:
    """A single ``bytes=A-B`` (or ``A-``) within ``size``; None for anything else (the
    whole object is sent, as RFC 9110 lets a server do)."""
    unit, _, spec = value.partition("=")
    if unit.strip() != "bytes" or "," in spec:
        return None
    first, _, last = spec.strip().partition("-")
    if not first.isdigit() or (last and not last.isdigit()):
        return None
    start, end = int(first), min(int(last) if last else size - 1, size - 1)
    return (start, end) if start <= end else None
