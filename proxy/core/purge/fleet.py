"""Purges of every kind in the fleet's numbered log (decisions 0014, 0024 and 0026), no I/O.

Theory of operation. A clear and a purge share one chain of numbers: each takes the next
number, publishes a hint naming the number before it, and is acked once applied. A hard
``all`` *is* a clear (it moves the domain's fleet generation). Every other purge is a
*record* kept in Valkey beside the chain: ``number domain kind soft items``, the items a
JSON list (they can be long: 256 targets of up to 8 KB), so the hint stays small
(``epoch previous number domain kind``) and the member reads the record.

Applying, in order, is what "acked" promises. A member may always apply *more* than was
asked (over-purging is safe, under-purging is not), which gives three shortcuts:
- a domain cleared locally needs none of the purges numbered before the local clear: the
  clear drops everything they could cover (a batch drops the purges before a clear of the
  same domain, and a sync that clears a domain drops all of its records);
- a record the member needs and cannot read (Valkey trimmed it, or it names another
  domain or kind than the hint did) becomes a local clear of its domain;
- a new epoch clears everything, so no record of it is needed.

The records kept are bounded (``KEPT_RECORDS``, ``KEPT_BYTES``, oldest dropped first); Valkey
keeps, per domain, the highest number it dropped (the domain's *floor*): a member whose
applied number is below a floor missed a record it can no longer read, and clears the domain.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import cast

from proxy.core.purge.purges import (
    KINDS,
    MAX_SAMPLE,
    InvalidPurge,
    Purge,
    PurgeResult,
    purge_request,
)

KEPT_RECORDS = 1024  # purge records Valkey keeps (all domains), oldest dropped first
KEPT_BYTES = 8 << 20  # and their bytes: one purge at its largest (about 2 MB) fits
CLEAR = "clear"  # the kind a hint of a clear (a hard ``all``) carries, implicitly


@dataclass(frozen=True, slots=True)
class PurgeRecord:
    """One purge other than a clear, as the log keeps it."""

    number: int
    domain: str
    purge: Purge


def format_record(domain: str, purge: Purge) -> tuple[str, str, str]:
    """The parts of a record the purge script joins after the number: kind, soft flag, and
    the items as a JSON list (no spaces inside, so the record splits on its first four)."""
    items = json.dumps(list(purge.items), separators=(",", ":"))
    return purge.kind, "1" if purge.soft else "0", items


def parse_record(text: str) -> PurgeRecord | None:
    """A record as the purge script wrote it, or None for anything else (the member then
    clears the domain: it cannot tell what the purge covered)."""
    parts = text.split(" ", 4)
    if len(parts) != 5 or not parts[0].isdigit() or parts[3] not in ("0", "1"):
        return None
    try:
        items = json.loads(parts[4])
        if not isinstance(items, list):
            return None
        purge = purge_request(parts[2], cast(Sequence[object], items), soft=parts[3] == "1")
    except (ValueError, InvalidPurge):
        return None
    return PurgeRecord(number=int(parts[0]), domain=parts[1], purge=purge)


def hint_kind(text: str) -> str | None:
    """The kind a hint names (its fifth part; a clear's hint has four), or None if unknown."""
    return text if text in KINDS or text == CLEAR else None


@dataclass(frozen=True, slots=True)
class PurgeStep:
    """One purge a member applies: its number and domain, and its record once read (None:
    not read yet; the member reads it, or clears the domain if it cannot)."""

    number: int
    domain: str
    kind: str
    record: PurgeRecord | None = None

    def matches(self, record: PurgeRecord) -> bool:
        """Whether ``record`` is the one the hint announced (a record of the same number
        from another data set is not)."""
        return (
            record.number == self.number
            and record.domain == self.domain
            and record.purge.kind == self.kind
        )


def steps_after_clears(steps: Sequence[PurgeStep], cleared: Sequence[str]) -> tuple[PurgeStep, ...]:
    """The purges still worth applying once ``cleared`` domains are cleared now: the others'."""
    gone = set(cleared)
    return tuple(step for step in steps if step.domain not in gone)


def figures_args(figures: Sequence[tuple[int, int, int, bool]]) -> tuple[int, ...]:
    """The ack script's extra arguments: number, entries, bytes, exact (1/0) per purge."""
    return tuple(v for n, e, b, x in figures for v in (n, e, b, 1 if x else 0))


@dataclass(frozen=True, slots=True)
class Figures:
    """What the members that applied one purge reported with their acks: how many, and the
    sum of their entries and bytes; ``inexact``: how many of them reported a bound."""

    reported: int
    entries: int
    bytes: int
    inexact: int


def parse_figures(text: str | None) -> Figures:
    parts = (text or "").split(" ")
    if len(parts) != 4 or not all(p.isdigit() for p in parts):
        return Figures(0, 0, 0, 0)
    reported, entries, size, inexact = (int(p) for p in parts)
    return Figures(reported, entries, size, inexact)


# -- dry runs: asked of every live member, each answering with its store's receipt -------------


def dry_request(domain: str, purge: Purge) -> str:
    kind, soft, items = format_record(domain, purge)
    return f"{domain} {kind} {soft} {items}"


def parse_dry_request(text: str) -> tuple[str, Purge] | None:
    """The domain and the (dry) purge a control plane asks a member about, or None."""
    record = parse_record(f"0 {text}")
    if record is None:
        return None
    return record.domain, replace(record.purge, dry_run=True)


def dry_answer(result: PurgeResult, member: str) -> str:
    """``member``'s receipt for a dry run, as it sends it (``answered_by`` names it)."""
    fields = {
        **asdict(result),
        "items": list(result.items),
        "sample": list(result.sample),
        "answered_by": member,
    }
    return json.dumps(fields, separators=(",", ":"))


def parse_dry_answer(text: str) -> PurgeResult | None:
    """A member's receipt for a dry run (``answered_by`` naming the member), or None."""
    try:
        fields = json.loads(text)
        fields["items"] = tuple(fields["items"])
        fields["sample"] = tuple(fields["sample"])
        result = PurgeResult(**fields)
    except (ValueError, TypeError, KeyError):
        return None
    return result if isinstance(result.answered_by, str) else None


def merge_dry_answers(
    domain: str, purge: Purge, answers: Sequence[PurgeResult], live: int
) -> PurgeResult:
    """One receipt for a dry run that ``live`` edge processes were asked for, from the
    ``answers`` that came: each process has its own cache, so the entries and bytes are the
    sums of theirs (as a purge's figures are), ``reported`` says how many answered, and the
    figures are exact only when every one answered with exact figures. The sample is theirs,
    in the order they came, each target once, at most MAX_SAMPLE."""
    sample: dict[str, None] = {}
    for answer in answers:
        for target in answer.sample:
            if len(sample) < MAX_SAMPLE:
                sample.setdefault(target)
    return PurgeResult(
        domain=domain,
        kind=purge.kind,
        items=purge.items,
        soft=purge.soft,
        dry_run=True,
        number=max((answer.number for answer in answers), default=0),
        generation=max((answer.generation for answer in answers), default=0),
        entries=sum(answer.entries for answer in answers),
        bytes=sum(answer.bytes for answer in answers),
        exact=len(answers) == live and all(answer.exact for answer in answers),
        seconds=0.0,
        sample=tuple(sample),
        live=live,
        reported=len(answers),
    )
