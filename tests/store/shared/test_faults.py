"""Faults of the disk under the shared tier: a corrupt or torn entry is never served, a full,
read-only or deleted directory makes calls fail soft and the tier say it is degraded, and
entries that cannot be trusted after a power loss or a lost purge are emptied (decision 0030)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.core.lease import Applied
from proxy.errors import BodyCorrupt, DiskTierError
from proxy.store.shared import SharedTier
from proxy.store.shared.applied import load_applied, save_applied
from proxy.store.shared.bodies import CHUNK
from proxy.store.shared.health import LOG_INTERVAL, SHOWN, Health
from tests.store.shared.actor import body, fill
from tests.store.shared.conftest import Actor, body_files

DOMAIN = "example.com"


def flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x40]))


# -- corrupt and torn entries -------------------------------------------------------------------


@pytest.mark.parametrize(
    "damage",
    ["first chunk", "last chunk", "chunk table", "truncated", "deleted"],
)
def test_a_damaged_body_file_is_never_served_and_is_removed(tier: SharedTier, damage: str) -> None:
    data = body(1, 5 * CHUNK + 100)
    assert fill(tier, DOMAIN, "/big", data)
    (entry,) = tier.lookup(DOMAIN, "/big").variants
    assert entry.path is not None
    if damage == "first chunk":
        flip(entry.path, 10)
    elif damage == "last chunk":
        flip(entry.path, len(data) - 1)
    elif damage == "chunk table":
        flip(entry.path, len(data) + 2)
    elif damage == "truncated":
        os.truncate(entry.path, len(data) // 2)
    else:
        entry.path.unlink()
    assert tier.read_all(entry) is None
    assert tier.status().corrupt == 1
    assert tier.status().degraded is not None
    assert fill(tier, DOMAIN, "/next", b"n")  # the next write removes the damaged entry
    assert tier.lookup(DOMAIN, "/big").variants == ()
    assert tier.stats().entries == 1


def test_a_stream_stops_at_the_damaged_chunk(tier: SharedTier) -> None:
    data = body(2, 4 * CHUNK)
    assert fill(tier, DOMAIN, "/big", data)
    (entry,) = tier.lookup(DOMAIN, "/big").variants
    assert entry.path is not None
    flip(entry.path, 2 * CHUNK + 5)
    chunks = tier.read_body(entry)
    assert next(chunks) == data[:CHUNK]
    assert next(chunks) == data[CHUNK : 2 * CHUNK]
    with pytest.raises(BodyCorrupt, match="chunk 2"):
        next(chunks)
    # A range that stays out of the damaged chunk is still served, checked.
    assert b"".join(tier.read_body(entry, 0, CHUNK)) == data[:CHUNK]


def test_a_flipped_inline_record_is_a_miss(tmp_path: Path) -> None:
    marker = b"an inline body that can be found in the map " * 4
    tier = SharedTier.open_node(tmp_path, max_bytes=1 << 20)
    assert fill(tier, DOMAIN, "/small", marker)
    assert fill(tier, DOMAIN, "/other", b"other")
    tier.close()
    data = tmp_path / "entries" / "data.mdb"
    content = data.read_bytes()
    offset = content.find(marker)
    while offset >= 0:  # LMDB copies pages on write: older copies hold it too
        flip(data, offset + 20)
        offset = content.find(marker, offset + 1)
    tier = SharedTier.open_node(tmp_path, max_bytes=1 << 20)
    try:
        assert tier.lookup(DOMAIN, "/small").variants == ()
        assert tier.status().corrupt == 1
        assert tier.lookup(DOMAIN, "/other").variants[0].response.body == b"other"
    finally:
        tier.close()


@pytest.mark.parametrize(
    ("boot", "kept"),
    [("another-boot open", False), ("another-boot clean", True), (None, True)],
)
def test_entries_written_before_an_os_crash_are_emptied(
    tmp_path: Path, boot: str | None, kept: bool
) -> None:
    """The entries and the purge state are committed unsynced (decision 0058): a node that
    was open when the machine went down (the boot record names another boot, not closed
    cleanly) may have left them torn, or lost commits, so both are emptied together."""
    tier = SharedTier.open_node(tmp_path, max_bytes=1 << 30)
    assert fill(tier, DOMAIN, "/small", b"s")
    assert fill(tier, DOMAIN, "/big", body(3, 200_000))
    tier.clear_domain("other.example")
    save_applied(tmp_path, Applied("e1", 7, {DOMAIN: 3}))  # what the fleet had applied
    tier.close()
    if boot is not None:
        (tmp_path / "boot").write_text(boot + "\n")
    tier = SharedTier.open_node(tmp_path, max_bytes=1 << 30)
    try:
        assert bool(tier.lookup(DOMAIN, "/small").variants) is kept
        assert bool(tier.lookup(DOMAIN, "/big").variants) is kept
        # The purge state goes with the entries it covered, and is kept with them.
        assert tier.lookup("other.example", "/").token == (1 if kept else 0)
        assert (tmp_path / "state" / "data.mdb").exists()
        # What it says was applied went with them: the first sync starts from nothing.
        assert (load_applied(tmp_path) is not None) is kept
    finally:
        tier.close()


# -- the directory ------------------------------------------------------------------------------


def test_a_deleted_directory_stops_the_tier_without_raising(tier: SharedTier) -> None:
    assert fill(tier, DOMAIN, "/a", b"a")
    shutil.rmtree(tier.directory)
    assert not fill(tier, DOMAIN, "/b", b"b")
    assert not fill(tier, DOMAIN, "/c", body(1, 300_000))
    status = tier.status()
    assert status.stuck and status.degraded is not None and "deleted" in status.degraded
    assert tier.lookup(DOMAIN, "/a").variants == ()  # not served from unlinked files
    assert tier.clear_domain(DOMAIN) is None  # could not be made durable: said, not raised
    assert tier.stats().status.faults >= 3


@pytest.mark.slow
def test_a_worker_sees_a_purge_made_after_the_directory_was_deleted(
    tier: SharedTier,
) -> None:
    assert fill(tier, DOMAIN, "/a", b"a")
    worker = Actor("read-twice", tier.directory, tier.instance, DOMAIN, "/a")
    assert worker.line() == "hit " + hashlib.sha256(b"a").hexdigest()
    shutil.rmtree(tier.directory)
    assert tier.clear_domain(DOMAIN) is None  # not durable, but committed for live readers
    worker.say("again")
    assert worker.line() == "miss"


def test_stop_voids_the_entries_for_the_next_start(tmp_path: Path) -> None:
    tier = SharedTier.open_node(tmp_path, max_bytes=1 << 20)
    assert fill(tier, DOMAIN, "/a", b"a")
    tier.stop("a worker could not apply a purge")
    assert tier.lookup(DOMAIN, "/a").variants == ()
    assert tier.status().stuck
    tier.close()
    tier = SharedTier.open_node(tmp_path, max_bytes=1 << 20)
    try:
        assert tier.lookup(DOMAIN, "/a").variants == ()
        assert not tier.status().stuck
        assert fill(tier, DOMAIN, "/a", b"again")
    finally:
        tier.close()


def test_a_directory_replaced_while_running_is_noticed(tier: SharedTier) -> None:
    shutil.rmtree(tier.directory)
    (tier.directory / "bodies").mkdir(parents=True)
    assert not tier.check_directory()
    assert tier.status().stuck


@pytest.fixture
def public_tmp() -> Iterator[Path]:
    """A temporary directory another user can reach (pytest's tmp_path is root's alone)."""
    with tempfile.TemporaryDirectory(prefix="shared-tier-") as name:
        os.chmod(name, 0o755)
        yield Path(name)


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="gives the directory to nobody: needs root")
def test_a_directory_made_read_only_while_running(public_tmp: Path) -> None:
    """As a node not running as root (root writes anyway): files it has open stay writable,
    so small fills may still land; a new body file cannot be made, and that is reported."""
    directory = public_tmp / "cache"
    node = Actor("read-only", directory)
    assert node.line() == "filled"
    for path in [directory, *directory.rglob("*")]:
        shutil.chown(path, "nobody")
    node.say("nobody now")
    assert json.loads(node.line()) == {"before": True, "uid": 65534}  # it could write
    for path in [directory, *directory.rglob("*")]:
        path.chmod(path.stat().st_mode & ~0o222)
    node.say("read-only now")
    result = json.loads(node.line())
    assert node.returncode() == 0  # nothing raised
    assert result["large"] is False
    assert result["hit"] == ["a"]
    assert result["status"]["degraded"].startswith("fill: [Errno 13] Permission denied")
    assert result["status"]["dropped_fills"] == 1


@pytest.mark.parametrize("under", ["file", "file/cache"])
def test_a_directory_that_cannot_be_opened_is_a_clear_error(tmp_path: Path, under: str) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(DiskTierError) as raised:
        SharedTier.open_node(tmp_path / under, max_bytes=1 << 20)
    assert str(raised.value) == (
        f"cache directory {tmp_path / under}: {tmp_path / 'file'} is not a directory"
    )


def test_a_directory_that_fails_once_locked_is_a_clear_error_and_left_unlocked(
    tmp_path: Path,
) -> None:
    """Past the lock (here LMDB cannot make its environment: a file stands where it goes),
    the error names the directory, and the lock is released: the next open takes it."""
    directory = tmp_path / "cache"
    directory.mkdir()
    (directory / "entries").write_text("not a directory")
    with pytest.raises(DiskTierError) as raised:
        SharedTier.open_node(directory, max_bytes=1 << 20)
    assert str(raised.value).startswith(f"cache directory {directory}: ")
    assert "Not a directory" in str(raised.value)
    (directory / "entries").unlink()
    tier = SharedTier.open_node(directory, max_bytes=1 << 20)
    tier.close()


# -- a full disk --------------------------------------------------------------------------------


def test_a_full_disk_drops_fills_and_keeps_serving(small_disk: Path) -> None:
    tier = SharedTier.open_node(small_disk / "cache", max_bytes=1 << 30)
    try:
        assert fill(tier, DOMAIN, "/a", b"a")
        assert not fill(tier, DOMAIN, "/big", body(1, 3_000_000))
        status = tier.status()
        assert status.degraded is not None and "No space left" in status.degraded
        assert status.dropped_fills == 1 and not status.stuck
        assert tier.lookup(DOMAIN, "/a").variants[0].response.body == b"a"
        assert tier.lookup(DOMAIN, "/big").variants == ()
        assert body_files(small_disk / "cache" / "bodies") == []  # no partial file
        assert fill(tier, DOMAIN, "/b", b"b")  # room again: healthy again
        assert tier.health.degraded is None  # (its status shows the fault for SHOWN seconds)
    finally:
        tier.close()


def test_a_purge_on_a_full_disk_never_lets_a_purged_entry_out(small_disk: Path) -> None:
    directory = small_disk / "cache"
    tier = SharedTier.open_node(directory, max_bytes=1 << 30)
    assert fill(tier, DOMAIN, "/a", b"a")
    ballast = os.open(small_disk / "ballast", os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(ballast, b"\1" * 4096):
            pass
    except OSError as full:
        assert full.errno == errno.ENOSPC
    finally:
        os.close(ballast)
    number = tier.clear_domain(DOMAIN)
    assert number == 1 or (number is None and tier.status().stuck)
    assert tier.lookup(DOMAIN, "/a").variants == ()
    tier.close()
    (small_disk / "ballast").unlink()
    tier = SharedTier.open_node(directory, max_bytes=1 << 30)
    try:
        assert tier.lookup(DOMAIN, "/a").variants == ()  # after a restart too
    finally:
        tier.close()


# -- what the tier says -------------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["corrupt", "write"])
def test_a_fault_keeps_the_tier_degraded_for_a_while_after_fills_work(fault: str) -> None:
    now = [100.0]
    health = Health("/cache", clock=lambda: now[0])
    if fault == "corrupt":
        health.corrupted("b'example.com /a': checksum")
        shown = "corrupt entry: b'example.com /a': checksum"
    else:
        health.fault("fill", PermissionError(13, "Permission denied"))
        shown = "fill: [Errno 13] Permission denied"
    health.recovered()  # the next fill worked
    assert health.degraded is None
    assert health.status().degraded == shown
    now[0] += SHOWN - 1
    assert health.status().degraded is not None
    now[0] += 1
    assert health.status().degraded is None
    assert health.status().corrupt + health.status().faults == 1  # counted for good


@pytest.mark.slow
def test_faults_are_logged_once_per_interval_with_the_count_between(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    health = Health("/cache", clock=lambda: now[0])
    with caplog.at_level("WARNING", logger="proxy.store.shared"):
        for _ in range(5):
            health.fault("fill", OSError(28, "No space left on device"))
        now[0] += LOG_INTERVAL
        health.fault("fill", OSError(28, "No space left on device"))
    lines = [record.getMessage() for record in caplog.records]
    assert lines == [
        "shared tier /cache: fill: [Errno 28] No space left on device",
        "shared tier /cache: fill: [Errno 28] No space left on device (4 more since the last "
        "report)",
    ]
    assert health.status().faults == 6
