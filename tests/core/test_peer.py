"""Peer fills' rules (proxy/core/peer.py, issue 33): owners by rendezvous hashing, the loop
guard (RFC 8586 CDN-Loop) and the purge label an asking node checks before it uses an owner's
answer."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.peer import (
    PeerScheme,
    PurgeLabel,
    Route,
    believed_scheme,
    covers_written,
    loop_marked,
    moved_share,
    owner_of,
    peer_route,
    usable,
)

KEYS = [f"example.com /obj/{i}?v=1".encode() for i in range(20_000)]
NODES = [f"edge-{i}" for i in range(1, 5)]


def test_every_node_computes_the_same_owner_whatever_the_order() -> None:
    for key in KEYS[:500]:
        assert owner_of(key, NODES) == owner_of(key, list(reversed(NODES)))
    assert owner_of(b"k", []) is None
    assert owner_of(b"k", ["only"]) == "only"


def test_keys_spread_evenly() -> None:
    counts = Counter(owner_of(key, NODES) for key in KEYS)
    mean = len(KEYS) / len(NODES)
    assert set(counts) == set(NODES)
    assert all(abs(count - mean) / mean < 0.05 for count in counts.values()), counts


@pytest.mark.slow
def test_a_fifth_node_takes_about_a_fifth_and_moves_nothing_else() -> None:
    """Issue 33: adding a node moves at most 25% of keys (here about 20%), each to the new
    node; removing one moves only its own keys."""
    five = [*NODES, "edge-5"]
    share = moved_share(NODES, five, KEYS)
    assert 0.17 < share < 0.23, share
    for key in KEYS[:2000]:
        if owner_of(key, NODES) != owner_of(key, five):
            assert owner_of(key, five) == "edge-5"
    three = NODES[:3]
    for key in KEYS[:2000]:
        if owner_of(key, NODES) != "edge-4":
            assert owner_of(key, three) == owner_of(key, NODES)


@given(st.binary(max_size=64), st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=8))
def test_the_owner_is_a_member(key: bytes, nodes: list[str]) -> None:
    assert owner_of(key, nodes) in nodes


@pytest.mark.parametrize(
    ("owner", "marked", "route"),
    [
        ("edge-2", False, Route.PEER),
        ("edge-1", False, Route.ORIGIN),  # this node owns it
        ("edge-2", True, Route.ORIGIN),  # a peer's request: never a second hop
        (None, False, Route.ORIGIN),  # no live member known
    ],
)
def test_peer_route(owner: str | None, marked: bool, route: Route) -> None:
    assert peer_route(owner=owner, me="edge-1", marked=marked) is route


@pytest.mark.parametrize(
    ("values", "marked"),
    [
        ([], False),
        (["fleet-a"], True),
        (["other, fleet-a; v=1"], True),
        (["other", "fleet-a"], True),
        (["fleet-ab"], False),
        (["x; fleet-a"], False),  # a parameter, not a cdn-id
    ],
)
def test_loop_marked(values: list[str], marked: bool) -> None:
    """RFC 8586 §2: CDN-Loop is a list of cdn-ids, each with optional parameters."""
    assert loop_marked(values, "fleet-a") is marked


@pytest.mark.slow
@pytest.mark.parametrize(
    ("label", "epoch", "applied", "ok"),
    [
        (PurgeLabel("e1", 7), "e1", 7, True),  # the owner had applied what this node has
        (PurgeLabel("e1", 9), "e1", 7, True),  # and more
        (PurgeLabel("e1", 6), "e1", 7, False),  # a purge this node applied, the owner not yet
        (PurgeLabel("e0", 9), "e1", 7, False),  # another epoch: positions do not compare
        (None, "e1", 0, False),  # no label: an answer of unknown age
        (PurgeLabel("e1", 0), None, 0, False),  # this node has not synced yet
    ],
)
def test_an_owners_answer_is_used_only_when_its_label_covers_this_nodes_purges(
    label: PurgeLabel | None, epoch: str | None, applied: int, ok: bool
) -> None:
    """Issue 33, "Purge truth, with no second purge": Fastly's race (a purged edge asking an
    unpurged shield) cannot store or serve the old object."""
    assert usable(label, epoch=epoch, applied=applied) is ok


@pytest.mark.parametrize(
    ("label", "floor", "mark", "ok"),
    [
        (PurgeLabel("e1", 7), None, None, True),  # the tier holds nothing of the fleet
        (PurgeLabel("e1", 7), None, ("e1", 7), True),  # the owner applied what the tier holds
        # The tier holds a purge the owner had not applied, written by another worker of
        # the node (or this one's batch, under way) before this worker applied it.
        (PurgeLabel("e1", 7), None, ("e1", 8), False),
        (PurgeLabel("e1", 7), ("e1", 3), ("e1", 5), True),
        (PurgeLabel("e1", 7), ("e1", 8), None, False),  # a newer distrust of every domain
        (PurgeLabel("e1", 7), ("e2", 1), None, False),  # a new epoch's distrust
        (PurgeLabel("e2", 4), ("e2", 1), ("e1", 9), True),  # a mark of the epoch before
        (PurgeLabel("e2", 4), None, ("e1", 9), False),  # a mark no floor orders
    ],
)
def test_an_owners_answer_is_stored_only_when_its_label_covers_the_nodes_tier(
    label: PurgeLabel,
    floor: tuple[str, int] | None,
    mark: tuple[str, int] | None,
    ok: bool,
) -> None:
    """A fill's lookup can see a purge in the node's shared tier that the worker has not
    applied yet: the answer it stores must cover that purge too, or it outlives it there."""
    assert covers_written(label, floor, mark) is ok


@pytest.mark.parametrize(
    ("claim", "key", "believed"),
    [
        (PeerScheme("https", "k1"), "k1", "https"),
        (PeerScheme("http", "k1"), "k1", "http"),
        (PeerScheme("https", "k0"), "k1", None),  # a key of another epoch, or a guess
        (PeerScheme("https", "k1"), None, None),  # this node has not read the key yet
        (None, "k1", None),  # a claim this build cannot read
    ],
)
def test_an_owner_believes_a_peers_scheme_only_with_the_fleets_peer_key(
    claim: PeerScheme | None, key: str | None, believed: str | None
) -> None:
    """Keys carry the scheme (decision 0041): a client must not choose the variant filled."""
    assert believed_scheme(claim, key) == believed
