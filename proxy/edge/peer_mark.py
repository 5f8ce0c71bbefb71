"""What an owner adds to its answers while it answers a fleet peer's request (decision
0047): the purge label taken when the request arrived, and the answer's tags, so that the
asking node's copy is found by a tag purge as the owner's is.

Every answer to a peer's request that carries the origin's or the store's response gets
them: those made from a stored entry (edge/peer_fill.py ``labelled``, around
Messages.from_stored) and those relayed from the origin (``respond.relayed_headers``: a
response not stored, streamed to its first client, or cut to a range). Both are safe to
label: the owner's lookup, or its own origin request, came after the purges its label
names were applied (a peer's request follows a flight that began before it only when no
purge was applied in between: edge/peer_fill.py ``may_follow``). The owner's own answers
(an error, a refusal) carry no label: the asking node then goes to the origin itself.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

from multidict import CIMultiDict

from proxy.core.purge.purges import TAG_HEADERS
from proxy.wire.peer import LABEL_HEADER


@dataclass(frozen=True, slots=True)
class Marked:
    """A peer's request being answered: the label its answers carry (None before this
    node's first sync: no label, and the asking node goes to the origin), the field the
    domain's tags are sent in, the scheme the asking node keyed it by (None: this node's
    own reading of the request), and the purge position the label says (epoch, number)."""

    label: str | None
    tag_field: str | None
    scheme: str | None = None
    position: tuple[str, int] | None = None

    @property
    def proven(self) -> bool:
        """Whether the request carried the fleet's peer key: its scheme claim was believed
        (``PeerAnswers.handle``), which a client cannot forge; a bare CDN-Loop proves
        nothing."""
        return self.scheme is not None


# Set while this process answers a peer's request (its own task: aiohttp runs each request
# in one), reset when the handler returns.
MARKED: ContextVar[Marked | None] = ContextVar("peer_marked", default=None)


def counted_client(address: str | None) -> str | None:
    """The client address a request's per-client caps count it against (the answers'
    budget, the origin's slots): ``address``, or None (no per-client cap; its
    connection's caps still hold) for a request proven to come from a fleet peer, whose
    requests are the fleet's own and must not be throttled by a client that shares its
    address (decision 0060)."""
    marked = MARKED.get()
    if marked is not None and marked.proven:
        return None
    return address


def add_peer_fields(headers: CIMultiDict[str], tags: tuple[str, ...] | None) -> None:
    """Add the label and ``tags`` to an answer's ``headers`` while a peer's request is
    answered. ``tags`` None (unknown: over the domain's limit) gets no label: the asking
    node could not keep its copy findable by a tag purge."""
    marked = MARKED.get()
    if marked is None or marked.label is None or tags is None:
        return
    headers[LABEL_HEADER] = marked.label
    if marked.tag_field is not None and tags:
        headers[marked.tag_field] = TAG_HEADERS[marked.tag_field.lower()].join(tags)
