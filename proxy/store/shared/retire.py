"""Retiring URL purge records from the shared tier's purge state (issue 31 item 3, decision 0059).

A hard URL purge removes the URL's variants at once (url_drops.py); its record in the URL log
(url_log.py) stays as a *tombstone*: it refuses a fill whose lookup came before the purge and
which commits after it, and it judges an entry such a fill committed in the moment before the
refusal could see it. A soft URL purge keeps the variants, and its record is what makes them
stale. Kept until the domain's next clear, the records would pile up: a news site purging 10k
URLs a day holds a million within months, and every process holds their table.

So the node (the directory's lock holder, beside its sweep) retires each record once it is
older than ``cache.url_purge_keep``, in three steps, each in the tier's writer thread:

1. **Refuse** (``PurgeStateStore.refuse``, synced): fills whose token (the purge number of
   their lookup) is under the newest due record's number are refused from now on, by a floor
   a fill reads inside its own entries write transaction (``Fill._check_floor``). Every fill a
   due record could cover has such a token. The records still judge.
2. **Remove** (``drop_retired``): in one entries write transaction, which holds LMDB's writer
   lock, every entry a due record covers goes (a soft purge's stale variants too: a miss,
   never a fresh hit of what was purged). An entry committed before this write is found by it;
   one committed after it read the floor from step 1 and was refused.
3. **Retire** (``PurgeStateStore.retire``, synced): the records go, out of the budget; readers
   start past them, so the URL table every process holds shrinks at its next read.

A fault in step 2 keeps the records (step 3 is skipped for the domain); a kill between the
steps leaves a floor and the records, and the next pass does it again. Two passes at once (a
test's and the node's) are safe: floors only rise, and each pass retires only what its own
step 2 covered. A pass handles at most ``TARGETS`` URLs; another follows at once while work
remains. The cost of the floor: a fill that lasts longer than ``url_purge_keep`` and has a URL
purge of its domain retire during it is not stored (it is served to its client).
"""

from __future__ import annotations

import asyncio
import time
from contextlib import AbstractAsyncContextManager

import lmdb

from proxy.store.shared import url_log
from proxy.store.shared.tier import SharedTier
from proxy.store.shared.upkeep import node_task
from proxy.store.shared.url_drops import drop_retired

KEEP = 300.0  # seconds a URL purge's record is kept (the default of cache.url_purge_keep)
TARGETS = 1024  # URLs retired per pass, at most: a pass removing every one's entry holds the
# entries writer lock about 37 ms (1 M entries, 100k URL purges: 121 ms at 4,096)
PASS_PAUSE = 0.05  # seconds between two passes while records are due
IDLE_PAUSE = 30.0  # seconds between two looks when none were (less for a short keep)


def retire(tier: SharedTier, cutoff: float, limit: int = TARGETS) -> int:
    """One pass: retire the URL log records written at ``cutoff`` or before (a wall-clock
    time), at most ``limit`` URLs. How many URLs' records retired. In the writer thread; a
    fault is reported to the tier's health, never raised, so the node's task goes on. A
    record that does not parse is one too: it and its domain's later records are kept, and
    the other domains' retire."""
    corrupt: list[tuple[str, int]] = []
    try:
        dues = tier.purges.due(cutoff, limit, corrupt)
        for domain, number in corrupt:  # kept, with every record of the domain after it
            tier.health.fault("purge retirement", url_log.CorruptRecord(f"{domain} #{number}"))
        if not dues:
            return 0
        tier.purges.refuse(dues)
        done = [due for due in dues if drop_retired(tier, due.domain, due.covers) is not None]
        if done:
            tier.purges.retire(done)
    except (lmdb.Error, OSError, url_log.CorruptRecord) as error:
        tier.health.fault("purge retirement", error)
        return 0
    return sum(len(due.covers) for due in done)


async def _retiring(tier: SharedTier, keep: float) -> None:
    idle = min(IDLE_PAUSE, max(keep / 4, PASS_PAUSE))
    while True:
        retired = await tier.run(lambda: retire(tier, time.time() - keep))
        await asyncio.sleep(PASS_PAUSE if retired else idle)


def retiring(tier: SharedTier, keep: float = KEEP) -> AbstractAsyncContextManager[None]:
    """The node's retirement of old URL purge records, until the block ends. Only the node
    holding the directory retires (its workers do not)."""
    return node_task(tier, lambda: _retiring(tier, keep), "retire")
