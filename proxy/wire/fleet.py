"""The fleet's records (decisions 0014, 0026 and 0027): what the clear and purge scripts
publish and keep in Valkey, what a member acks with, and a dry run's questions and answers.

The hints, the purge records and the figures are written by the Lua scripts
(proxy/fleet/scripts.py, purge_scripts.py) and read here; their ``pack_*`` says in Python what
the scripts write, for the tests and for anyone reading. Version 1 of each is the bytes the
builds before decision 0027 wrote (no tag, see proxy/wire/__init__.py). The JSON parts (a
record's items, a dry answer) are decoded with msgspec into their types, field by field.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

import msgspec

from proxy.core.lease import ClearHint
from proxy.core.purge.fleet import CLEAR, Figures, PurgeRecord
from proxy.core.purge.purges import KINDS, InvalidPurge, Purge, PurgeResult, purge_request
from proxy.errors import WireError
from proxy.wire.versions import decode_json, number, object_version, text_version

READS = (1,)  # the versions of every fleet record this build reads
HINT = "hint"
RECORD = "purge-record"  # each family's name is its tag's: one word
FIGURES = "figures"
DRY_ASK = "dry-call"
DRY_REQUEST = "dry-request"
DRY_ANSWER = "dry-answer"
ACK_HINT = "ack-hint"


# -- clear and purge hints, on {cdn}:clears --------------------------------------------------------


def pack_hint(hint: ClearHint) -> str:
    """``epoch previous number domain``, then ``clear`` when the acks carry figures (a hard
    purge of all) or the kind of a purge other than a clear (as the scripts publish it)."""
    text = f"{hint.epoch} {hint.previous} {hint.number} {hint.domain}"
    if hint.kind != CLEAR:
        return f"{text} {hint.kind}"
    return f"{text} {CLEAR}" if hint.figures else text


def unpack_hint(text: str) -> ClearHint:
    """The hint ``text`` says; WireError for anything else (its reader syncs instead). On
    every member's path of every clear: the untagged form is read without a detour."""
    parts = text.split(" ")
    if "/" in parts[0]:
        parts = text_version(HINT, text, READS)[1].split(" ")
    if len(parts) == 4:
        epoch, previous, own, domain = parts
        kind, figures = CLEAR, False
    elif len(parts) == 5:
        epoch, previous, own, domain, kind = parts
        if kind not in KINDS and kind != CLEAR:
            raise WireError(f"{HINT} of an unknown kind {kind[:20]!r}")
        figures = kind == CLEAR
    else:
        raise WireError(f"not a {HINT}: {len(parts)} parts, not 4 or 5: {text[:80]!r}")
    before, after = number(previous), number(own)
    if before is None or after is None:
        raise WireError(f"not a {HINT}: its numbers are {previous[:20]!r} {own[:20]!r}")
    return ClearHint(epoch, before, after, domain, kind, figures)


def unpack_ack_hint(text: str) -> int:
    """An ack hint on ``{cdn}:acked``: the number of a clear every member it waited for
    acked (the ack script publishes it)."""
    _, body = text_version(ACK_HINT, text, READS)
    acked = number(body)
    if acked is None:
        raise WireError(f"not an {ACK_HINT}: {text[:40]!r}")
    return acked


# -- purge records, kept in {cdn}:purges ---------------------------------------------------------


def pack_record(purge: Purge) -> tuple[str, str, str]:
    """What the purge script joins after a record's number and domain: its kind, soft flag
    (1/0) and items as a JSON list without spaces (so the record splits on its first four)."""
    items = json.dumps(list(purge.items), separators=(",", ":"))
    return purge.kind, "1" if purge.soft else "0", items


def pack_record_text(number: int, domain: str, purge: Purge) -> str:
    """A whole record as the purge script keeps it."""
    return " ".join((str(number), domain, *pack_record(purge)))


def unpack_record(text: str) -> PurgeRecord:
    """A record as the purge script wrote it; WireError for anything else (its member then
    clears the domain: it cannot tell what the purge covered)."""
    _, body = text_version(RECORD, text, READS)
    parts = body.split(" ", 4)
    numbered = number(parts[0])
    if len(parts) != 5 or numbered is None or parts[3] not in ("0", "1"):
        raise WireError(f"not a {RECORD}: {text[:80]!r}")
    items = decode_json(RECORD, parts[4], list[str])
    try:
        purge = purge_request(parts[2], items, soft=parts[3] == "1")
    except InvalidPurge as exc:
        raise WireError(f"{RECORD} {numbered} is not a purge: {exc}") from None
    return PurgeRecord(number=numbered, domain=parts[1], purge=purge)


def record_head(text: str) -> tuple[int | None, str]:
    """The number (None if it cannot be read) and domain of a record that ``unpack_record``
    refused: the member clears that domain instead of applying it."""
    head, _, rest = text.partition(" ")
    return number(head), rest.partition(" ")[0]


# -- the figures members ack a purge with ----------------------------------------------------------


def pack_ack_figures(figures: Sequence[tuple[int, int, int, bool]]) -> tuple[int, ...]:
    """The ack script's extra arguments: number, entries, bytes, exact (1/0) per purge."""
    return tuple(v for n, e, b, x in figures for v in (n, e, b, 1 if x else 0))


def pack_figures(figures: Figures) -> str:
    """The sums the ack script keeps for one purge: ``reported entries bytes inexact``."""
    return f"{figures.reported} {figures.entries} {figures.bytes} {figures.inexact}"


def unpack_figures(text: str) -> Figures:
    _, body = text_version(FIGURES, text, READS)
    parts = [number(part) for part in body.split(" ")]
    if len(parts) != 4:
        raise WireError(f"not {FIGURES}: {text[:80]!r}")
    reported, entries, size, inexact = parts
    if reported is None or entries is None or size is None or inexact is None:
        raise WireError(f"not {FIGURES}: {text[:80]!r}")
    return Figures(reported, entries, size, inexact)


# -- dry runs: asked of every live member, each answering with its store's receipt -------------


def pack_dry_ask(ident: str, member: str) -> str:
    """What a control plane publishes on ``{cdn}:dry`` to ask ``member`` for dry run
    ``ident``: the request itself waits under a key named by the id."""
    return f"{ident} {member}"


def unpack_dry_ask(text: str) -> tuple[str, str]:
    """The id and the member of a dry-run call."""
    _, body = text_version(DRY_ASK, text, READS)
    ident, space, member = body.partition(" ")
    if not space or not ident or not member:
        raise WireError(f"not a {DRY_ASK}: {text[:80]!r}")
    return ident, member


def pack_dry_request(domain: str, purge: Purge) -> str:
    """``domain kind soft items``: a record without its number."""
    return " ".join((domain, *pack_record(purge)))


def unpack_dry_request(text: str) -> tuple[str, Purge]:
    """The domain and the (dry) purge a control plane asks a member about."""
    _, body = text_version(DRY_REQUEST, text, READS)
    try:
        record = unpack_record(f"0 {body}")
    except WireError as exc:
        raise WireError(f"not a {DRY_REQUEST}: {exc}") from None
    return record.domain, replace(record.purge, dry_run=True)


def pack_dry_answer(result: PurgeResult, member: str) -> str:
    """``member``'s receipt for a dry run, as it sends it: the receipt's fields as a JSON
    object, ``answered_by`` naming the member."""
    return msgspec.json.encode(replace(result, answered_by=member)).decode()


def unpack_dry_answer(text: str | bytes) -> PurgeResult:
    """A member's receipt for a dry run, ``answered_by`` naming the member."""
    fields = decode_json(DRY_ANSWER, text, dict[str, object])
    object_version(DRY_ANSWER, fields, READS)
    result = decode_json(DRY_ANSWER, text, PurgeResult)
    if result.answered_by is None:
        raise WireError(f"{DRY_ANSWER} names no member")
    return result
