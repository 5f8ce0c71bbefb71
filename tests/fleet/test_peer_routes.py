"""Which fills ``PeerFills`` sends to an owner (proxy/edge/peer_fill.py, decision 0047): only
a key owned by another live node, for a request that is not itself a peer's; an https key
only once the fleet's peer key is known (the owner believes the scheme only with it)."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field

import pytest

from proxy.config.model import DomainConfig
from proxy.core.lease import Applied
from proxy.core.peer import owner_of
from proxy.edge import bodies
from proxy.edge.origin import OriginResponse
from proxy.edge.peer_fill import PeerFills, marked_for
from proxy.edge.peer_mark import MARKED, Marked, counted_client

NODES = {"edge-1": "http://127.0.0.1:1", "edge-2": "http://127.0.0.1:2"}


@dataclass
class View:
    node: str = "edge-1"
    peers: Mapping[str, str] = field(default_factory=lambda: dict(NODES))
    applied: Applied = field(default_factory=lambda: Applied("e", 1, {}))
    peer_key: str | None = "k"


def never(
    domain: DomainConfig,
    method: str,
    target: str,
    headers: list[tuple[str, str]],
    data: bytes | bodies.Streamed | None,
) -> AbstractAsyncContextManager[OriginResponse]:
    raise AssertionError("not asked here")


def fills(view: View) -> PeerFills:
    return PeerFills(view=view, name="cdn-proxy", timeout=0.3, ask_origin=never)


def target_owned_by(node: str, *, https: bool = False) -> str:
    for i in range(1000):
        target = f"/page{i}"
        key = ("https:" if https else "") + target
        if owner_of(f"example.com\0{key}".encode(), NODES) == node:
            return target
    raise AssertionError("no such target")


HTTP = "http"


def test_a_key_another_node_owns_goes_to_it() -> None:
    target = target_owned_by("edge-2")
    assert fills(View()).owner("example.com", target, HTTP) == "edge-2"


def test_an_https_key_is_owned_by_the_owner_of_its_https_form() -> None:
    """decision 0041: the scheme is part of the key, so of what the owner is chosen by."""
    target = target_owned_by("edge-2", https=True)
    assert fills(View()).owner("example.com", target, "https") == "edge-2"
    target = target_owned_by("edge-1", https=True)
    assert fills(View()).owner("example.com", target, "https") is None  # this node's own


@pytest.mark.parametrize(
    ("view", "target", "scheme"),
    [
        (View(), target_owned_by("edge-1"), HTTP),  # this node owns it: the origin
        (View(peers={"edge-1": NODES["edge-1"]}), target_owned_by("edge-2"), HTTP),  # alone
        (View(peers={}), target_owned_by("edge-2"), HTTP),  # no list yet
        # https before the peer key is read: the owner could not believe the scheme
        (View(peer_key=None), target_owned_by("edge-2", https=True), "https"),
        (View(), target_owned_by("edge-2"), None),  # no scheme said
    ],
)
def test_other_fills_go_to_the_origin(view: View, target: str, scheme: str | None) -> None:
    assert fills(view).owner("example.com", target, scheme) is None


def test_a_peers_request_is_never_sent_on_to_a_peer() -> None:
    token = MARKED.set(Marked("peer-label/1 e 1", None))
    try:
        assert fills(View()).owner("example.com", target_owned_by("edge-2"), HTTP) is None
    finally:
        MARKED.reset(token)


def test_a_peers_request_is_answered_with_the_position_taken_at_arrival() -> None:
    origin = "http://127.0.0.1:9000"
    domain = DomainConfig("example.com", origin, origins=(origin,))
    view = View(applied=Applied("e", 7, {}))
    marked = marked_for(view, domain)
    assert marked == Marked("peer-label/1 e 7", "Surrogate-Key", None, ("e", 7))
    view.applied = Applied("e", 8, {})  # applied later: the request keeps its label
    assert marked.label == "peer-label/1 e 7"


def test_before_its_first_sync_a_node_answers_a_peer_unlabelled_and_still_guards_the_loop() -> None:
    origin = "http://127.0.0.1:9000"
    domain = DomainConfig("example.com", origin, origins=(origin,))
    marked = marked_for(View(applied=Applied(None, 0, {})), domain)
    assert marked.label is None
    token = MARKED.set(marked)
    try:
        assert fills(View()).owner("example.com", target_owned_by("edge-2"), HTTP) is None
    finally:
        MARKED.reset(token)


@pytest.mark.parametrize(
    ("marked", "counted"),
    [
        (None, "127.0.0.1"),  # a client's request
        (Marked("peer-label/1 e 1", None), "127.0.0.1"),  # a bare CDN-Loop: forgeable
        (Marked("peer-label/1 e 1", None, "http"), None),  # the fleet's peer key proved it
        (Marked(None, None, "https"), None),
    ],
)
def test_only_a_request_proven_by_the_peer_key_leaves_its_addresss_caps(
    marked: Marked | None, counted: str | None
) -> None:
    """Decision 0060: the per-client caps count a request against its address unless the
    owner believed its peer key (``PeerAnswers.handle`` sets the scheme only then)."""
    token = MARKED.set(marked)
    try:
        assert counted_client("127.0.0.1") == counted
    finally:
        MARKED.reset(token)
