"""Filling the shared tier: a body streamed in, committed whole or not at all (decision 0030).

``Fill`` is the synchronous writer: ``append`` chunks as they come from the origin (bodies up
to INLINE_MAX are held, larger ones go to a file as they arrive, so no body is ever held whole
in memory), then ``commit`` or ``abort``. ``AsyncFill`` runs each of those steps in the tier's
writer thread, for the event loop.

``commit`` is one LMDB write transaction: it checks the fill against the domain's purges
since its lookup (a clear, or a purge covering it, refuses it: it would never be served),
renames the body file to its final name, removes entries found dead or corrupt since the last
write, asks the tier's evictor (evict.py; S3-FIFO, s3fifo.py) which entries to evict for it
and whether to keep it, puts the record, and evicts oldest first while still over the size
(entries the evictor does not know).
A fault on the way drops the fill (False) and is reported, never raised.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path

import lmdb

from proxy.core.cache.entry import StoredResponse
from proxy.core.purge.purges import HARD
from proxy.store.shared.bodies import INLINE_MAX, BodyWriter, LinkedBody
from proxy.store.shared.pages import LOW, entry_cost
from proxy.store.shared.purge_state import judge
from proxy.store.shared.records import (
    entry_prefix,
    named_in_record,
    pack_entry,
    variant_id,
)
from proxy.store.shared.tables import Removals
from proxy.store.shared.tier import SharedTier
from proxy.store.shared.totals import U64, Totals, file_bytes, u64, usage

RECORD_GUESS = 512  # bytes of a record whose body is in a file, before it is packed
TRIM_EVERY = 8  # commits of this process between two measures (within the reserve: pages.py)


class _Refused(Exception):
    """A purge since the fill's lookup covers it: nothing is stored."""


class Fill:
    """One response being stored. Use from one thread at a time (AsyncFill: the writer's)."""

    def __init__(
        self, tier: SharedTier, domain: str, target: str, response: StoredResponse, token: int
    ) -> None:
        self._tier = tier
        self._domain = domain
        self._target = target
        self._response = response  # its body is ignored: the body is what is appended
        self.token = token  # the purge number of its lookup: the mark it is stored under
        self.key = entry_prefix(domain, target) + variant_id(response.vary, response.vary_values)
        self._held = bytearray()
        self._file: BodyWriter | None = None
        self._final: Path | None = None  # the body file once renamed, until committed
        self.length = 0
        self.cost = 0  # the bytes the tier counts for it, once committed (record, key, body)
        self.dropped = tier.health.stuck
        self.refused = False  # a purge since its lookup covers it (``commit``)
        self.committed = False  # stored (``commit``)

    def append(self, data: bytes) -> bool:
        """Add the next bytes of the body: False once the fill is dropped (too large for the
        tier, or a fault), when the caller may stop appending."""
        if self.dropped:
            return False
        self.length += len(data)
        if self.length > self._tier.max_bytes:
            return self._drop(None)
        try:
            if self._file is None and self.length <= INLINE_MAX:
                self._held += data
                return True
            if self._file is None:
                if not self._tier.check_directory():
                    return self._drop(None)
                self._file = BodyWriter(self._tier.bodies)
                self._file.write(bytes(self._held))
                self._held = bytearray()
            self._file.write(data)
            return True
        except OSError as error:
            return self._drop(error)

    def adopt(self, path: Path, length: int, table_crc: int) -> bool:
        """Take a stored body file as this fill's whole body (instead of ``append``): a
        refreshed entry of the same body (decision 0039). False when it cannot be linked."""
        if self.dropped or self._file is not None or self.length:
            return False
        try:
            self._file = LinkedBody(self._tier.bodies, path, table_crc)
        except OSError as error:
            return self._drop(error)
        self.length = length
        return True

    def abort(self) -> None:
        self.dropped = True
        if self._file is not None:
            self._file.abort()
            self._file = None

    def commit(self) -> bool:
        """Store the fill, whole; False when it was dropped or refused (nothing stored)."""
        if self.dropped:
            self.abort()
            return False
        tier = self._tier
        gone: list[str] = []
        try:
            if not self._admissible():
                raise _Refused
            if not tier.check_directory():
                return self._drop(None)
            try:
                with tier.writing(doomed=True) as (txn, doomed):
                    self._check_floor()
                    kept = self._store(txn, gone, doomed)
            except lmdb.MapFullError:
                # The map is reserved far above the tier's size (pages.py): this is the
                # last resort. Evict in a transaction of its own, then once more, when the
                # body is held (a body file was renamed in the aborted one: dropped).
                gone.clear()
                trim(tier, force=True)
                if self._final is not None:
                    raise
                with tier.writing(doomed=True) as (txn, doomed):
                    self._check_floor()
                    kept = self._store(txn, gone, doomed)
        except _Refused:
            self.refused = True
            self.abort()
            return False
        except (lmdb.Error, OSError) as error:
            if self._final is not None:  # renamed, but no committed record names it
                self._final.unlink(missing_ok=True)
            return self._drop(error)
        for name in gone:
            (tier.bodies / name).unlink(missing_ok=True)
        tier.health.recovered()
        self.committed = kept
        tier.commits += 1
        if tier.commits % TRIM_EVERY == 0:  # the measure costs a tenth of a fill: not each
            trim(tier)
        return kept

    def kept_if_filled(self, length: int) -> bool:
        """Whether the tier's eviction would keep this fill with a body of ``length`` bytes,
        were it committed now: a read transaction, in the caller's thread (True on a fault:
        the fill finds out). A body it would refuse (a first fill of over half the tier) is
        then never written (``TieredStore.stream``), and ``remember`` has its next one kept."""
        cost = self._cost(length)
        try:
            with self._tier.reading() as txn:
                return self._tier.evictor.kept_if_filled(txn, self.key, cost)
        except lmdb.Error:
            return True

    def remember(self, length: int) -> None:
        """The fill ``kept_if_filled`` refused, remembered by the eviction policy (as a commit
        it refuses is), so that the next fill of the key is kept. In the writer thread."""
        try:
            with self._tier.writing() as (txn, _):
                self._tier.evictor.remember(txn, self.key, self._cost(length))
        except lmdb.Error as error:
            self._tier.health.fault("fill", error)

    def _cost(self, length: int) -> int:
        """What the tier counts for a body of ``length`` bytes in a file under this key, with
        a record of RECORD_GUESS bytes (its size is known only once it is packed)."""
        return entry_cost(len(self.key), RECORD_GUESS, file_bytes(length))

    def _admissible(self) -> bool:
        """Whether no clear or hard purge since the fill's lookup covers it, by the domain's
        state as this process last read it."""
        state = self._tier.purges.current(self._domain)
        if not max(state.cleared, state.refuse) <= self.token <= state.number:
            return False
        return judge(state, self.token, self._target, self._response.tags) is not HARD

    def _check_floor(self) -> None:
        """Refuse the fill if its lookup came before URL purges since retired (decision
        0059): read now, inside the entries write transaction, since the retirement removed
        what those purges covered in a write before this one and the records no longer
        judge. The parsed state ``_admissible`` used may lag the floor's announcement."""
        if self.token < self._tier.purges.refuse_floor(self._domain):
            raise _Refused

    @staticmethod
    def commit_all(tier: SharedTier, fills: Sequence[Fill]) -> int:
        """Store ``fills`` of this tier whose bodies are held (inline, not in files) in one
        write transaction: a bulk load (benchmarks.startup_million writes a million entries
        so). Each is judged against the purges as ``commit`` judges it; a fill that fails is
        left out. Returns how many were stored; raises what LMDB raises."""
        gone: list[str] = []
        stored = 0
        floors: dict[str, int] = {}
        with tier.writing(doomed=True) as (txn, doomed):
            for fill in fills:
                if fill.dropped or fill._file is not None or not fill._admissible():
                    fill.abort()
                    continue
                floor = floors.get(fill._domain)
                if floor is None:  # read once per domain, under the writer lock (_check_floor)
                    floor = floors[fill._domain] = tier.purges.refuse_floor(fill._domain)
                if fill.token < floor:
                    fill.abort()
                    continue
                stored += fill._store(txn, gone, doomed)
                doomed = []
        for name in gone:
            (tier.bodies / name).unlink(missing_ok=True)
        trim(tier)
        return stored

    def _store(self, txn: lmdb.Transaction, gone: list[str], doomed: Removals) -> bool:
        tier = self._tier
        meta = tier.db_meta
        sequence = tier.evictor.next_sequence(txn, u64(txn, meta, b"sequence"))
        txn.put(b"sequence", U64.pack(sequence), db=meta)
        table_crc: int | None = None
        file = 0
        if self._file is not None:
            self._final, table_crc = self._file.finish(sequence)
            self._file = None
            file = file_bytes(self.length)
        record = pack_entry(
            self._response,
            body=bytes(self._held),
            body_length=self.length,
            mark=self.token,
            sequence=sequence,
            table_crc=table_crc,
            target=named_in_record(self._domain, self._target),
        )
        cost = self.cost = entry_cost(len(self.key), len(record), file)
        totals = Totals(txn, tier)
        totals.remove(self.key, -1, gone, forget=False)  # replaced: the evictor keeps its place
        for key, expected in doomed:  # found dead by readers: given back if this aborts
            totals.remove(key, expected, gone)
        admission = tier.evictor.admit(txn, self.key, sequence, cost)
        for key, victim in admission.victims:
            if totals.remove(key, victim, gone, forget=False):
                totals.evicted += 1
        if admission.admitted:
            txn.put(self.key, record, db=tier.db_entries)
            txn.put(U64.pack(sequence), self.key, db=tier.db_order)
            totals.add(cost, file)
        elif self._final is not None:
            gone.append(self._final.name)
        totals.evict_oldest(gone)
        totals.save()
        return admission.admitted

    def _drop(self, error: BaseException | None) -> bool:
        self.abort()
        if error is not None:
            self._tier.health.fault("fill", error)
            self._tier.health.dropped_fills += 1
        return False


def trim(tier: SharedTier, *, force: bool = False) -> int:
    """Evict, oldest first, in a write transaction of its own, when the tier's measured use
    of the disk is above its usable size, down to LOW of it (pages.py); or, ``force``d (a
    fill hit the map's end), to LOW of what it uses if that is less: entries evicted. In
    the writer thread. A fault is reported, not raised."""
    gone: list[str] = []
    try:
        with tier.reading() as txn:
            used = usage(txn, tier, u64(txn, tier.db_meta, b"files"))
        if used <= tier.capacity and not force:
            return 0
        with tier.writing() as (txn, _):
            totals = Totals(txn, tier)
            evicted = totals.trim(LOW * min(used, tier.capacity), gone)
            totals.save()
    except lmdb.Error as error:
        tier.health.fault("trim", error)
        return 0
    for name in gone:
        (tier.bodies / name).unlink(missing_ok=True)
    return evicted


class AsyncFill:
    """``Fill`` for the event loop: every step runs in the tier's writer thread."""

    def __init__(
        self, tier: SharedTier, domain: str, target: str, response: StoredResponse, token: int
    ) -> None:
        self._tier = tier
        self._fill = Fill(tier, domain, target, response, token)

    async def append(self, data: bytes) -> bool:
        return await self._tier.run(lambda: self._fill.append(data))

    async def commit(self) -> bool:
        return await self._tier.run(self._fill.commit)

    async def abort(self) -> None:
        await self._tier.run(self._fill.abort)

    def abort_soon(self) -> None:
        """``abort`` queued in the writer thread, not waited for (a fill given up by a caller
        that must not suspend, or is being cancelled): its temporary file goes."""
        # RuntimeError: the tier is closed (the next start empties bodies/tmp/).
        with contextlib.suppress(RuntimeError):
            self._tier.submit(self._fill.abort)

    @property
    def fill(self) -> Fill:
        """The fill itself (its ``key``, ``length``)."""
        return self._fill
