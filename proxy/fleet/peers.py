"""The live nodes that take peer fills (decision 0047), as a fleet member reads them from
``{cdn}:members`` at each renewal: node name -> the URL its edge is reached at.

Members are worker processes; owners are nodes (a node's workers share its listener and its
shared tier). A node is listed while any of its members holds a live lease and said it takes
peer fills. A member whose info cannot be read is left out.

The lease alone says who is live, not the ``fenced`` of the member's info: a member writes its
info at the start of the very sync that renews its lease, so a renewal that came late says
``fenced`` for the whole next renewal, though the member serves again the moment it is
renewed (decision 0047, "the renewal flicker"). Its lease is the truer account, and purge
truth does not rest on this list: an owner asked while fenced forwards to the origin and
labels its answer as any other, and an owner that does not answer is passed over.
"""

from __future__ import annotations

from proxy.errors import WireError
from proxy.fleet.scripts import MembersView
from proxy.wire.reports import unpack_member_info


def live_peers(view: MembersView) -> dict[str, str]:
    """Each live node that takes peer fills, with its advertise URL (the first one read, so
    that the workers of one node, which write the same URL, agree)."""
    nodes: dict[str, str] = {}
    for row in view.members:
        if row.expires_ms <= view.now_ms:
            continue  # no live lease: gone, or about to be
        try:
            info = unpack_member_info(row.info)
        except WireError:
            continue
        if info.peer_fill and info.advertise and info.node:
            nodes.setdefault(info.node, info.advertise)
    return dict(sorted(nodes.items()))
