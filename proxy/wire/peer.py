"""The purge label an owner puts on a peer fill's answer (issue 33; proxy/core/peer.py), as
the header ``CDN-Proxy-Purge-Label`` carries it: ``peer-label/1 <epoch> <number>``; and the
scheme an asking node keyed the request by, with the fleet's peer key that lets the owner
believe it, as ``CDN-Proxy-Peer-Scheme`` carries it: ``peer-scheme/1 <http|https> <key>``.

Only a node of the fleet reads it, only on an answer to a request it sent its peer, and
``unpack_label`` reads anything else (a missing, malformed or future label) as no label: the
asking node then uses nothing of the answer and goes to the origin (``core.peer.usable``).
"""

from __future__ import annotations

from proxy.core.peer import PeerScheme, PurgeLabel
from proxy.errors import WireError
from proxy.wire.versions import number, text_version

LABEL_HEADER = "CDN-Proxy-Purge-Label"
LABEL = "peer-label"
SCHEME_HEADER = "CDN-Proxy-Peer-Scheme"
SCHEME = "peer-scheme"
_SCHEMES = frozenset({"http", "https"})
READS = (1,)
_WRITES = 1
_EPOCH_CHARS = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_:.")


def pack_label(label: PurgeLabel) -> str:
    return f"{LABEL}/{_WRITES} {label.epoch} {label.number}"


def unpack_label(text: str | None) -> PurgeLabel | None:
    """The label ``text`` carries, or None when there is none this build can trust."""
    if text is None:
        return None
    try:
        version, rest = text_version(LABEL, text, READS)
    except WireError:
        return None
    if version != _WRITES or text == rest:  # untagged: never written by any build
        return None
    epoch, _, digits = rest.partition(" ")
    value = number(digits) if digits != "0" else 0
    if not epoch or not set(epoch) <= _EPOCH_CHARS or len(epoch) > 64 or value is None:
        return None
    return PurgeLabel(epoch, value)


def pack_scheme(claim: PeerScheme) -> str:
    return f"{SCHEME}/{_WRITES} {claim.scheme} {claim.key}"


def unpack_scheme(text: str) -> PeerScheme | None:
    """The claim ``text`` carries, or None when it is not one this build reads (the owner
    then refuses the request: core.peer.believed_scheme)."""
    try:
        version, rest = text_version(SCHEME, text, READS)
    except WireError:
        return None
    if version != _WRITES or text == rest:
        return None
    scheme, _, key = rest.partition(" ")
    if scheme not in _SCHEMES or not key or len(key) > 128 or not set(key) <= _EPOCH_CHARS:
        return None
    return PeerScheme(scheme, key)
