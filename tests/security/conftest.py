"""Fixtures for the attack tests.

``origin`` is tests/conftest.py's recording origin; attack tests set its ``default`` handler
to answer every target. ``Site`` is its name here. ``service`` is the whole process in front
of it, on plain HTTP.

The tests that must see every byte an origin is sent use the raw origin instead:
``raw_server`` (a ``RawOrigin`` answering with the module's ``responder``), ``certs``, and
``tls_service``, the whole process with a TLS listener for example.com in front of it.
``h2_client`` is a raw HTTP/2 client connected to that listener.
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
from tests.edge.h2_support import RawH2
from tests.edge.tls_support import Certificates, pair_keys, tls_config
from tests.security.support import OriginRequest, RawOrigin, Responder, ok

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


# The hit lane on and off (decision 0050): each test of the whole process runs with both.
LANES = pytest.fixture(params=[True, False], ids=["lane", "no-lane"])


@LANES
def hit_lane(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.fixture
async def service(tmp_path: Path, origin: Site, hit_lane: bool) -> AsyncIterator[Service]:
    """The whole process as `cdn-proxy serve` runs it: the edge and the API listeners."""
    edge = {"listen": "127.0.0.1:0", "shutdown_timeout": 5, "hit_lane": hit_lane}
    async with running(make_config(tmp_path, origin.url, edge=edge)) as running_service:
        yield running_service


@pytest.fixture
async def make_edge(tmp_path: Path, origin: Site, hit_lane: bool) -> AsyncIterator[EdgeFactory]:
    """The attack tests' edge: the whole edge as ``cdn-proxy serve`` runs it (its guarded
    HTTP/1.1 server), with the hit lane on and with it off (decision 0050), every test run
    against both. (tests/conftest.py's, which these replace, serves the handler on aiohttp's
    test server, without the lane.)"""
    lane = hit_lane
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


def answer_by_target(request: OriginRequest) -> bytes:
    return ok(b"answer for " + request.target.encode())


@pytest.fixture
def responder() -> Responder:
    """How ``raw_server`` answers; a module overrides it with a fixture of the same name."""
    return answer_by_target


@pytest.fixture
async def raw_server(raw_origin: RawOriginFactory, responder: Responder) -> RawOrigin:
    return await raw_origin(responder)


@pytest.fixture
def certs(tmp_path: Path) -> Certificates:
    return Certificates(tmp_path)


@pytest.fixture
async def tls_service(
    tmp_path: Path, raw_server: RawOrigin, certs: Certificates, hit_lane: bool
) -> AsyncIterator[Service]:
    """The whole process, its TLS listener serving example.com from ``raw_server``."""
    keys = {**pair_keys(certs.issue("example.com")), "hit_lane": hit_lane}
    config = tls_config(tmp_path, raw_server.url, edge=keys)
    async with running(config) as running_service:
        yield running_service


@pytest.fixture
async def h2_client(tls_service: Service, certs: Certificates) -> AsyncIterator[RawH2]:
    assert tls_service.tls_url is not None
    connection = await RawH2.open(tls_service.tls_url, certs.client())
    yield connection
    await connection.close()
