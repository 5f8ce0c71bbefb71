"""A hard URL purge removes the URL's variants from the shared tier at once (issue 31 item 3,
decision 0048): both schemes' keys, every Vary variant, long targets' hashed keys, their body
files and their share of the tier's counts; the URL log's record stays as the tombstone for
fills in flight. A soft purge keeps them, to be served stale."""

from __future__ import annotations

from pathlib import Path

from proxy.core.cache.entry import StoredResponse
from proxy.core.cache.keys import cache_target
from proxy.core.purge.purges import purge_request
from proxy.store.shared import Fill, SharedTier
from proxy.store.shared.node_writes import FleetBatch, NodeWrite
from tests.store.shared.actor import body, response
from tests.store.shared.conftest import body_files

DOMAIN = "example.com"
LARGE = 100_000  # a body in a file of bodies/


def _variant(language: str) -> StoredResponse:
    return StoredResponse(
        status=200,
        reason="OK",
        headers=(("Vary", "Accept-Language"), ("ETag", '"v1"')),
        body=b"",
        birth=1_000_000.0,
        freshness_lifetime=3600.0,
        vary=("accept-language",),
        vary_values=(language,),
    )


def _store(tier: SharedTier, target: str, stored: StoredResponse, data: bytes) -> None:
    writer = Fill(tier, DOMAIN, target, stored, tier.lookup(DOMAIN, target).token)
    assert writer.append(data)
    assert writer.commit()


def _three_of(tier: SharedTier, path: str) -> None:
    """/a over http and https, and a second Vary variant of the https one: each in a file."""
    _store(tier, cache_target(path, False), response(), body(1, LARGE))
    _store(tier, cache_target(path, True), _variant("en"), body(2, LARGE))
    _store(tier, cache_target(path, True), _variant("fr"), body(3, LARGE))


def _variants(tier: SharedTier, path: str) -> int:
    return sum(len(tier.inspect(DOMAIN, cache_target(path, h)).variants) for h in (False, True))


def test_a_hard_url_purge_removes_every_variant_and_its_files(tier: SharedTier) -> None:
    _three_of(tier, "/a")
    _store(tier, "/b", response(), body(4, LARGE))
    before = tier.stats()
    assert before.entries == 4 and len(body_files(tier.bodies)) == 4
    assert tier.purge(DOMAIN, purge_request("url", ["/a"])) is not None
    after = tier.stats()
    assert after.entries == 1
    assert after.bytes < before.bytes / 3
    assert len(body_files(tier.bodies)) == 1  # /b's
    assert _variants(tier, "/a") == 0
    assert len(tier.inspect(DOMAIN, "/b").variants) == 1


def test_long_targets_are_removed_too(tier: SharedTier) -> None:
    long = "/" + "x" * 700  # past LMDB's key limit: keyed by its hash (records.entry_prefix)
    _store(tier, long, response(), body(5, LARGE))
    _store(tier, cache_target(long, True), response(), body(6, LARGE))
    assert tier.stats().entries == 2
    assert tier.purge(DOMAIN, purge_request("url", [long])) is not None
    assert tier.stats().entries == 0
    assert body_files(tier.bodies) == []


def test_a_soft_url_purge_keeps_them_to_serve_stale(tier: SharedTier) -> None:
    _three_of(tier, "/a")
    assert tier.purge(DOMAIN, purge_request("url", ["/a"], soft=True), at=1_000_010.0)
    assert tier.stats().entries == 3
    assert len(body_files(tier.bodies)) == 3
    found = [
        entry
        for https in (False, True)
        for entry in tier.lookup(DOMAIN, cache_target("/a", https)).variants
    ]
    assert len(found) == 3
    assert all(entry.response.freshness_lifetime == 10.0 for entry in found)  # stale since
    assert all(tier.read_all(entry) is not None for entry in found)


def test_a_fill_begun_before_the_purge_is_not_stored_after_it(tier: SharedTier) -> None:
    _three_of(tier, "/a")
    token = tier.lookup(DOMAIN, "/a").token  # a fill in flight: its lookup was before
    writer = Fill(tier, DOMAIN, "/a", response(), token)
    assert writer.append(body(7, LARGE))
    assert tier.purge(DOMAIN, purge_request("url", ["/a"])) is not None
    assert tier.stats().entries == 0
    assert not writer.commit()  # the URL log's record, the tombstone, refuses it
    assert writer.refused
    assert tier.stats().entries == 0 and body_files(tier.bodies) == []
    assert tier.lookup(DOMAIN, "/a").variants == ()
    _store(tier, "/a", response(), body(8, LARGE))  # a fill after the purge is kept
    assert tier.stats().entries == 1


def test_a_fleet_batch_removes_them_once_per_node(tmp_path: Path) -> None:
    node = SharedTier.open_node(tmp_path / "cache", max_bytes=64 << 20)
    try:
        _three_of(node, "/a")
        batch = FleetBatch("e1", 1, (NodeWrite(DOMAIN, 1, purge_request("url", ["/a"])),))
        assert node.apply_fleet(batch) == 1
        assert node.stats().entries == 0
        assert body_files(node.bodies) == []
        _three_of(node, "/a")  # stored again after the purge: a second worker's skip keeps them
        assert node.apply_fleet(batch) == 0
        assert node.stats().entries == 3
        soft = purge_request("url", ["/a"], soft=True)
        assert node.apply_fleet(FleetBatch("e1", 2, (NodeWrite(DOMAIN, 2, soft),))) == 1
        assert node.stats().entries == 3
    finally:
        node.close()
