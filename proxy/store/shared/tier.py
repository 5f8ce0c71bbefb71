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
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import struct
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, TypeVar

import lmdb

from proxy.config.filesystems import refusal
from proxy.core.cache.entry import StoredResponse
from proxy.core.purge.purges import HARD, Purge, stale_lifetime
from proxy.core.purge.retention import DEFAULT_MAX_BYTES
from proxy.errors import BodyCorrupt, DiskTierError
from proxy.store.shared import bodies, pages
from proxy.store.shared.doomed import Doomed
from proxy.store.shared.evict import Evictor
from proxy.store.shared.health import Health, TierStatus
from proxy.store.shared.lock import (
    NodeLock,
    check_member,
    unclean_since_boot,
    write_boot,
)
from proxy.store.shared.markers import FILLS
from proxy.store.shared.node_writes import FleetBatch
from proxy.store.shared.purge_state import (
    DISTRUSTED,
    PurgeStateStore,
    distrusted_copy,
    judge,
)
from proxy.store.shared.records import (
    KEY_FORMAT,
    Corrupt,
    SharedHit,
    body_name,
    entry_prefix,
    unpack_entry,
    unpack_hit,
)
from proxy.store.shared.s3fifo import S3FifoEvictor
from proxy.store.shared.tables import Removals
from proxy.store.shared.url_drops import drop_urls

FORMAT = b"format"  # the meta record naming the entry keys' layout
DISTRUST_FILE = "distrust"  # written when a purge could not be made durable: entries are void
STAMP_FILE = "stamp"  # the last purge's transaction id (purge_state.py); "epoch" until 0053
_U64 = struct.Struct(">Q")  # big-endian: LMDB orders the eviction keys by it
T = TypeVar("T")


class SharedEntry(NamedTuple):
    """One stored variant as a lookup found it: the response (its body empty when the body
    is in a file: read it with ``SharedTier.read_body``), judged against the domain's purges
    (a soft purge has already shortened its freshness). A tuple: built on every hit."""

    response: StoredResponse
    length: int  # of the body
    key: bytes
    sequence: int
    table_crc: int
    path: Path | None  # the body file, None when inline (``response.body``)


class SharedLookup(NamedTuple):
    token: int  # the mark a fill made after this lookup stores under (SharedTier.begin)
    variants: tuple[SharedEntry, ...]  # most recent first


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


class SharedTier:
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
        if lock is not None:  # the node: entries of another key layout were emptied
            with self._env.begin(write=True, db=self.db_meta) as txn:
                txn.put(FORMAT, KEY_FORMAT)
        self.trees = _trees(self._env)  # every database, for the pages in use (pages.py)
        self.commits = 0  # fills this process committed (fill.py measures every few)
        self._state_env = lmdb.open(
            str(directory / "state"), map_size=pages.state_map_size(purge_max_bytes), max_dbs=0
        )
        self.purges = PurgeStateStore(
            self._state_env, directory / "state" / STAMP_FILE, purge_max_bytes
        )
        self._doomed = Doomed()  # dead or corrupt: removed by the next write (doomed.py)
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="shared-tier")
        self._next_check = 0.0  # when ``lookup`` next checks the directory (monotonic)

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
                stale = unclean_since_boot(path) or (path / DISTRUST_FILE).exists()
                if stale or not _keys_current(path / "entries"):
                    shutil.rmtree(path / "entries", ignore_errors=True)
                    shutil.rmtree(path / "bodies", ignore_errors=True)
                    (path / DISTRUST_FILE).unlink(missing_ok=True)
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

    # -- reading ------------------------------------------------------------------------------

    def lookup(self, domain: str, target: str) -> SharedLookup:
        """The variants stored for the URL (``target`` as a key target: either scheme's),
        judged against the domain's purges; none on a fault, when stuck, or when none is.
        Each variant returned counts a hit (S3-FIFO's counter); one a hard purge covers is
        doomed (removed by the next write)."""
        return self._judged(domain, target, counted=True)

    def inspect(self, domain: str, target: str) -> SharedLookup:
        """``lookup``'s answer, changing nothing: no hit counted, nothing doomed (the trace's
        read, and the tests'). A fault is still reported to the tier's health."""
        return self._judged(domain, target, counted=False)

    def _judged(self, domain: str, target: str, *, counted: bool) -> SharedLookup:
        try:
            state = self.purges.current(domain)
            if not self._serving():
                return SharedLookup(state.number, ())
            found = self._read_variants(entry_prefix(domain, target), target, counted)
        except (lmdb.Error, OSError) as error:
            self.health.fault("lookup", error)
            return SharedLookup(0, ())
        variants = []
        for entry in found:
            covered = judge(state, entry.response.mark, target, entry.response.tags)
            if covered is None:
                pass
            elif covered is HARD:
                if counted:
                    self._doom(entry.key, entry.sequence)
                continue
            elif covered is DISTRUSTED:  # revalidated before it is served, or gone (0040)
                copy = distrusted_copy(entry.response)
                if copy is None:
                    if counted:
                        self._doom(entry.key, entry.sequence)
                    continue
                entry = entry._replace(response=copy)
            else:
                response = entry.response
                lifetime = stale_lifetime(
                    response.birth, response.freshness_lifetime, covered.stale_at
                )
                entry = entry._replace(response=response.copy_with(freshness_lifetime=lifetime))
            if counted:
                self.evictor.hit(entry.sequence)  # no write: a counter in a shared map (s3fifo.py)
            variants.append(entry)
        return SharedLookup(state.number, tuple(variants))

    def peek(self, domain: str, target: str) -> SharedHit | None:
        """``lookup``'s common case, for the edge's fast path (``TieredStore.peek_shared``):
        the URL's one variant when its body is inline and no purge covers it, else None,
        and ``lookup`` answers (none stored, several variants, a body in a file, covered by
        a soft purge, a fault, stuck). Judged as ``lookup`` judges, against the same state:
        a variant a hard purge covers is never returned, and is removed by the next write."""
        try:
            state = self.purges.current(domain)
            # ``_serving``, its call made only when it has something to do (every hit).
            if (self.health.stuck or time.monotonic() >= self._next_check) and not self._serving():
                return None
            prefix = entry_prefix(domain, target)
            txn = self._env.begin(db=self.db_entries, buffers=True)
            try:  # not ``with``: an abort is all a read needs, 1,300 instructions cheaper
                cursor = txn.cursor()
                if not cursor.set_key(prefix):
                    return None
                flags, _, sequence, _, hit = unpack_hit(cursor.value())
                if cursor.next() and cursor.key()[: len(prefix)] == prefix:
                    return None  # several variants (Vary): lookup's, to choose among them
                if len(hit.parts) == 8:  # a long target's hash as its key: lookup checks it
                    return None
            except Corrupt as error:
                self.health.corrupted(f"{prefix!r}: {error}")
                self._doom(prefix, -1)
                return None
            finally:
                txn.abort()
        except (lmdb.Error, OSError) as error:
            self.health.fault("lookup", error)
            return None
        if flags:  # a body in a file
            return None
        # Judged as lookup judges, every time. Its tags are read only for an entry older than
        # an outstanding purge of the domain (``judge`` reads them only then), which costs a
        # response built; anything that covers it (a soft purge, a distrust) is lookup's.
        mark = hit.mark
        if mark >= state.top and mark >= state.cleared and mark >= state.distrusted:
            self.evictor.hit(sequence)  # ``judge``'s usual case (nothing covers it), no call
            return hit
        tags: tuple[str, ...] = ()
        if state.cleared <= mark < state.top:
            response = hit.response()
            if response is None:
                return None
            tags = response.tags
        covered = judge(state, mark, target, tags)
        if covered is not None:
            if covered is HARD:
                self._doom(prefix, sequence)
            return None
        self.evictor.hit(sequence)  # S3-FIFO's counter, as lookup raises it (no write)
        return hit

    def holds(self, domain: str, target: str) -> bool:
        """Whether any record is stored under the key target (a purge may cover it yet),
        changing nothing: no hit counted, nothing doomed. True on a fault: the caller then
        writes its purge anyway."""
        prefix = entry_prefix(domain, target)
        try:
            with self._env.begin(db=self.db_entries, buffers=True) as txn:
                cursor = txn.cursor()
                return cursor.set_range(prefix) and cursor.key()[: len(prefix)] == prefix
        except (lmdb.Error, OSError) as error:
            self.health.fault("lookup", error)
            return True

    def _serving(self) -> bool:
        """Whether the tier may serve a read: not stuck (its directory is checked once a
        second, for readers that never write)."""
        now = time.monotonic()
        if now >= self._next_check:  # a directory deleted under readers that never write
            self._next_check = now + 1.0
            self.check_directory()
        return not self.health.stuck

    def _read_variants(self, prefix: bytes, target: str, counted: bool) -> list[SharedEntry]:
        found: list[SharedEntry] = []
        with self._env.begin(db=self.db_entries, buffers=True) as txn:
            cursor = txn.cursor()
            if not cursor.set_range(prefix):
                return found
            for raw_key, value in cursor:
                key = bytes(raw_key)
                if not key.startswith(prefix):
                    break
                try:
                    header, response = unpack_entry(value, target)
                except Corrupt as error:
                    self.health.corrupted(f"{key!r}: {error}")
                    if counted:
                        self._doom(key, -1)
                    continue
                response.set_mark(header.mark)  # the mark it was stored under
                path = self.bodies / body_name(header.sequence) if header.in_file else None
                entry = SharedEntry(
                    response, header.body_length, key, header.sequence, header.table_crc, path
                )
                found.append(entry)
        if len(found) > 1:
            found.sort(key=lambda entry: entry.sequence, reverse=True)
        return found

    def read_body(
        self, entry: SharedEntry, start: int = 0, end: int | None = None
    ) -> Iterator[bytes]:
        """The entry's body (or the bytes ``start`` to ``end``, exclusive), checked chunk by
        chunk. BodyCorrupt when a chunk fails its checksum or cannot be read: the entry is
        then removed, and the bytes already yielded must not be sent as the whole body."""
        if entry.path is None:
            yield entry.response.body[start:end]
            return
        try:
            yield from bodies.chunks(entry.path, entry.length, entry.table_crc, start, end)
        except BodyCorrupt as error:
            self.health.corrupted(str(error))
            self._doom(entry.key, entry.sequence)
            raise
        except OSError as error:
            self.health.fault("read body", error)
            raise BodyCorrupt(f"{entry.path.name}: {error}") from None

    def read_all(self, entry: SharedEntry) -> bytes | None:
        """The whole body, checked; None when it fails (the entry is removed)."""
        try:
            return b"".join(self.read_body(entry))
        except BodyCorrupt:
            return None

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
            numbers = [0] * (len(names) + 2)
        entries, size, evictions, orphans, orphan_bytes, swept, purge_bytes, folds = numbers
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

    # -- purges ---------------------------------------------------------------------------------

    def clear_domain(self, domain: str) -> int | None:
        """Make everything stored for the domain unservable, durably (fsync) before it
        returns: the domain's new purge number. None when it could not be made durable:
        the tier then serves nothing more, and its entries are voided for the next start."""
        return self._durably(lambda: self.purges.clear(domain))

    def purge(self, domain: str, purge: Purge, at: float | None = None) -> int | None:
        """Record a purge (url, prefix, tag, soft ``all``; a hard ``all`` is ``clear_domain``)
        durably before it returns: its number. Applied lazily, at every lookup; a hard URL
        purge also removes the URL's variants, right after (url_drops.py). None as for
        ``clear_domain``."""
        if purge.kind == "all" and not purge.soft:
            return self.clear_domain(domain)
        stamp = self._clock() if at is None else at
        number = self._durably(lambda: self.purges.add(domain, purge, stamp))
        if number is not None and purge.kind == "url" and not purge.soft:
            drop_urls(self, domain, purge.items)
        return number

    def distrust(self, domain: str | None, made_for: bytes = b"") -> int | None:
        """Have every entry of the domain (None: of every domain, in one write) revalidated
        before it is served again, durably (decision 0040): the floor or the domain's number.
        None as for ``clear_domain``."""
        if domain is None:
            return self._durably(lambda: self.purges.distrust_all(made_for))
        return self._durably(lambda: self.purges.distrust(domain))

    def apply_fleet(self, batch: FleetBatch) -> int | None:
        """A fleet batch's writes, once per node (node_writes.py), durably before it returns:
        how many parts this call wrote. None as for ``clear_domain``. In the writer thread.
        Its hard URL purges' variants are then removed (url_drops.py), by whichever worker
        finds them first (a skip finds none once the writer removed them)."""
        written = self._durably(lambda: self.purges.apply_fleet(batch, self._clock()))
        if written is not None:
            for domain, writes in batch.by_domain().items():
                targets = [
                    target
                    for write in writes
                    if write.purge is not None
                    and write.purge.kind == "url"
                    and not write.purge.soft
                    for target in write.purge.items
                ]
                if targets:
                    drop_urls(self, domain, targets)
        return written

    async def clear_domain_async(self, domain: str) -> int | None:
        """``clear_domain`` in the writer thread: its fsync never blocks the event loop."""
        return await self.run(lambda: self.clear_domain(domain))

    async def purge_async(self, domain: str, purge: Purge, at: float | None = None) -> int | None:
        """``purge`` in the writer thread."""
        return await self.run(lambda: self.purge(domain, purge, at))

    def _durably(self, write: Callable[[], int]) -> int | None:
        """Commit a purge; None when it is not durable. It is committed even when the
        directory is gone: the node's other processes still read the unlinked files, and
        must see it until they notice (``lookup`` checks the directory every second)."""
        try:
            number = write()
            if self.check_directory():
                return number
            error: BaseException = OSError("the cache directory is gone")
        except (lmdb.Error, OSError) as failed:
            error = failed
        self.stop(f"purge not durable: {error}")
        return None

    def stop(self, reason: str) -> None:
        """Serve nothing more from the tier until the node restarts, and void its entries
        for that start: what a caller does when a purge could not reach the tier (its own
        ``purge`` returned None, or another process's did)."""
        self.health.fault("stopped", OSError(reason), stuck=True)
        with contextlib.suppress(OSError):
            (self.directory / DISTRUST_FILE).touch()


@contextlib.contextmanager
def _opening(path: Path) -> Iterator[None]:
    """Opening the directory at ``path``: what the disk or LMDB refuses is a DiskTierError
    naming the directory."""
    try:
        yield
    except (OSError, lmdb.Error) as error:
        raise DiskTierError(f"cache directory {path}: {error}") from None


def _trees(env: lmdb.Environment) -> list[lmdb._Database]:
    """Every named database of the environment (the main one names them)."""
    with env.begin() as txn:
        names = [bytes(name) for name in txn.cursor().iternext(values=False)]
    return [env.open_db(name) for name in names]


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


def _read_u64(value: bytes | None) -> int:
    return 0 if value is None else int(_U64.unpack(value)[0])
