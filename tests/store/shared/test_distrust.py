"""Distrust of the shared tier (decision 0040): where a fleet member cannot know which purges its
node missed, the tier's entries are not dropped but served only once the origin revalidated
them; entries without a validator are dropped. One durable write for every domain at once.

Real directories, the tier as the node opens it; the edge's side (the conditional request, the
304, never stale-while-revalidate or stale-if-error) is in tests/fleet/test_tier_fleet.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from proxy.core.cache.entry import StoredResponse
from proxy.core.purge.purges import HARD, Covered, purge_request
from proxy.store.shared import Fill, SharedTier
from proxy.store.shared.purge_state import DISTRUSTED, DomainState, judge

DOMAINS = ("a.test", "b.test")


def response(*, etag: bool = True, modified: bool = False) -> StoredResponse:
    """Fresh for an hour from now, allowing stale-while-revalidate and stale-if-error."""
    headers: list[tuple[str, str]] = [("Content-Type", "text/plain")]
    if etag:
        headers.append(("ETag", '"v1"'))
    if modified:
        headers.append(("Last-Modified", "Tue, 01 Sep 2026 10:00:00 GMT"))
    return StoredResponse(
        status=200,
        reason="OK",
        headers=tuple(headers),
        body=b"",
        birth=time.time(),
        freshness_lifetime=3600.0,
        stale_while_revalidate=600.0,
        stale_if_error=600.0,
    )


def store(
    tier: SharedTier, domain: str, target: str, stored: StoredResponse, token: int | None = None
) -> None:
    """Fill ``target`` under the token of a lookup made now (or ``token``)."""
    mark = tier.lookup(domain, target).token if token is None else token
    fill = Fill(tier, domain, target, stored, mark)
    assert fill.append(target.encode())
    assert fill.commit()


def found(tier: SharedTier, domain: str, target: str) -> StoredResponse | None:
    variants = tier.lookup(domain, target).variants
    return variants[0].response if variants else None


def fresh(entry: StoredResponse | None) -> bool:
    return entry is not None and entry.is_fresh(time.time())


def test_every_domain_is_distrusted_in_one_write_and_entries_with_validators_stay(
    tier: SharedTier,
) -> None:
    for domain in DOMAINS:
        store(tier, domain, "/etag", response())
        store(tier, domain, "/modified", response(etag=False, modified=True))
        store(tier, domain, "/none", response(etag=False))
    records_before = tier.purges.usage()
    assert tier.distrust(None) is not None
    assert tier.purges.usage() == records_before  # no domain's record was written: O(1)
    for domain in DOMAINS:
        for target in ("/etag", "/modified"):
            entry = found(tier, domain, target)
            assert entry is not None, target
            assert not fresh(entry)  # to be revalidated before it is served
            assert entry.stale_while_revalidate == 0.0  # not while revalidating
            assert entry.stale_if_error == 0.0  # not when the origin fails
            assert entry.etag or entry.last_modified  # what the conditional request sends
        assert found(tier, domain, "/none") is None  # nothing to revalidate with: dropped


def test_a_fill_after_the_distrust_is_trusted_and_one_from_before_is_not(
    tier: SharedTier,
) -> None:
    early = tier.lookup("a.test", "/late").token  # a fill in flight across the distrust
    store(tier, "a.test", "/page", response())
    tier.distrust(None)
    store(tier, "a.test", "/late", response(), token=early)
    assert not fresh(found(tier, "a.test", "/late"))
    # The revalidated copy (a 304 refreshed it) is stored under a lookup made now: trusted,
    # fresh again, its stale-while-revalidate back.
    store(tier, "a.test", "/page", response())
    entry = found(tier, "a.test", "/page")
    assert fresh(entry)
    assert entry is not None and entry.stale_while_revalidate == 600.0
    # So is a domain's first fill after it (a domain never purged).
    store(tier, "b.test", "/new", response())
    assert fresh(found(tier, "b.test", "/new"))


def test_purges_after_a_distrust_still_cover_what_was_stored_after_it(tier: SharedTier) -> None:
    tier.distrust(None)
    for target in ("/a", "/b", "/c"):
        store(tier, "a.test", target, response())
    assert all(fresh(found(tier, "a.test", t)) for t in ("/a", "/b", "/c"))
    tier.purge("a.test", purge_request("url", ["/a"]))
    assert found(tier, "a.test", "/a") is None
    assert fresh(found(tier, "a.test", "/b"))
    tier.clear_domain("a.test")  # its record predates the floor: the clear goes above it
    assert found(tier, "a.test", "/b") is None
    assert found(tier, "a.test", "/c") is None


def test_the_distrust_is_durable(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    tier = SharedTier.open_node(directory, max_bytes=64 << 20)
    store(tier, "a.test", "/page", response())
    tier.distrust(None)
    tier.close()
    reopened = SharedTier.open_node(directory, max_bytes=64 << 20)
    try:
        entry = found(reopened, "a.test", "/page")
        assert entry is not None and not fresh(entry)
        store(reopened, "a.test", "/page", response())
        assert fresh(found(reopened, "a.test", "/page"))
    finally:
        reopened.close()


def test_workers_distrusting_for_the_same_epoch_and_number_make_one_floor(
    tier: SharedTier,
) -> None:
    store(tier, "a.test", "/page", response())
    first = tier.distrust(None, b"epoch-2 1700")
    store(tier, "a.test", "/page", response())  # revalidated by the first worker
    assert tier.distrust(None, b"epoch-2 1700") == first  # the second worker's: nothing
    assert fresh(found(tier, "a.test", "/page"))
    later = tier.distrust(None, b"epoch-2 1800")  # purges happened in between: again
    assert later is not None and first is not None and later > first
    assert not fresh(found(tier, "a.test", "/page"))


def test_one_domain_can_be_distrusted_alone(tier: SharedTier) -> None:
    for domain in DOMAINS:
        store(tier, domain, "/page", response())
    tier.distrust("a.test")
    assert not fresh(found(tier, "a.test", "/page"))
    assert fresh(found(tier, "b.test", "/page"))
    store(tier, "a.test", "/page", response())
    assert fresh(found(tier, "a.test", "/page"))


@pytest.mark.parametrize(
    ("purge", "expected"),
    [
        (None, DISTRUSTED),
        (purge_request("url", ["/page"]), HARD),  # a hard purge still wins
        (purge_request("prefix", ["/"]), HARD),
        (purge_request("url", ["/page"], soft=True), DISTRUSTED),  # stricter than soft
        (purge_request("url", ["/other"]), DISTRUSTED),
    ],
)
def test_judge_distrusted_entries(purge: object, expected: Covered) -> None:
    """The rule alone: a mark under the distrust floor is DISTRUSTED unless a hard purge
    covers it; a mark at the floor is judged by the purges only."""
    state = DomainState()
    mark = state.number
    if purge is not None:
        state.add(purge, 100.0)  # type: ignore[arg-type]
    state.distrust()
    assert judge(state, mark, "/page", ()) is expected
    assert judge(state, state.number, "/page", ()) is None
