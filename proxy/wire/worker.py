"""What an edge worker tells its node on standard output (proxy/process/worker.py writes,
proxy/process/supervisor.py and node.py read): ``ready`` once it listens, then one line per
reload, ``reloaded ok|failed DIGEST MESSAGE`` (DIGEST: the config file's, ``-`` if it could
not be read). Version 1 is those lines untagged; a worker restarted after an upgrade may be
of a newer build than its node, so a later version is tagged ``worker/<n>`` and refused here.

The node asks a worker on its standard input (a pipe nobody else holds) what its store holds
for a URL, for a trace (decision 0038): ``inspect ID {"domain": ..., "target": ...}``; the
worker answers ``inspected ID {held}`` on its standard output, ``held`` being its
``core.cache.trace.Held`` without bodies (``pack_held``): a trace reads no body, and only the
response fields a lifetime's source is read from (``TRACE_FIELDS``) travel.
"""

from __future__ import annotations

from typing import Any

import msgspec

from proxy.core.cache.entry import StoredResponse
from proxy.core.cache.trace import Held
from proxy.errors import WireError
from proxy.wire.versions import decode_json, number, text_version

READS = (1,)
LINE = "worker"
NO_DIGEST = "-"


class Ready(msgspec.Struct, frozen=True):
    """The worker listens."""


class Reloaded(msgspec.Struct, frozen=True):
    """The worker re-read the config file: ``ok`` (applied) or not, with the digest of what
    it read (None: nothing read) and a message for the operator."""

    ok: bool
    digest: str | None
    message: str


class Inspect(msgspec.Struct, frozen=True):
    """The node asks: what does the worker's store hold for ``target`` (a cache target)?"""

    id: int
    domain: str
    target: str


class Variant(msgspec.Struct, frozen=True, kw_only=True):
    """A stored variant as a trace reads it: no body, and only ``TRACE_FIELDS``."""

    status: int
    reason: str = ""
    headers: list[tuple[str, str]] = []
    birth: float
    freshness_lifetime: float
    revalidate_always: bool = False
    vary: list[str] = []
    vary_values: list[str | None] = []
    stale_if_error: float | None = None
    stale_while_revalidate: float = 0.0
    tags: list[str] = []


class HeldRecord(msgspec.Struct, frozen=True, kw_only=True):
    variants: list[Variant] = []
    generation: int = 0
    purge_number: int = 0
    purges: list[tuple[str, list[str], bool]] = []
    pending: int = 0
    refused: tuple[str, int, float] | None = None  # hit-for-miss: why, status, when


class Inspected(msgspec.Struct, frozen=True):
    """The worker's answer to ``Inspect`` number ``id``."""

    id: int
    held: HeldRecord


WorkerLine = Ready | Reloaded | Inspected

# The stored fields a trace reads (the lifetime's source: core/cache/trace.py
# ``lifetime_source``); the others stay in the worker.
TRACE_FIELDS = frozenset(
    {"cache-control", "cdn-cache-control", "surrogate-control", "expires", "date", "age"}
)
VARIANTS_MAX = 32  # a key's variants sent for one trace
_ENCODER = msgspec.json.Encoder()


def pack_held(held: Held) -> HeldRecord:
    return HeldRecord(
        variants=[_variant(response) for response in held.variants[:VARIANTS_MAX]],
        generation=held.generation,
        purge_number=held.purge_number,
        purges=[(kind, list(items), soft) for kind, items, soft in held.purges],
        pending=held.pending,
        refused=held.refused,
    )


# The variant's fields, as they are in a StoredResponse: values, and tuples (lists here).
_VALUES = (
    "status",
    "reason",
    "birth",
    "freshness_lifetime",
    "revalidate_always",
    "stale_if_error",
    "stale_while_revalidate",
)
_TUPLES = ("vary", "vary_values", "tags")


def _variant(response: StoredResponse) -> Variant:
    fields: dict[str, Any] = {name: getattr(response, name) for name in _VALUES}
    fields.update((name, list(getattr(response, name))) for name in _TUPLES)
    headers = [(n, v) for n, v in response.headers if n.lower() in TRACE_FIELDS]
    return Variant(headers=headers, **fields)


def _stored(variant: Variant) -> StoredResponse:
    """A body-less StoredResponse with the variant's fields."""
    fields: dict[str, Any] = {name: getattr(variant, name) for name in _VALUES}
    fields.update((name, tuple(getattr(variant, name))) for name in _TUPLES)
    return StoredResponse(headers=tuple(variant.headers), body=b"", **fields)


def unpack_held(record: HeldRecord) -> Held:
    """The ``Held`` a trace judges, each variant a body-less ``StoredResponse``."""
    return Held(
        variants=tuple(_stored(variant) for variant in record.variants),
        generation=record.generation,
        purge_number=record.purge_number,
        purges=tuple((kind, tuple(items), soft) for kind, items, soft in record.purges),
        pending=record.pending,
        refused=record.refused,
    )


class _Asked(msgspec.Struct, frozen=True):
    domain: str
    target: str


def pack_inspect(asked: Inspect) -> str:
    body = _ENCODER.encode(_Asked(asked.domain, asked.target)).decode()
    return f"inspect {asked.id} {body}"


def unpack_inspect(text: str) -> Inspect:
    """A node's question, without its newline; WireError for anything else."""
    _, body = text_version(LINE, text, READS)
    what, _, rest = body.partition(" ")
    ident, _, fields = rest.partition(" ")
    found = number(ident)
    if what != "inspect" or found is None:
        raise WireError(f"not an inspect line: {text[:80]!r}")
    asked = decode_json("inspect line", fields, _Asked)
    return Inspect(found, asked.domain, asked.target)


def pack_worker_line(line: WorkerLine) -> str:
    """One line, without its newline: a message's own line breaks become spaces."""
    if isinstance(line, Ready):
        return "ready"
    if isinstance(line, Inspected):
        return f"inspected {line.id} {_ENCODER.encode(line.held).decode()}"
    said = "ok" if line.ok else "failed"
    digest = line.digest or NO_DIGEST  # hex: one part
    message = " ".join(line.message.split())
    return f"reloaded {said} {digest} {message}".rstrip(" ")


def unpack_worker_line(text: str) -> WorkerLine:
    """A worker's line, without its newline; WireError for anything else."""
    _, body = text_version(LINE, text, READS)
    if body == "ready":
        return Ready()
    what, _, rest = body.partition(" ")
    if what == "inspected":
        ident, _, held = rest.partition(" ")
        found = number(ident)
        if found is None:
            raise WireError(f"not a {LINE}: {text[:80]!r}")
        return Inspected(found, decode_json("inspected line", held, HeldRecord))
    said, _, rest = rest.partition(" ")
    digest, _, message = rest.partition(" ")
    if what != "reloaded" or said not in ("ok", "failed") or not digest:
        raise WireError(f"not a {LINE}: {text[:80]!r}")
    return Reloaded(said == "ok", None if digest == NO_DIGEST else digest, message)
