"""The shared tier's handles (decision 0030): what a process holds once it has opened the
directory, and what every part of the tier uses.

``TierHandles`` opens the two LMDB environments (``entries/``, unsynced; ``state/``, synced:
purge_state.py), the evictor's databases and the writer thread, and closes them. It holds
what the reads (reads.py) and the purges (purging.py) share: the transactions of the entries
environment, the entries readers found dead (``_doom``: removed by the next write, doomed.py),
the check that the directory is still the one opened, and ``stop``, which serves nothing more
until the node restarts. ``SharedTier`` (tier.py) is these parts together, and its opening.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import struct
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import lmdb

from proxy.core.purge.retention import DEFAULT_MAX_BYTES
from proxy.store.shared import bodies, pages
from proxy.store.shared.decoded import Decoded
from proxy.store.shared.doomed import Doomed
from proxy.store.shared.evict import Evictor
from proxy.store.shared.health import Health, TierStatus
from proxy.store.shared.lock import NodeLock, write_boot
from proxy.store.shared.purge_state import PurgeStateStore
from proxy.store.shared.records import KEY_FORMAT
from proxy.store.shared.s3fifo import S3FifoEvictor, own_counters
from proxy.store.shared.tables import Removals

FORMAT = b"format"  # the meta record naming the entry keys' layout
DISTRUST_FILE = "distrust"  # written when a purge could not be made durable: entries are void
STAMP_FILE = "stamp"  # the last purge's transaction id (purge_state.py); "epoch" until 0053
_U64 = struct.Struct(">Q")  # big-endian: LMDB orders the eviction keys by it
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SharedStats:
    entries: int
    bytes: int
    max_bytes: int
    evictions: int
    status: TierStatus
    purge_state_bytes: int = 0  # the purge records' bytes, against cache.purge_state_max_bytes
    purge_state_max_bytes: int = 0
    purge_folds: int = 0  # domains cleared to keep the purge state within its budget
    orphans: int = 0  # body files no record named, removed by the sweep (sweep.py)
    orphan_bytes: int = 0
    swept: int = 0  # entries of cleared domains the sweep removed with their files
    retired_urls: int = 0  # URLs whose purge records retired (retire.py, decision 0059)


class TierHandles:
    def __init__(
        self,
        directory: Path,
        *,
        max_bytes: int,
        lock: NodeLock | None,
        evictor: Evictor | None = None,
        clock: Callable[[], float] = time.time,
        purge_max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.health = Health(str(directory))
        self.bodies = directory / "bodies"
        self._lock = lock
        self.evictor: Evictor = S3FifoEvictor() if evictor is None else evictor
        self._clock = clock
        self._inode = os.stat(directory).st_ino
        self._env = lmdb.open(
            str(directory / "entries"),
            map_size=pages.map_size(max_bytes),
            max_dbs=12,
            sync=False,
            metasync=False,
        )
        self.db_entries = self._env.open_db(b"entries")
        self.db_order = self._env.open_db(b"order")
        self.db_meta = self._env.open_db(b"meta")
        self.capacity = pages.usable_bytes(max_bytes)  # entries' costs, and pages in use
        self.evictor.open(self._env, directory, self.capacity, self.health)  # its own databases
        self._counters = own_counters(self.evictor)  # raised in place by ``peek``, if any
        if lock is not None:  # the node: entries of another key layout were emptied
            with self._env.begin(write=True, db=self.db_meta) as txn:
                txn.put(FORMAT, KEY_FORMAT)
        self.trees = _trees(self._env)  # every database, for the pages in use (pages.py)
        self.commits = 0  # fills this process committed (fill.py measures every few)
        # Unsynced, as the entries are (decision 0058): a commit is in the page cache when it
        # returns, so every process sees it and a kill -9 loses none; only an OS crash or a
        # power loss can, and after one the node empties entries and purge state together
        # at start (``open_node``), so nothing a lost purge covered is left to serve.
        self._state_env = lmdb.open(
            str(directory / "state"),
            map_size=pages.state_map_size(purge_max_bytes),
            max_dbs=0,
            sync=False,
            metasync=False,
        )
        self.purges = PurgeStateStore(
            self._state_env, directory / "state" / STAMP_FILE, purge_max_bytes
        )
        self._doomed = Doomed()  # dead or corrupt: removed by the next write (doomed.py)
        self._decoded = Decoded()  # records the fast path decoded, with their bytes (decoded.py)
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="shared-tier")
        self._next_check = 0.0  # when ``lookup`` next checks the directory (monotonic)

    @property
    def instance(self) -> str | None:
        """The node's instance id, for its workers (None in a worker)."""
        return None if self._lock is None else self._lock.holder.instance

    def close(self) -> None:
        self._writer.shutdown(wait=True)
        clean = self._lock is not None and not self.health.stuck
        try:
            if clean:
                self._env.sync(True)
                self._state_env.sync(True)
                write_boot(self.directory, "clean")
        except (lmdb.Error, OSError) as error:
            self.health.fault("close", error)
        self.evictor.close()
        self._env.close()
        self.purges.close()
        self._state_env.close()
        if self._lock is not None:
            self._lock.release()

    async def run(self, call: Callable[[], T]) -> T:
        """Run a write of the tier in its writer thread."""
        return await asyncio.get_running_loop().run_in_executor(self._writer, call)

    def _doom(self, key: bytes, sequence: int) -> None:
        """Have the next write remove an entry found dead or corrupt (a reader never writes:
        a write transaction could wait for another process's). Bounded: one never removed
        here is still never served, and is evicted in its turn."""
        self._doomed.add(key, sequence)

    def is_doomed(self, key: bytes) -> bool:
        """Whether the entry at ``key`` was found dead or corrupt, and awaits its removal."""
        return key in self._doomed

    def doomed_count(self) -> int:
        return len(self._doomed)

    # -- transactions, for fill.py and the sweep --------------------------------------------------

    def reading(self) -> lmdb.Transaction:
        """A read transaction of the entries environment (use it as a context manager)."""
        return self._env.begin()

    @contextlib.contextmanager
    def writing(self, *, doomed: bool = False) -> Iterator[tuple[lmdb.Transaction, Removals]]:
        """A write transaction of the entries environment, in the writer thread, and (when
        ``doomed``) the entries readers found dead, for it to remove. Only once it commits do
        the evictor's changes outside LMDB (S3-FIFO's counters) apply; when it aborts they are
        dropped, and the dead entries are given back for the next write."""
        taken = self._doomed.take() if doomed else []
        try:
            with self._env.begin(write=True) as txn:
                yield txn, taken
        except BaseException:
            self.evictor.aborted()
            self._doomed.give_back(taken)
            raise
        self.evictor.committed()

    def submit(self, call: Callable[[], object]) -> None:
        """Queue ``call`` in the writer thread, not waited for. RuntimeError once closed."""
        self._writer.submit(call)

    def status(self) -> TierStatus:
        return self.health.status()

    def stats(self) -> SharedStats:
        names = (b"entries", b"bytes", b"evicted", b"orphans", b"orphan-bytes", b"swept")
        try:
            with self._env.begin(db=self.db_meta) as txn:
                numbers = [_read_u64(txn.get(name)) for name in names]
            numbers.extend(self.purges.usage())
        except (lmdb.Error, OSError) as error:
            self.health.fault("stats", error)
            numbers = [0] * (len(names) + 3)
        entries, size, evictions, orphans, orphan_bytes, swept = numbers[:6]
        purge_bytes, folds, retired = numbers[6:]
        status = self.health.status()
        return SharedStats(
            entries,
            size,
            self.max_bytes,
            evictions,
            status,
            purge_bytes,
            self.purges.max_bytes,
            folds,
            orphans,
            orphan_bytes,
            swept,
            retired,
        )

    # -- checks ---------------------------------------------------------------------------------

    def check_directory(self) -> bool:
        """Is the directory still the one opened? A deleted or replaced directory leaves
        LMDB working on unlinked files, invisible to the next start: the tier stops."""
        try:
            same = os.stat(self.directory).st_ino == self._inode
            if same and (self.bodies / bodies.TMP).is_dir():
                return True
            error: BaseException = FileNotFoundError("replaced by another directory")
        except OSError as missing:
            error = missing
        self.health.fault("cache directory deleted or replaced", error, stuck=True)
        return False

    def stop(self, reason: str) -> None:
        """Serve nothing more from the tier until the node restarts, and void its entries
        for that start: what a caller does when a purge could not reach the tier (its own
        ``purge`` returned None, or another process's did)."""
        self.health.fault("stopped", OSError(reason), stuck=True)
        with contextlib.suppress(OSError):
            (self.directory / DISTRUST_FILE).touch()


def _trees(env: lmdb.Environment) -> list[lmdb._Database]:
    """Every named database of the environment (the main one names them)."""
    with env.begin() as txn:
        names = [bytes(name) for name in txn.cursor().iternext(values=False)]
    return [env.open_db(name) for name in names]


def _read_u64(value: bytes | None) -> int:
    return 0 if value is None else int(_U64.unpack(value)[0])
