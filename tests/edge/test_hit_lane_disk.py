"""The hit lane (issue 35, decision 0050) on an edge with the shared tier: the same bytes as
with the lane off (but Date and Age) on an edge whose memory tier is empty and whose shared
tier holds the primed URLs (a restart between the fill and the requests). A hit read from
disk takes the lane too (``DiskHits.lane_hit``); the memory copy it keeps answers the next."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from proxy.process.service import running
from tests.conftest import FakeClock, Origin, make_config
from tests.edge.lane_support import Twins, site

pytestmark = pytest.mark.slow  # two whole edges, each started twice


@contextlib.asynccontextmanager
async def disk_twins(tmp_path: Path, origin: Origin) -> AsyncIterator[Twins]:
    """The twins with a shared tier each, primed, then started again: memory tier empty."""
    origin.default = site
    clock = FakeClock()
    configs = []
    for name, lane in (("on", True), ("off", False)):
        home = tmp_path / name
        home.mkdir()
        edge = {"listen": "127.0.0.1:0", "shutdown_timeout": 5, "hit_lane": lane}
        cache = {"max_bytes": "16MiB", "max_object_bytes": "1MiB", "disk_path": str(home / "d")}
        configs.append(make_config(home, origin.url, edge=edge, cache=cache))
    on_config, off_config = configs
    async with running(on_config, clock=clock) as on, running(off_config, clock=clock) as off:
        await Twins(on, off, origin, clock).prime()
    async with running(on_config, clock=clock) as on, running(off_config, clock=clock) as off:
        yield Twins(on, off, origin, clock)


def request(target: str, more: bytes = b"") -> bytes:
    return b"GET %s HTTP/1.1\r\nHost: example.com\r\n%s\r\n" % (target.encode(), more)


DISK_HIT = b'Cache-Status: cdn-proxy; hit; detail="disk"\r\n'
MEMORY_HIT = b"Cache-Status: cdn-proxy; hit\r\n"


async def test_on_the_disk_tier_the_lane_answers_as_the_full_path(
    tmp_path: Path, origin: Origin
) -> None:
    async with disk_twins(tmp_path, origin) as twins:
        # A disk hit, then its memory copy's, pipelined in one read: both the lane's.
        on, _ = await twins.compare(request("/hit") * 2)
        assert on.lane_hits == 2
        assert on.answer.data.count(DISK_HIT) == 1, on.answer
        assert on.answer.data.count(MEMORY_HIT) == 1, on.answer
        on, _ = await twins.compare(request("/hit?q=1", b"Accept: */*\r\n") + request("/tagged"))
        assert on.lane_hits == 2
        assert on.answer.data.count(DISK_HIT) == 2, on.answer
        # Their memory copies, the lane's.
        on, _ = await twins.compare(request("/hit") + request("/hit?q=1") + request("/tagged"))
        assert on.lane_hits == 3
        assert on.answer.data.count(MEMORY_HIT) == 3, on.answer
        # What the fast path leaves to the full path from disk, the lane too: Vary's
        # variants, and a body the shared tier keeps in a file (/big's 100 KiB).
        on, _ = await twins.compare(request("/vary") + request("/big"))
        assert on.lane_hits == 0
        assert [target for _, target, _ in on.seen] == ["/end"]  # the rest were hits
        # A HEAD (decision 0055): the lane's from a memory copy, the full path's from disk
        # (a fresh pair of edges, nothing in memory yet).
        head = b"HEAD /hit HTTP/1.1\r\nHost: example.com\r\n\r\n"
        on, _ = await twins.compare(head)
        assert on.lane_hits == 1
        assert on.answer.data.count(MEMORY_HIT + b"Via: ") == 1, on.answer


async def test_a_head_from_the_disk_tier_is_the_full_paths(tmp_path: Path, origin: Origin) -> None:
    async with disk_twins(tmp_path, origin) as twins:
        head = b"HEAD /hit HTTP/1.1\r\nHost: example.com\r\n\r\n"
        on, _ = await twins.compare(head)
        assert on.lane_hits == 0
        assert on.answer.data.count(DISK_HIT) == 1, on.answer
