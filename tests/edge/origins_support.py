"""Origin servers a test can kill and bring back on the same port (tests/edge/test_origins.py,
benchmarks/failover.py), each counting what it answered."""

from __future__ import annotations

import asyncio
from collections import Counter

from aiohttp import web

from benchmarks.ports import free_port as _free_port


class Killable:
    """A real aiohttp origin on 127.0.0.1 that answers every path with its own name."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.seen: Counter[str] = Counter()  # request target -> times answered
        self.methods: Counter[str] = Counter()
        self.health_methods: Counter[str] = Counter()  # the probes' methods
        self.health_hangs = False
        self.health_status = 200
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", r"/{tail:[\s\S]*}", self._handle)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True).start()

    async def kill(self) -> None:
        """Stop listening and drop every open connection."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def requests(self) -> int:
        return sum(n for target, n in self.seen.items() if target != "/healthz")

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        if request.raw_path == "/healthz":
            self.seen["/healthz"] += 1
            self.health_methods[request.method] += 1
            if self.health_hangs:
                await asyncio.Event().wait()  # never answers
            return web.Response(status=self.health_status, text="ok")
        self.seen[request.raw_path] += 1
        self.methods[request.method] += 1
        if request.raw_path.startswith("/hangup"):
            # The request reached this server, which then closes without answering.
            assert request.transport is not None
            request.transport.close()
            return web.Response()
        if request.raw_path.startswith("/slow"):
            await asyncio.Event().wait()  # slower than any read_timeout: never answers
        cached = request.raw_path.startswith("/cached")
        control = "max-age=1" if cached else "no-store"
        return web.Response(text=self.name, headers={"Cache-Control": control})


class Refusing:
    """An address where nothing listens: every connect is refused."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
