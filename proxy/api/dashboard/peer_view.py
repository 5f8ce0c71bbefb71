"""The Nodes page's peer fills table (decision 0047): each node that takes peer fills, its
share of the keys it owns, the peers' requests it answered as owner (its load), the misses
it sent to owners and those whose answer it could not use (its peer errors, by kind).

A node's share is measured over a fixed sample of keys (``SAMPLE``) among the live nodes that
take peer fills, with the owners' own rule (``core.peer.owner_of``): the share of the key
space it owns, not of what is stored (each node also keeps copies of what it asked for).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

from proxy.core.peer import owner_of
from proxy.wire.reports import MemberInfo

SAMPLE = tuple(f"sample.invalid\0/{i}".encode() for i in range(2048))


@dataclass(frozen=True, slots=True)
class PeerNode:
    node: str
    live: bool
    share: float  # of the key space it owns (0 when not live)
    answers: int  # peers' requests it answered as owner
    requests: int  # misses it sent to owners
    errors: dict[str, int]  # kind -> those whose answer it could not use


def peer_nodes(reports: list[tuple[MemberInfo, bool]]) -> list[PeerNode] | None:
    """One row per node that takes peer fills, by name; None when none does."""
    live: set[str] = set()
    answers: collections.Counter[str] = collections.Counter()
    requests: collections.Counter[str] = collections.Counter()
    errors: dict[str, collections.Counter[str]] = {}
    for info, alive in reports:
        if not info.peer_fill or not info.node:
            continue
        if alive and not info.fenced:
            live.add(info.node)
        answers[info.node] += info.peer_answers
        requests[info.node] += sum(info.peer_requests.values())
        kinds = errors.setdefault(info.node, collections.Counter())
        for by_kind in info.peer_errors.values():
            kinds.update(by_kind)
    if not errors:
        return None
    owned: collections.Counter[str] = collections.Counter()
    if live:
        owned.update(node for key in SAMPLE if (node := owner_of(key, live)) is not None)
    return [
        PeerNode(
            node,
            node in live,
            owned[node] / len(SAMPLE),
            answers[node],
            requests[node],
            dict(sorted(errors[node].items())),
        )
        for node in sorted(errors)
    ]
