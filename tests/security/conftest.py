"""Fixtures for the attack tests.

``origin`` is tests/conftest.py's recording origin; attack tests set its ``default`` handler
to answer every target. ``Site`` is its name here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from proxy.process.service import Service, running
from tests.conftest import Origin, make_config
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
