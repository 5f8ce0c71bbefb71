"""The rules of peer fills (issue 33): which node of a fleet owns a cache key, when a miss may
ask that owner instead of the origin, and when the owner's answer may be used. No I/O.

Theory of operation. A fleet behind a load balancer is N caches unless a miss on one node
asks the key's *owner* first: the owner answers from its cache, or fills from the origin once
for the whole fleet (collapsing as it does across its workers). groupcache, the Varnish shard
director and Traffic Server's consistent-hash parents work this way.

- **Owners** (``owner_of``) are chosen by rendezvous hashing (highest random weight) of the
  cache key after normalisation, never of the raw URL: two spellings the cache keys alike have
  one owner (Traffic Server's issue 1553 was the raw URL). Each node scores every key; the
  highest score owns it. A node that joins or leaves moves only the keys it wins or held:
  about 1/N of them, and no other key changes owner.
- **The loop guard** (``peer_route``): a peer request carries ``CDN-Loop`` (RFC 8586) with the
  fleet's name. An owner never sends such a request on to another peer, and a node that finds
  itself the owner goes to the origin. So a request costs at most one peer hop and one
  origin request, whatever the member lists of the nodes say while they disagree.
- **The purge label** (``usable``). Fastly documents the race peer fills bring: an edge that
  was already purged asks a shield that was not yet purged, and stores the old object again.
  Our owner labels each answer with the fleet purge position it had applied when it made it
  (its epoch and the highest purge number applied for the key's domain), and the asking node
  uses the answer only when that position covers every purge of the domain the asking node
  has applied. Otherwise it neither stores nor serves it: it goes to the origin. No second
  purge is needed: a purge answered 200 was applied by every live member first, so any node
  that knows of it refuses answers made before it.
- **The scheme** (``believed_scheme``). Keys carry the scheme (decision 0041), which an
  asking node reads from its own listener or trusted proxies; the owner must key and fill
  the same variant. The asking node says the scheme with the fleet's *peer key* (a random
  value every member reads from Valkey, which clients cannot), and the owner believes the
  scheme only with that key: a client that sends the field is refused, never believed.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum


def _score(node: str, key: bytes) -> int:
    """The node's weight for the key: 64 bits of BLAKE2b over both (a node name holds no NUL:
    config checks it as a token)."""
    digest = hashlib.blake2b(node.encode() + b"\0" + key, digest_size=8, person=b"cdn-owner")
    return int.from_bytes(digest.digest(), "big")


def owner_of(key: bytes, nodes: Iterable[str]) -> str | None:
    """The node that owns ``key`` among ``nodes`` (None when there are none): the highest
    score, ties broken by the name, so every node computes the same owner from the same list
    whatever its order."""
    best: tuple[int, str] | None = None
    for node in nodes:
        candidate = (_score(node, key), node)
        if best is None or candidate > best:
            best = candidate
    return None if best is None else best[1]


class Route(Enum):
    """Where a miss goes first."""

    PEER = "peer"  # ask the owner; on failure, the origin
    ORIGIN = "origin"  # the origin only


def peer_route(*, owner: str | None, me: str, marked: bool) -> Route:
    """Where a miss goes: to the owner when there is one, it is another node, and the request
    is not itself a peer's (the loop guard)."""
    if marked or owner is None or owner == me:
        return Route.ORIGIN
    return Route.PEER


def loop_marked(cdn_loop: Sequence[str], fleet: str) -> bool:
    """Whether a request's CDN-Loop values (RFC 8586: a list of cdn-ids, each maybe with
    parameters) name this fleet: a request a peer of ours sent."""
    for value in cdn_loop:
        for member in value.split(","):
            cdn_id = member.split(";", 1)[0].strip()
            if cdn_id == fleet:
                return True
    return False


@dataclass(frozen=True, slots=True)
class PurgeLabel:
    """The fleet purge position an owner had applied when it made an answer: its Valkey
    epoch, and the highest purge number it had applied for the answer's domain."""

    epoch: str
    number: int


def usable(label: PurgeLabel | None, *, epoch: str | None, applied: int) -> bool:
    """May an asking node serve, and store, an owner's answer labelled ``label``? Only when
    the owner worked in the same epoch as this node (``epoch``), and had applied every purge
    of the domain this node has applied (``applied``: the highest such number). An answer
    without a label, or from another epoch, is never used: the node asks the origin."""
    if label is None or epoch is None or label.epoch != epoch:
        return False
    return label.number >= applied


def covers_written(
    label: PurgeLabel, floor: tuple[str, int] | None, mark: tuple[str, int] | None
) -> bool:
    """Does an owner's answer labelled ``label`` cover what the asking node's shared tier
    holds of the fleet for its domain: the last distrust of every domain (``floor``, the
    (epoch, number) it was made for) and the domain's fleet mark (``mark``)? The tier may be
    ahead of the asking worker's applied position (another worker, or this one's own batch
    still under way, wrote a purge the worker has not applied yet), and a fill whose lookup
    saw that purge is stored as made after it: an answer made before it would outlive it
    there (the fleet checker with peer fills on a shared tier found it). A mark of another
    epoch than the label's is older than a floor of the label's epoch (a new epoch's
    distrust is written before its purges); without such a floor it cannot be ordered, and
    the answer is not used."""
    if floor is not None and (floor[0] != label.epoch or floor[1] > label.number):
        return False
    if mark is None:
        return True
    if mark[0] == label.epoch:
        return mark[1] <= label.number
    return floor is not None


@dataclass(frozen=True, slots=True)
class PeerScheme:
    """The scheme an asking node keyed a peer request by, and the peer key it offers."""

    scheme: str
    key: str


def believed_scheme(claim: PeerScheme | None, key: str | None) -> str | None:
    """The scheme an owner keys a peer's request by: the claimed one when it comes with the
    fleet's peer key (``key``, as this node last read it), else None (the request is
    refused: a client's claim, or a peer's key of another epoch)."""
    if claim is None or key is None:
        return None
    if not hmac.compare_digest(claim.key.encode(), key.encode()):
        return None
    return claim.scheme


def moved_share(before: Sequence[str], after: Sequence[str], keys: Iterable[bytes]) -> float:
    """The share of ``keys`` whose owner differs between two member lists (for tests and the
    benchmark: a join or a leave should move about 1/N)."""
    total = moved = 0
    for key in keys:
        total += 1
        moved += owner_of(key, before) != owner_of(key, after)
    return moved / total if total else 0.0
