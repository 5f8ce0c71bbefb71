"""Fixtures for the attack tests.

``origin`` is overridden here: the same recording origin as everywhere else, but one that
can answer every target with a default handler, as real applications do (a catch-all
route, a framework that normalises paths, a page that reflects headers). The edge fixtures
of tests/conftest.py pick it up unchanged.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from proxy.service import Service, running
from tests.conftest import Handler, Origin, Seen, make_config
from tests.security.support import RawOrigin, Responder


@dataclass
class Site(Origin):
    """A recording origin whose unrouted targets go to ``default`` (404 when unset)."""

    default: Handler | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(
            Seen(
                method=request.method,
                target=request.raw_path,
                headers=dict(request.headers),
                header_items=list(request.headers.items()),
                body=await request.read(),
            )
        )
        handler = self.routes.get(request.raw_path, self.default)
        if handler is None:
            return web.Response(status=404, text="no such route in the test origin")
        return await handler(request)


@pytest.fixture
async def origin(aiohttp_server: Callable[..., Awaitable[TestServer]]) -> Site:
    state = Site()
    app = web.Application()
    app.router.add_route("*", r"/{tail:[\s\S]*}", state.handle)  # %0a in a path too
    server = await aiohttp_server(app)
    state.url = str(server.make_url("")).rstrip("/")
    return state


RawOriginFactory = Callable[[Responder], Awaitable[RawOrigin]]


@pytest.fixture
async def raw_origin() -> AsyncIterator[RawOriginFactory]:
    started: list[RawOrigin] = []

    async def start(respond: Responder) -> RawOrigin:
        server = RawOrigin(respond)
        await server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        await server.stop()


@pytest.fixture
async def service(tmp_path: Path, origin: Site) -> AsyncIterator[Service]:
    """The whole process as `cdn-proxy serve` runs it: the edge and the API listeners."""
    async with running(make_config(tmp_path, origin.url)) as running_service:
        yield running_service
