"""The shared tier: one cache per node, on local disk, for every worker of the node (decision 0030).

Layout of the directory (``[cache] disk_path``):

    lock       flock'ed by the node (lock.py)      boot      clean/open record (lock.py)
    entries/   LMDB, unsynced: entry records, eviction order, totals (records.py), and the
               S3-FIFO queues (s3fifo.py)     hits   its hit counters, mapped (hits.py)
    bodies/    bodies over INLINE_MAX bytes, one file each (bodies.py)
    state/     LMDB, synced: per-domain purge state (purge_state.py)

Reads (``lookup``, ``read_body``) run in the caller's thread: a read transaction on a shared
map, no lock, no other process involved. Writes (a fill's ``commit``, purges, removals of
dead entries) are LMDB write transactions, one writer at a time per environment across the
node's processes; they are short (a body is streamed to its file before the transaction), and
the async callers run them in the tier's writer thread (fill.py), never on the event loop.

Faults never reach the caller (health.py): a failed lookup is a miss, a failed fill is
dropped, and the tier reports itself degraded.

The tier is split by concept: what an opened directory holds (handles.py), the reads
(reads.py), the purges (purging.py); ``SharedTier`` is them together, and this module opens
a directory for the node or for one of its workers.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import lmdb

from proxy.config.filesystems import refusal
from proxy.core.purge.retention import DEFAULT_MAX_BYTES
from proxy.errors import DiskTierError
from proxy.store.shared import bodies
from proxy.store.shared.applied import APPLIED_FILE
from proxy.store.shared.evict import Evictor
from proxy.store.shared.handles import DISTRUST_FILE, FORMAT, STAMP_FILE, SharedStats
from proxy.store.shared.lock import NodeLock, check_member, unclean_since_boot, write_boot
from proxy.store.shared.markers import FILLS
from proxy.store.shared.purging import TierPurges
from proxy.store.shared.reads import SharedEntry, SharedLookup, TierReads
from proxy.store.shared.records import KEY_FORMAT

__all__ = [
    "DISTRUST_FILE",
    "FORMAT",
    "STAMP_FILE",
    "SharedEntry",
    "SharedLookup",
    "SharedStats",
    "SharedTier",
]


class SharedTier(TierReads, TierPurges):
    """The node's shared tier as one process opened it: its reads (reads.py), its purges
    (purging.py), and the handles both use (handles.py)."""

    # -- opening and closing --------------------------------------------------------------------

    @classmethod
    def open_node(
        cls,
        directory: str | Path,
        *,
        max_bytes: int,
        evictor: Evictor | None = None,
        purge_max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> SharedTier:
        """Open the directory for the node, taking its lock: CacheDirectoryLocked when
        another node has it, DiskTierError when it cannot be used at all (naming it and
        why). Entries that cannot be trusted (the last run ended in an OS crash or a power
        loss, or lost a purge) are emptied first."""
        path = Path(directory)
        refused = refusal(path)  # the config refuses it too: a caller that passed no config
        if refused is not None:
            raise DiskTierError(f"cache directory {path}: {refused}")
        try:
            path.mkdir(parents=True, exist_ok=True)
            lock = NodeLock.acquire(path)
        except (FileExistsError, NotADirectoryError):  # a file where the directory goes
            blocking = next(p for p in (path, *path.parents) if p.exists())
            raise DiskTierError(f"cache directory {path}: {blocking} is not a directory") from None
        except OSError as error:
            raise DiskTierError(f"cache directory {path}: {error.strerror or error}") from None
        try:
            with _opening(path):
                crashed = unclean_since_boot(path)
                stale = crashed or (path / DISTRUST_FILE).exists()
                if stale or not _keys_current(path / "entries"):
                    shutil.rmtree(path / "entries", ignore_errors=True)
                    shutil.rmtree(path / "bodies", ignore_errors=True)
                    (path / DISTRUST_FILE).unlink(missing_ok=True)
                if crashed:  # its unsynced commits may be lost or torn (decision 0058)
                    shutil.rmtree(path / "state", ignore_errors=True)
                    (path / APPLIED_FILE).unlink(missing_ok=True)
                (path / "state" / "epoch").unlink(missing_ok=True)  # the stamp's old name
                shutil.rmtree(path / "bodies" / bodies.TMP, ignore_errors=True)  # killed fills
                shutil.rmtree(path / FILLS, ignore_errors=True)  # their markers: no fill runs
                (path / "bodies" / bodies.TMP).mkdir(parents=True)
                write_boot(path, "open")
                return cls(
                    path,
                    max_bytes=max_bytes,
                    lock=lock,
                    evictor=evictor,
                    purge_max_bytes=purge_max_bytes,
                )
        except BaseException:
            lock.release()
            raise

    @classmethod
    def open_member(
        cls,
        directory: str | Path,
        *,
        max_bytes: int,
        instance: str,
        evictor: Evictor | None = None,
        purge_max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> SharedTier:
        """Open the directory as a worker of the node whose instance id is ``instance``:
        CacheDirectoryLocked unless that node holds it. (One process opens a directory once:
        LMDB refuses a second environment on the same files in one process.)"""
        path = Path(directory)
        check_member(path, instance)
        with _opening(path):
            return cls(
                path,
                max_bytes=max_bytes,
                lock=None,
                evictor=evictor,
                purge_max_bytes=purge_max_bytes,
            )


@contextlib.contextmanager
def _opening(path: Path) -> Iterator[None]:
    """Opening the directory at ``path``: what the disk or LMDB refuses is a DiskTierError
    naming the directory."""
    try:
        yield
    except (OSError, lmdb.Error) as error:
        raise DiskTierError(f"cache directory {path}: {error}") from None


def _keys_current(entries: Path) -> bool:
    """Whether the entries environment at ``entries`` (if any) keys its records with this
    code's layout (records.KEY_FORMAT). Read by the node before any worker opens it."""
    if not (entries / "data.mdb").exists():
        return True
    env = lmdb.open(str(entries), readonly=True, lock=False, max_dbs=12)
    try:
        with env.begin() as txn:
            try:
                meta = env.open_db(b"meta", txn=txn, create=False)
            except lmdb.NotFoundError:
                return False
            return txn.get(FORMAT, db=meta) == KEY_FORMAT
    finally:
        env.close()
