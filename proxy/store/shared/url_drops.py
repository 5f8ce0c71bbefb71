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
    found: Removals = []
    with tier.reading() as txn:
        cursor = txn.cursor(tier.db_entries)
        for target in dict.fromkeys(targets):
            last = state.urls.get(target)
            if last is None or not last.hard:
                continue
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
                    if header.mark < last.hard:
                        found.append((key, header.sequence))
    return found
