"""A line of the audit journal (proxy/state/journal.py; decisions 0016, 0027): one record of a
clear or purge attempt, written before its answer and read back at the next start if SQLite
did not get it.

A line is a JSON array: the version's tag, then the record's fields in ``AUDIT_FIELDS``'s
order (an array is faster to write than an object, and it is written on the clear's path),
the journal id last. ``audit/2`` is today's; ``audit/1`` (schema version 4, before purges had
a kind and a receipt) is read with those two None; any other tag is refused. JSON is written
ASCII-only and read by the standard library, so a lone surrogate from a client's body (which
msgspec's reader refuses) survives the round trip; msgspec then checks every field's type.
"""

from __future__ import annotations

import json

import msgspec

from proxy.errors import WireError

TAG = "audit/2"
TAG_1 = "audit/1"
LINE = "audit journal line"
# The fields of proxy.state.sqlite.AuditRecord, in order (state/journal.py checks they match).
AUDIT_FIELDS = (
    "at",
    "actor",
    "client",
    "domain",
    "outcome",
    "status",
    "entries_dropped",
    "duration_ms",
    "id",
    "acked",
    "live",
    "answered_by",
    "kind",
    "receipt",
    "journal_id",
)
ADDED_IN_2 = ("kind", "receipt")
# The fields' types, in the same order; a float field also takes an integer.
AuditValues = tuple[
    float,  # at
    str | None,  # actor
    str | None,  # client
    str | None,  # domain
    str,  # outcome
    int,  # status
    int,  # entries_dropped
    float,  # duration_ms
    int | None,  # id
    int | None,  # acked
    int | None,  # live
    str | None,  # answered_by
    str | None,  # kind
    str | None,  # receipt
    str,  # journal_id
]
_ENCODER = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"))


def pack_audit(values: tuple[object, ...], journal_id: str) -> bytes:
    """The line of a record whose fields but the journal id are ``values``, in order."""
    return _ENCODER.encode([TAG, *values, journal_id]).encode("ascii") + b"\n"


def unpack_audit(line: bytes) -> AuditValues:
    """The fields of one line, in ``AUDIT_FIELDS``'s order; WireError if it is not one."""
    try:
        values = json.loads(line)
    except (ValueError, RecursionError):
        raise WireError(f"not an {LINE}: not JSON") from None
    if not isinstance(values, list) or not values or not isinstance(values[0], str):
        raise WireError(f"not an {LINE}: not an array that starts with its version's tag")
    if values[0] == TAG_1:
        values = [TAG, *values[1:-1], *(None for _ in ADDED_IN_2), values[-1]]
    elif values[0] != TAG:
        raise WireError(f"{LINE} of version {values[0][:20]!r}: this build reads {TAG_1}, {TAG}")
    try:
        checked: AuditValues = msgspec.convert(values[1:], type=AuditValues)
    except msgspec.MsgspecError as exc:
        raise WireError(f"not an {LINE}: {exc}") from None
    return checked
