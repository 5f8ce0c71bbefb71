"""Fixtures for the edge's tests that serve ``Edge.handle`` themselves (test_fast_path.py,
test_hit_response.py): the edge on a fake clock, before any server."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from proxy.edge.handler import Edge
from proxy.edge.origin import new_session
from proxy.store.memory import MemoryStore
from tests.conftest import FakeClock, Origin, make_config
from tests.edge.lane_support import Twins, twins_of


class StillClock(FakeClock):
    """A FakeClock that moves only when the test moves it: these tests compare Age between
    answers sent milliseconds apart, which a real second boundary between them would change."""

    def __init__(self) -> None:
        super().__init__()
        self.start = time.time()

    def __call__(self) -> float:
        return self.start + self.offset


@dataclass
class ClockedEdge:
    edge: Edge
    clock: FakeClock


@pytest.fixture
async def clocked_edge(tmp_path: Path, origin: Origin) -> AsyncIterator[ClockedEdge]:
    """The edge for example.com on the test origin, with a memory store and a clock the test
    moves; closed with its origin session after the test."""
    clock = StillClock()
    config = make_config(tmp_path, origin.url)
    session = new_session()
    edge = Edge(
        config=config,
        store=MemoryStore(max_bytes=config.edge_role()[1].max_bytes),
        session=session,
        clock=clock,
    )
    yield ClockedEdge(edge=edge, clock=clock)
    await edge.close()
    await session.close()


@pytest.fixture
async def twins(tmp_path: Path, origin: Origin) -> AsyncIterator[Twins]:
    """The hit lane's test bed (tests/edge/lane_support.py): an edge with it on and one with
    it off, in front of one origin, the URLs of ``PRIMED`` stored in both."""
    async with twins_of(tmp_path, origin) as made:
        yield made
