"""The shared tier's fill-in-progress markers (proxy/store/shared/markers.py), across real
processes: a claim is exclusive while its holder lives and its deadline has not passed."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from proxy.edge.node_fills import wait_for_worker
from proxy.store.memory import MemoryStore
from proxy.store.shared import owners
from proxy.store.shared.markers import GONE, LIVE, STALE, Markers, boot_clock

CLAIM = """
import sys
from pathlib import Path
from proxy.store.shared.markers import Markers
print(repr(Markers(Path(sys.argv[1])).claim("example.com", "/a", float(sys.argv[2]))), flush=True)
sys.stdin.read()  # holds its marker until told to end
"""


async def other_process(directory: Path, lifetime: float) -> tuple[asyncio.subprocess.Process, str]:
    """A process that claims /a and stays alive; what its claim returned."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CLAIM,
        str(directory),
        str(lifetime),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert process.stdout is not None
    return process, (await process.stdout.readline()).decode().strip()


@pytest.mark.slow
async def test_another_live_process_holds_the_key_until_it_releases_or_dies(
    tmp_path: Path,
) -> None:
    markers = Markers(tmp_path)
    assert markers.state("example.com", "/a") == GONE
    process, claimed = await other_process(tmp_path, 60)
    assert claimed.startswith(f"'{process.pid}.")
    assert markers.state("example.com", "/a") == LIVE
    assert markers.claim("example.com", "/a", 60) is None  # held: this process waits
    assert markers.claim("example.com", "/b", 60)  # another key is free
    process.kill()
    await process.wait()
    assert markers.state("example.com", "/a") == STALE  # its process is gone
    text = markers.claim("example.com", "/a", 60)
    assert text and text.startswith(f"{owners.me()} ")  # replaced
    markers.release("example.com", "/a", "someone else's")
    assert markers.state("example.com", "/a") == STALE  # still there: not ours to remove
    markers.release("example.com", "/a", text)
    assert markers.state("example.com", "/a") == GONE


async def test_a_marker_past_its_deadline_is_ignored(tmp_path: Path) -> None:
    process, claimed = await other_process(tmp_path, 5)
    markers = Markers(tmp_path, clock=lambda: boot_clock() + 10)  # 10 s later: past its deadline
    try:
        assert claimed != "None"
        assert markers.state("example.com", "/a") == STALE
        assert markers.claim("example.com", "/a", 5)
    finally:
        process.kill()
        await process.wait()


def test_a_directory_that_cannot_hold_markers_lets_every_claim_lead(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    markers = Markers(gone)  # its directory does not exist: no markers, no waiting
    assert markers.claim("example.com", "/a", 5) == ""
    assert markers.state("example.com", "/a") == GONE
    markers.release("example.com", "/a", "")


@pytest.mark.slow
def test_renew_moves_only_this_processs_own_marker(tmp_path: Path) -> None:
    now = [1_000.0]
    markers = Markers(tmp_path, clock=lambda: now[0])
    text = markers.claim("example.com", "/a", 5.0)
    assert text == f"{owners.me()} 1005.000"
    now[0] = 1_003.0
    renewed = markers.renew("example.com", "/a", text, 5.0)
    assert renewed == f"{owners.me()} 1008.000"
    marker = markers.directory / next(p.name for p in markers.directory.iterdir())
    assert marker.read_text() == renewed
    assert markers.renew("example.com", "/a", text, 5.0) is None  # no longer the old text
    assert [p.name for p in markers.directory.iterdir()] == [marker.name]  # no spare left
    markers.release("example.com", "/a", renewed)
    assert list(markers.directory.iterdir()) == []
    assert markers.renew("example.com", "/a", renewed, 5.0) is None  # released: gone
    assert markers.renew("example.com", "/a", "", 5.0) is None  # led unmarked


@pytest.mark.slow
async def test_a_dead_leaders_marker_is_stale_though_its_pid_was_reused(tmp_path: Path) -> None:
    """The leader is killed -9; its pid goes to another process (here: the marker is made
    to name a live stranger's pid, as the kernel may after a crash), and the wall clock may
    have stepped back past its deadline: the marker is stale all the same, and replaced."""
    markers = Markers(tmp_path)
    leader, claimed = await other_process(tmp_path, 600)
    stranger, _ = await other_process(tmp_path / "elsewhere", 600)
    try:
        assert claimed != "None"
        leader.kill()
        await leader.wait()
        (marker,) = markers.directory.iterdir()
        marker.write_text(marker.read_text().replace(str(leader.pid), str(stranger.pid), 1))
        assert markers.state("example.com", "/a") == STALE
        assert markers.claim("example.com", "/a", 5)
    finally:
        stranger.kill()
        await stranger.wait()


@pytest.mark.slow
async def test_a_wait_for_another_worker_is_bounded(tmp_path: Path) -> None:
    """A live leader's marker that stays live (here for ten minutes) holds a waiting worker
    ``limit`` seconds at most: it then fetches by itself (timed out)."""
    leader, claimed = await other_process(tmp_path, 600)
    try:
        assert claimed != "None"
        markers = Markers(tmp_path)
        assert markers.state("example.com", "/a") == LIVE
        loop = asyncio.get_running_loop()
        began = loop.time()
        waited = await wait_for_worker(
            store=MemoryStore(max_bytes=1 << 20),
            markers=markers,
            domain="example.com",
            target="/a",
            headers=CIMultiDictProxy(CIMultiDict()),
            coding="identity",
            obey=True,
            clock=time.time,
            limit=0.3,
        )
        assert waited.response is None and waited.timed_out
        assert 0.3 <= loop.time() - began < 5
        assert markers.state("example.com", "/a") == LIVE  # it was live all along
    finally:
        leader.kill()
        await leader.wait()
