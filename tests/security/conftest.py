"""Fixtures for the attack tests.

``origin`` is tests/conftest.py's recording origin; attack tests set its ``default`` handler
to answer every target. ``Site`` is its name here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from proxy.process.service import Service, running
from proxy.store.memory import MemoryStore
from tests.conftest import EdgeFactory, EdgeUnderTest, FakeClock, Origin, make_config
from tests.security.support import RawOrigin, Responder

# The shared recording origin; its ``default`` answers every unrouted target, as real
# applications do (a catch-all route, a framework that normalises paths, a page that
# reflects headers).
Site = Origin


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


@pytest.fixture(params=["lane", "no-lane"])
async def make_edge(
    request: pytest.FixtureRequest, tmp_path: Path, origin: Site
) -> AsyncIterator[EdgeFactory]:
    """The attack tests' edge: the whole edge as ``cdn-proxy serve`` runs it (its guarded
    HTTP/1.1 server), with the hit lane on and with it off (decision 0050), every test run
    against both. (tests/conftest.py's, which these replace, serves the handler on aiohttp's
    test server, without the lane.)"""
    lane = request.param == "lane"
    made: list[EdgeUnderTest] = []
    async with AsyncExitStack() as stack:

        async def factory(**overrides: Any) -> EdgeUnderTest:
            clock = FakeClock()
            edge = {"listen": "127.0.0.1:0", "shutdown_timeout": 5, **overrides.pop("edge", {})}
            home = tmp_path / f"edge{len(made)}"
            home.mkdir()
            config = make_config(home, origin.url, edge={**edge, "hit_lane": lane}, **overrides)
            service = await stack.enter_async_context(running(config, clock=clock))
            client = aiohttp.ClientSession(auto_decompress=False)
            stack.push_async_callback(client.close)
            assert isinstance(service.store, MemoryStore)
            made.append(
                under_test := EdgeUnderTest(
                    edge=service.edge,
                    store=service.store,
                    url=service.edge_url,
                    client=client,
                    clock=clock,
                    telemetry=service.telemetry,
                )
            )
            return under_test

        yield factory
