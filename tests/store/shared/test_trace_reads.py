"""The trace's read of the shared tier changes nothing (issue 31 §5, "the trace counts hits"):
no S3-FIFO hit counter rises, nothing is doomed, and the eviction order a later fill meets is
the one it would have met without the trace."""

from __future__ import annotations

from pathlib import Path

from proxy.core.purge.purges import purge_request
from proxy.process.node_trace import shared_held
from proxy.store.memory import MemoryStore
from proxy.store.shared import SharedTier
from proxy.store.shared.s3fifo import S3FifoEvictor
from proxy.store.tiered import TieredStore
from tests.store.shared.actor import body, fill

DOMAIN = "example.com"
TARGETS = [f"/object/{index}" for index in range(40)]


def counters(tier: SharedTier) -> list[int]:
    evictor = tier.evictor
    assert isinstance(evictor, S3FifoEvictor) and evictor.counters is not None
    return [
        evictor.counters.get(entry.sequence)
        for target in TARGETS
        for entry in tier.inspect(DOMAIN, target).variants
    ]


def filled(directory: Path) -> SharedTier:
    tier = SharedTier.open_node(directory, max_bytes=4 << 20)
    for index, target in enumerate(TARGETS):
        assert fill(tier, DOMAIN, target, body(index, 1000))
    tier.purge(DOMAIN, purge_request("url", [TARGETS[0]]))  # a lookup would doom it
    return tier


def survivors(tier: SharedTier) -> list[str]:
    """Fill the tier past its size: which of TARGETS are still stored."""
    for index in range(3000):
        fill(tier, DOMAIN, f"/more/{index}", body(index, 1000))
    return [target for target in TARGETS if tier.inspect(DOMAIN, target).variants]


def test_the_trace_counts_no_hit_and_dooms_nothing(tmp_path: Path) -> None:
    tier = filled(tmp_path / "cache")
    try:
        before = counters(tier)
        for _ in range(3):
            for target in TARGETS:
                held = shared_held(tier, DOMAIN, target)
                assert len(held.variants) == (0 if target == TARGETS[0] else 1)
        tiered = TieredStore(MemoryStore(max_bytes=1 << 20), tier)
        for target in TARGETS:
            tiered.inspect(DOMAIN, target)
        assert counters(tier) == before
        assert tier.doomed_count() == 0
    finally:
        tier.close()


def test_a_trace_leaves_the_eviction_order_as_it_was(tmp_path: Path) -> None:
    """Two tiers filled alike; one traced three times over: the same entries survive."""
    plain = filled(tmp_path / "plain")
    traced = filled(tmp_path / "traced")
    try:
        for _ in range(3):
            for target in TARGETS:
                shared_held(traced, DOMAIN, target)
        assert survivors(traced) == survivors(plain)
    finally:
        plain.close()
        traced.close()
