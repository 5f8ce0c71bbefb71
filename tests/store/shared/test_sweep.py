"""The sweep of the shared tier's body files (issue 31 §5, "orphans"): what a crash leaves
between a body's rename and its commit, or between a commit and the unlink of the files it
replaced, and what a worker killed mid-fill leaves in tmp/, is removed while the node runs,
and counted; live bodies and fills under way are kept."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.store.shared import SharedTier
from proxy.store.shared.markers import GONE, LIVE, Markers
from proxy.store.shared.sweep import Sweep
from tests.store.shared.actor import body, fill
from tests.store.shared.conftest import Actor, body_files

DOMAIN = "example.com"
BIG = 200_000


def read(tier: SharedTier, target: str) -> bytes | None:
    variants = tier.lookup(DOMAIN, target).variants
    return tier.read_all(variants[0]) if variants else None


@pytest.mark.slow
def test_a_worker_killed_mid_fill_leaves_nothing_once_swept(tmp_path: Path) -> None:
    """A real process, killed -9 half way through a large fill while the node runs: its
    temporary file is removed by the node's sweep (before, only a restart of the node did);
    another fill under way in a live process is not touched."""
    tier = SharedTier.open_node(tmp_path / "cache", max_bytes=1 << 30)
    try:
        writer = Actor("fill-hang", tier.directory, tier.instance, DOMAIN, "/big", 8_000_000, 9)
        assert writer.line() == "half"
        live = Actor("fill-hang", tier.directory, tier.instance, DOMAIN, "/live", 8_000_000, 8)
        assert live.line() == "half"
        writer.kill()
        assert len(body_files(tier.bodies / "tmp")) == 2
        Sweep(tier).round()
        assert len(body_files(tier.bodies / "tmp")) == 1  # the live writer's
        stats = tier.stats()
        assert stats.orphans == 1 and stats.orphan_bytes >= 4_000_000
        live.kill()
        assert fill(tier, DOMAIN, "/big", body(9, 300_000))  # the key stores again
        Sweep(tier).round()
        assert body_files(tier.bodies / "tmp") == []
        assert read(tier, "/big") == body(9, 300_000)
    finally:
        tier.close()


def test_files_no_committed_record_names_are_swept(tmp_path: Path) -> None:
    tier = SharedTier.open_node(tmp_path / "cache", max_bytes=64 << 20)
    try:
        for index in range(5):
            assert fill(tier, DOMAIN, f"/keep/{index}", body(index, BIG))
        assert fill(tier, DOMAIN, "/replaced", body(10, BIG))
        (old,) = tier.lookup(DOMAIN, "/replaced").variants
        assert old.path is not None
        kept = tmp_path / "kept"
        os.link(old.path, kept)
        assert fill(tier, DOMAIN, "/replaced", body(11, BIG))  # unlinks the old file
        # Killed between the commit and the unlink: the old file is still there.
        os.link(kept, old.path)
        # Killed between a rename and its commit: a body under the next sequence.
        renamed = tier.bodies / f"{old.sequence + 1000:016x}.body"
        shutil.copyfile(kept, renamed)
        files = body_files(tier.bodies)
        assert len(files) == 8

        Sweep(tier, names=3).round()  # several passes
        assert len(body_files(tier.bodies)) == 6
        assert not old.path.exists() and not renamed.exists()
        stats = tier.stats()
        assert stats.orphans == 2
        assert stats.orphan_bytes == 2 * os.stat(kept).st_size
        for index in range(5):
            assert read(tier, f"/keep/{index}") == body(index, BIG)
        assert read(tier, "/replaced") == body(11, BIG)
    finally:
        tier.close()


def test_a_cleared_domains_files_are_swept(tmp_path: Path) -> None:
    tier = SharedTier.open_node(tmp_path / "cache", max_bytes=64 << 20)
    try:
        for index in range(4):
            assert fill(tier, DOMAIN, f"/gone/{index}", body(index, BIG))
            assert fill(tier, "other.example", f"/stays/{index}", body(index, BIG))
        tier.clear_domain(DOMAIN)
        Sweep(tier).round()
        assert len(body_files(tier.bodies)) == 4
        stats = tier.stats()
        assert stats.swept == 4 and stats.entries == 4 and stats.orphans == 0
    finally:
        tier.close()


CLAIM = """
import sys
from pathlib import Path
from proxy.store.shared.markers import Markers
print(Markers(Path(sys.argv[1])).claim("example.com", sys.argv[2], 600), flush=True)
sys.stdin.read()
"""


def claimer(directory: Path, target: str) -> subprocess.Popen[str]:
    """A process that claims ``target``'s fill and holds it until killed."""
    process = subprocess.Popen(
        [sys.executable, "-c", CLAIM, str(directory), target],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert process.stdout is not None and process.stdout.readline().strip()
    return process


@pytest.mark.slow
def test_the_markers_of_killed_workers_are_swept_and_emptied_at_start(tmp_path: Path) -> None:
    tier = SharedTier.open_node(tmp_path / "cache", max_bytes=4 << 20)
    markers = Markers(tier.directory)
    dead, live = claimer(tier.directory, "/dead"), claimer(tier.directory, "/live")
    try:
        dead.kill()
        dead.communicate()
        assert len(list(markers.directory.iterdir())) == 2
        Sweep(tier).round()
        assert markers.state("example.com", "/dead") == GONE
        assert markers.state("example.com", "/live") == LIVE
    finally:
        live.kill()
        live.communicate()
        tier.close()
    SharedTier.open_node(tmp_path / "cache", max_bytes=4 << 20).close()  # no worker runs yet
    assert not markers.directory.exists()
