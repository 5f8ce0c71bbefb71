"""A hard URL purge removes the URL's stored variants from the shared tier at once (issue 31
item 3, decision 0048).

The purge is recorded first, durably, in the URL log (``state/``, purge_state.py): that record
is what makes every variant stored before it a miss, on every process, and what refuses a fill
whose lookup came before it and which commits after it (``Fill._admissible``). It is the
tombstone, and purge truth depends on nothing here. Then, in the same thread (the tier's writer
thread for every caller on an event loop), the variants themselves go: both schemes' keys
(``scheme_targets``), every Vary variant under each (one key prefix: ``entry_prefix``, a long
target's hashed one included), their body files unlinked and the tier's counts lowered
(``Totals``), in one unsynced write transaction of the entries environment, as an eviction is.

Only what the purge covers goes: a variant whose mark is under the URL's last hard purge
number, as the domain's state now reads (``judge`` says HARD of it). A variant stored by a fill
that looked up after the purge is kept. They are found in a read transaction first, so a worker
that finds nothing (another worker of the node removed them: a fleet batch's skip) takes no
writer lock. A fault is reported to the tier's health and leaves the variants to be judged dead
at lookup, as before.
"""

from __future__ import annotations

from collections.abc import Iterable

import lmdb

from proxy.core.cache.keys import scheme_targets
from proxy.store.shared.records import Corrupt, entry_prefix, read_header
from proxy.store.shared.tables import Dropping, Removals
from proxy.store.shared.totals import Totals


def drop_urls(tier: Dropping, domain: str, targets: Iterable[str]) -> int:
    """Remove the variants a hard URL purge of ``targets`` (request-targets, recorded already)
    covers, with their body files: how many went. In the writer thread."""
    try:
        found = _covered(tier, domain, targets)
        if not found:
            return 0
        gone: list[str] = []
        with tier.writing(doomed=True) as (txn, doomed):
            totals = Totals(txn, tier)
            removed = sum(totals.remove(key, sequence, gone) for key, sequence in found)
            for key, sequence in doomed:  # found dead by readers: this write removes them too
                totals.remove(key, sequence, gone)
            totals.save()
    except (lmdb.Error, OSError) as error:
        tier.health.fault("purge removal", error)
        return 0
    for name in gone:
        (tier.bodies / name).unlink(missing_ok=True)
    return removed


def _covered(tier: Dropping, domain: str, targets: Iterable[str]) -> Removals:
    """The entries (key, sequence) of ``targets`` a hard URL purge covers, read without a lock."""
    state = tier.purges.current(domain)
    covers: dict[str, int] = {}
    for target in dict.fromkeys(targets):
        last = state.urls.get(target)
        if last is not None and last.hard:
            covers[target] = last.hard
    if not covers:
        return []
    with tier.reading() as txn:
        return _under(txn.cursor(tier.db_entries), domain, covers)


def drop_retired(tier: Dropping, domain: str, covers: dict[str, int]) -> int | None:
    """Remove the entries that URL log records about to retire cover (``covers``: request
    target -> the newest number of those records that names it; an entry of the target whose
    mark is under it is covered), with their body files: how many went; None on a fault (the
    records must then stay). In the writer thread (retire.py, decision 0059).

    Found inside the write transaction, not before it as ``drop_urls`` finds them: the
    records will no longer judge, so an entry a fill commits between a look and this write
    must not be missed. The write holds LMDB's writer lock; a fill that commits after it reads
    the refusal floor, committed before, inside its own (fill.py)."""
    gone: list[str] = []
    try:
        with tier.writing(doomed=True) as (txn, doomed):
            totals = Totals(txn, tier)
            found = _under(txn.cursor(tier.db_entries), domain, covers)
            removed = sum(totals.remove(key, sequence, gone) for key, sequence in found)
            for key, sequence in doomed:
                totals.remove(key, sequence, gone)
            totals.save()
    except (lmdb.Error, OSError) as error:
        tier.health.fault("purge retirement", error)
        return None
    for name in gone:
        (tier.bodies / name).unlink(missing_ok=True)
    return removed


def _under(cursor: lmdb.Cursor, domain: str, covers: dict[str, int]) -> Removals:
    """The entries (key, sequence) of each target, in either scheme and every variant, whose
    mark is under the target's number in ``covers`` (a corrupt one: whatever it is)."""
    found: Removals = []
    for target, number in covers.items():
        for key_target in scheme_targets(target):
            prefix = entry_prefix(domain, key_target)
            if not cursor.set_range(prefix):
                continue
            for raw_key, value in cursor:
                key = bytes(raw_key)
                if not key.startswith(prefix):
                    break
                try:
                    header = read_header(value)
                except Corrupt:
                    found.append((key, -1))
                    continue
                if header.mark < number:
                    found.append((key, header.sequence))
    return found
