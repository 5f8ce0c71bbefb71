"""One writer per node, the control plane included (decision 0052), in process with a real
Valkey and a real tier directory:

- the control plane's purger on an embedded-Valkey node writes a clear or purge to the node's
  shared tier only when no worker did (the domain's fleet mark says whether one did), so a
  purge costs the node one synced write, not two; and every purge it answered is in the tier;
- a worker that takes on a domain after it applied purges of the epoch without it (a reload)
  clears it in the tier before it writes anything of it: otherwise its next purge of the
  domain moves the mark past purges nobody wrote, and the tier serves what they covered.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.core.lease import Applied, for_domains
from proxy.core.purge.purges import purge_request
from proxy.fleet.member import FleetMember
from proxy.fleet.store import FleetStore
from proxy.process.control_purger import SharedFirstPurger
from proxy.store.memory import MemoryStore
from proxy.store.shared import SharedTier
from proxy.store.shared.applied import load_applied, save_applied
from proxy.store.tiered import TieredStore
from tests.fleet.conftest import Fleet, Node, settings
from tests.fleet.test_tier_fleet import TierNode, page
from tests.fleet.test_tier_writers import workers, write_transactions

A, B = "a.test", "b.test"


@pytest.fixture
async def node_tier(fleet: Fleet, tmp_path: Path) -> SharedTier:
    tier = SharedTier.open_node(tmp_path / "cache", max_bytes=64 << 20)
    fleet.on_close.append(tier.close)
    return tier


async def worker(fleet: Fleet, tier: SharedTier, domains: tuple[str, ...]) -> TierNode:
    return (await workers(fleet, tier, 1, domains))[0]


async def on_disk(tier: SharedTier, domain: str, target: str) -> None:
    """Store ``target`` in the node's tier as a process that is no fleet member would."""
    store = TieredStore(MemoryStore(max_bytes=1 << 20), tier)
    found = await store.lookup(domain, target)
    assert await store.put(found.key, page(target))


async def test_the_control_plane_writes_only_what_no_worker_wrote(
    fleet: Fleet, node_tier: SharedTier
) -> None:
    purger = SharedFirstPurger(fleet.purger(), node_tier)
    await purger.clear_domain(B)  # no worker: written here (and the new epoch's grace waited)
    assert purger.writes == 1
    node = await worker(fleet, node_tier, (A, B))
    for n in range(3):
        await node.fill(A, f"/p{n}")
    before = write_transactions(node_tier)
    for n in range(3):
        result = await purger.purge(A, purge_request("url", [f"/p{n}"]))
        assert result.acked == 1 and result.epoch == node.member.applied.epoch
    await purger.clear_domain(A)
    # The worker wrote each one before it acked; the control plane wrote none of them.
    assert purger.writes == 1
    assert write_transactions(node_tier) - before <= 4  # two per purge before (0048's test)
    for n in range(3):
        assert await node.served(A, f"/p{n}") == "gone"
        assert not node.on_disk(A, f"/p{n}")
    # A dry run writes nothing anywhere.
    await purger.purge(A, purge_request("url", ["/p0"], dry_run=True))
    assert purger.writes == 1


async def test_a_purge_of_a_domain_no_worker_serves_is_written_by_the_control_plane(
    fleet: Fleet, node_tier: SharedTier
) -> None:
    purger = SharedFirstPurger(fleet.purger(), node_tier)
    await purger.clear_domain(B)
    node = await worker(fleet, node_tier, (A,))  # its first sync distrusts the whole tier
    await on_disk(node_tier, B, "/p")
    assert node.on_disk(B, "/p")
    await purger.purge(B, purge_request("url", ["/p"]))  # the worker acks: not its domain
    assert purger.writes == 2
    assert not node.on_disk(B, "/p")


async def test_a_domain_a_worker_takes_on_is_cleared_before_it_moves_the_mark(
    fleet: Fleet, node_tier: SharedTier
) -> None:
    """The hole: a worker serving only a.test passes purge N of b.test (acked, not written:
    not its domain); a reload gives it b.test; its next batch writes purge M of b.test and
    marks b.test as written up to M. Without the clear at learning, the mark said N was
    written, the control plane skipped it, and the tier still served what N covered."""
    plain = fleet.purger()
    await plain.clear_domain(B)
    node = await worker(fleet, node_tier, (A,))  # its first sync distrusts the whole tier
    await on_disk(node_tier, B, "/p")
    first = await plain.purge(B, purge_request("url", ["/p"]))  # nobody writes it to the tier
    assert first.acked == 1
    assert node.on_disk(B, "/p")  # what the control plane's own write exists for
    synced = node.member.wait_synced()
    node.member.set_domains((A, B))
    await synced  # the sync the reload asked for: b.test cleared in the tier at once
    assert not node.on_disk(B, "/p")
    await plain.purge(B, purge_request("url", ["/other"]))
    mark = node_tier.purges.fleet_written(B).mark
    assert mark is not None and mark >= (first.epoch, first.number)  # the mark is true now
    assert await node.served(B, "/p") == "gone"
    # Through the control plane's purger: the worker's write is enough, and it is trusted.
    purger = SharedFirstPurger(plain, node_tier)
    await purger.purge(B, purge_request("url", ["/third"]))
    assert purger.writes == 0


async def test_a_worker_started_from_another_workers_record_learns_its_missing_domains(
    fleet: Fleet, node_tier: SharedTier
) -> None:
    """A worker that starts from the tier's record of what was applied (applied.py), written
    by a worker that did not serve b.test, clears b.test before it writes anything of it."""
    plain = fleet.purger()
    await plain.clear_domain(B)
    first = await worker(fleet, node_tier, (A,))
    await on_disk(node_tier, B, "/p")
    await plain.purge(B, purge_request("url", ["/p"]))
    tiered = TieredStore(MemoryStore(max_bytes=1 << 20), node_tier)
    member = FleetMember(
        settings=settings(fleet.server.url), store=tiered, domains=(A, B), node="one"
    )
    assert first.on_disk(B, "/p")  # the purge was not written: nobody serves b.test
    member.adopt(first.member.applied)  # the record the first worker left
    assert member.applied.learned == {B}
    fleet.nodes.append(Node(member=member, store=FleetStore(tiered, member), relay=None))
    await member.start()
    assert not first.on_disk(B, "/p")
    assert member.applied.learned == frozenset()


def test_the_tiers_record_leaves_a_learned_domain_out(tmp_path: Path) -> None:
    """A worker that dies before its sync clears a learned domain leaves a record without
    it: the next worker learns it again, instead of trusting purges nobody applied."""
    applied = for_domains(Applied("e1", 40, {A: 7}), (A, B))
    save_applied(tmp_path, applied)
    assert load_applied(tmp_path) == Applied("e1", 40, {A: 7})
    assert for_domains(Applied("e1", 40, {A: 7}), (A, B)).learned == {B}
