"""A fleet member in front of a shared tier (decision 0040), in process, with a real Valkey and a
real tier directory: the purges it missed reach the tier before it serves from it again; where
it cannot know what it missed (a new epoch, records dropped from the log) the tier's entries
are distrusted, served only once revalidated, not dropped. The same through real processes:
tests/fleet/test_tier_nodes.py."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from benchmarks.fleet_relay import Relay
from proxy.core.cache.entry import StoredResponse
from proxy.core.purge.purges import purge_request
from proxy.fleet import scripts
from proxy.fleet.member import FleetMember
from proxy.fleet.store import FleetStore
from proxy.store.memory import MemoryStore
from proxy.store.shared import SharedTier
from proxy.store.tiered import TieredStore
from tests.fleet.conftest import DOMAINS, Fleet, Node, settings
from tests.fleet.test_epoch import FLUSH, RESTART, lose_data
from tests.polling import until

PAGES = ("/etag", "/plain")  # with a validator, and without one


def page(target: str) -> StoredResponse:
    """Fresh for ten minutes, stale-while-revalidate and stale-if-error allowed; /etag with an
    ETag."""
    headers = [("Cache-Control", "max-age=600")]
    if target == "/etag":
        headers.append(("ETag", '"v1"'))
    return StoredResponse(
        status=200,
        reason="OK",
        headers=tuple(headers),
        body=f"body of {target}".encode(),
        birth=time.time(),
        freshness_lifetime=600.0,
        stale_while_revalidate=600.0,
        stale_if_error=600.0,
    )


class TierNode:
    """One member whose store is a memory tier in front of a shared tier on disk."""

    def __init__(self, node: Node, tiered: TieredStore) -> None:
        self.node = node
        self.tiered = tiered

    @property
    def member(self) -> FleetMember:
        return self.node.member

    async def fill(self, domain: str, target: str) -> None:
        found = await self.node.store.lookup(domain, target)
        assert await self.node.store.put(found.key, page(target))

    async def served(self, domain: str, target: str) -> str:
        """What a lookup through the member gives: "fenced", "gone", "fresh", or
        "revalidate" (stale, with no stale-while-revalidate or stale-if-error)."""
        found = await self.node.store.lookup(domain, target)
        if found.bypass is not None:
            return "fenced"
        if not found.variants:
            return "gone"
        entry = found.variants[0]
        if entry.is_fresh(time.time()):
            return "fresh"
        assert (entry.stale_while_revalidate, entry.stale_if_error) == (0.0, 0.0)
        assert entry.body == f"body of {target}".encode()  # the stored body, kept
        return "revalidate"

    def on_disk(self, domain: str, target: str) -> bool:
        """Whether the shared tier itself holds a fresh entry for the URL."""
        variants = self.tiered.tier.lookup(domain, target).variants
        return bool(variants) and variants[0].response.is_fresh(time.time())


@pytest.fixture
async def tier_node(fleet: Fleet, tmp_path: Path) -> AsyncIterator[TierNode]:
    yield await tier_member(fleet, tmp_path)


async def tier_member(fleet: Fleet, tmp_path: Path, *, relayed: bool = False) -> TierNode:
    url = fleet.server.url
    relay = None
    if relayed:
        relay = Relay(int(url.rsplit(":", 1)[1].split("/")[0]))
        await relay.start()
        fleet.relays.append(relay)
        url = relay.url
    tier = SharedTier.open_node(tmp_path / "cache", max_bytes=64 << 20)
    tiered = TieredStore(MemoryStore(max_bytes=1 << 20), tier)
    member = FleetMember(settings=settings(url), store=tiered, domains=DOMAINS, node="tiered")
    node = Node(member=member, store=FleetStore(tiered, member), relay=relay)
    fleet.nodes.append(node)
    fleet.on_close.append(tier.close)
    await member.start()
    return TierNode(node, tiered)


@pytest.mark.parametrize("how", [RESTART, FLUSH])
async def test_a_new_epoch_distrusts_the_tier_instead_of_emptying_it(
    fleet: Fleet, tier_node: TierNode, how: str
) -> None:
    for domain in DOMAINS:
        for target in PAGES:
            await tier_node.fill(domain, target)
    old = tier_node.member.applied.epoch
    await lose_data(fleet, how)
    await until(lambda: tier_node.member.applied.epoch not in (None, old), every=0.01)
    for domain in DOMAINS:
        # Kept, to be revalidated (a conditional request: a 304 keeps the body); the page
        # without a validator cannot be, and is a miss.
        assert await tier_node.served(domain, "/etag") == "revalidate"
        assert await tier_node.served(domain, "/plain") == "gone"
    # The refreshed copy is stored under a lookup made after the distrust: trusted again,
    # in this process and on disk for every other.
    await tier_node.fill("a.test", "/etag")
    assert await tier_node.served("a.test", "/etag") == "fresh"
    assert tier_node.on_disk("a.test", "/etag")
    assert not tier_node.on_disk("b.test", "/etag")


@pytest.mark.slow
async def test_dropped_records_distrust_only_their_domain(
    fleet: Fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Valkey keeps 2 records here; a member cut off during 3 purges of a.test cannot read
    the first: it cannot know what that one purged, so a.test's entries on its tier are
    distrusted (revalidated before use); b.test, whose records it did not miss, is kept."""
    monkeypatch.setattr(scripts, "KEPT_RECORDS", 2)
    cut = await tier_member(fleet, tmp_path, relayed=True)
    purger = fleet.purger()
    await purger.clear_domain("b.test")  # waits out the grace of the test's new epoch
    for domain in DOMAINS:
        await cut.fill(domain, "/etag")
    assert cut.node.relay is not None
    cut.node.relay.drop()
    for target in ("/x", "/y", "/z"):
        await purger.purge("a.test", purge_request("url", [target]))
    cut.node.relay.heal()
    await until(lambda: not cut.member.fenced, every=0.01)
    assert await cut.served("a.test", "/etag") == "revalidate"
    assert await cut.served("b.test", "/etag") == "fresh"


@pytest.mark.slow
async def test_a_member_cut_off_brings_the_purges_it_missed_to_the_tier_first(
    fleet: Fleet, tmp_path: Path
) -> None:
    """Cut off from Valkey while a URL purge of a.test and a clear of b.test are answered
    200 (its lease ran out: it was not waited for), the member serves nothing from either
    tier; after the heal, its first sync writes both to the shared tier before its fence
    lifts, so the tier itself no longer holds what they covered, and holds the rest."""
    cut = await tier_member(fleet, tmp_path, relayed=True)
    purger = fleet.purger()
    await purger.clear_domain("b.test")  # waits out the grace of the test's new epoch
    for domain in DOMAINS:
        for target in PAGES:
            await cut.fill(domain, target)
    assert cut.node.relay is not None
    cut.node.relay.blackhole()
    await purger.purge("a.test", purge_request("url", ["/etag"]))
    await purger.clear_domain("b.test")
    assert await cut.served("a.test", "/plain") == "fenced"  # its lease ran out
    assert cut.on_disk("a.test", "/etag")  # the tier has not heard of them yet
    cut.node.relay.heal()
    await until(lambda: not cut.member.fenced, every=0.01)
    assert not cut.on_disk("a.test", "/etag")
    assert cut.on_disk("a.test", "/plain")
    assert not any(cut.on_disk("b.test", target) for target in PAGES)
    assert await cut.served("a.test", "/etag") == "gone"
    assert await cut.served("a.test", "/plain") == "fresh"
