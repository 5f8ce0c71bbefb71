"""A worker that finds its fleet write made by another worker of the node (decision 0048).

Each worker of a node applies every fleet batch; the first to get there writes it to the
shared tier, and the others skip it (``FleetBatch.done``, the domain's fleet mark), apply the
batch to their memory tier and ack. The writer announces its commit in ``state/stamp`` only
after the commit returns, and a process keeps each domain's parsed purge state for as long as
that file says the same. So a worker that skips, between the writer's commit and its
announcement, must not judge the tier's entries by the state it parsed before: it would hand
the old entry to its next lookup, which copies it into its memory tier, where it outlives the
purge's 200 (the fleet checker with the disk tier found it so: a read after a clear's 200
answered from a worker's memory with the version before the clear).

The writer is a real process (``tests/store/shared/actor.py fleet``). The window is held
still by writing back the epoch this process had read, before the writer's announcement:
the writer's transaction is then committed and not yet announced, as it is for a moment on
a node.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from proxy.store.shared import SharedTier
from tests.store.shared.actor import fill, fleet_batch
from tests.store.shared.conftest import run_actor

DOMAIN = "example.com"
EPOCH = "e1"
SEQ = 5

# Each kind of a batch's write, and what it leaves of /a (tag t1): gone, stale from now
# (a soft purge), or to be revalidated first (a distrust): none of them may be served fresh.
WRITES = [
    "clear",
    "distrust",
    "every",
    "url:hard:/a",
    "url:soft:/a",
    "prefix:hard:/",
    "prefix:soft:/",
    "tag:hard:t1",
    "tag:soft:t1",
]


def served_fresh(tier: SharedTier) -> bool:
    """Whether a lookup of /a finds a variant it may serve without asking the origin."""
    now = time.time()
    return any(entry.response.is_fresh(now) for entry in tier.lookup(DOMAIN, "/a").variants)


def announce(tier: SharedTier, epoch: bytes) -> None:
    """Write ``epoch`` into the tier's ``state/stamp`` in place (as a writer does)."""
    with open(Path(tier.directory) / "state" / "stamp", "r+b") as file:
        file.write(epoch)


def announced(tier: SharedTier) -> bytes:
    return (Path(tier.directory) / "state" / "stamp").read_bytes()


@pytest.mark.parametrize("write", WRITES)
def test_a_batch_skipped_after_another_worker_wrote_it_holds_at_once(
    tier: SharedTier, write: str
) -> None:
    assert fill(tier, DOMAIN, "/a", b"a", birth=time.time())
    assert served_fresh(tier)  # this process has parsed the domain's purge state
    before = announced(tier)
    out = run_actor("fleet", tier.directory, tier.instance, EPOCH, SEQ, DOMAIN, write)
    assert out == "written 1"
    written = announced(tier)
    announce(tier, before)  # the writer has committed, and not announced it yet
    assert tier.apply_fleet(fleet_batch(EPOCH, SEQ, DOMAIN, write)) == 0  # made: skipped
    assert not served_fresh(tier)
    announce(tier, written)  # and once announced, the same
    assert not served_fresh(tier)


def test_a_distrust_of_every_domain_made_by_another_worker_holds_at_once(
    tier: SharedTier,
) -> None:
    """The same for ``distrust_all``, which a second caller for the same ``made_for`` skips."""
    assert fill(tier, DOMAIN, "/a", b"a", birth=time.time())
    assert served_fresh(tier)
    before = announced(tier)
    assert run_actor("fleet", tier.directory, tier.instance, EPOCH, SEQ, DOMAIN, "every") == (
        "written 1"
    )
    announce(tier, before)
    tier.distrust(None, f"{EPOCH} {SEQ}".encode())  # made for the same: skipped
    assert not served_fresh(tier)


@pytest.mark.parametrize(
    ("write", "floor", "mark"), [("clear", None, (EPOCH, SEQ)), ("every", (EPOCH, SEQ), None)]
)
def test_what_the_tier_holds_of_the_fleet_is_read_at_once(
    tier: SharedTier, write: str, floor: tuple[str, int] | None, mark: tuple[str, int] | None
) -> None:
    """``fleet_written``, which a peer fill's label must cover (edge/peer_fill.py), reads the
    tier, not the parsed states: another worker's batch counts before it is announced, while
    this worker's member has not applied it yet."""
    assert fill(tier, DOMAIN, "/a", b"a", birth=time.time())
    assert served_fresh(tier)  # this process has parsed the domain's purge state
    assert tier.purges.fleet_written(DOMAIN).mark is None
    before = announced(tier)
    assert run_actor("fleet", tier.directory, tier.instance, EPOCH, SEQ, DOMAIN, write) == (
        "written 1"
    )
    announce(tier, before)  # committed, not announced
    written = tier.purges.fleet_written(DOMAIN)
    assert (written.floor, written.mark) == (floor, mark)
