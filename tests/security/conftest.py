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
from pathlib import Path

import pytest

from proxy.process.service import Service, running
from tests.conftest import Origin, make_config
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


@pytest.fixture
async def service(tmp_path: Path, origin: Site) -> AsyncIterator[Service]:
    """The whole process as `cdn-proxy serve` runs it: the edge and the API listeners."""
    async with running(make_config(tmp_path, origin.url)) as running_service:
        yield running_service


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
    tmp_path: Path, raw_server: RawOrigin, certs: Certificates
) -> AsyncIterator[Service]:
    """The whole process, its TLS listener serving example.com from ``raw_server``."""
    config = tls_config(tmp_path, raw_server.url, edge={**pair_keys(certs.issue("example.com"))})
    async with running(config) as running_service:
        yield running_service


@pytest.fixture
async def h2_client(tls_service: Service, certs: Certificates) -> AsyncIterator[RawH2]:
    assert tls_service.tls_url is not None
    connection = await RawH2.open(tls_service.tls_url, certs.client())
    yield connection
    await connection.close()
