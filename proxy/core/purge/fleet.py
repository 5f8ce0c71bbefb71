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

from collections.abc import Sequence
from dataclasses import dataclass, replace

from proxy.core.purge.purges import MAX_SAMPLE, Purge, PurgeResult

KEPT_RECORDS = 1024  # purge records Valkey keeps (all domains), oldest dropped first
KEPT_BYTES = 8 << 20  # and their bytes: one purge at its largest (about 2 MB) fits
CLEAR = "clear"  # the kind a hint of a clear (a hard ``all``) carries, implicitly


@dataclass(frozen=True, slots=True)
class PurgeRecord:
    """One purge other than a clear, as the log keeps it."""

    number: int
    domain: str
    purge: Purge


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


@dataclass(frozen=True, slots=True)
class Figures:
    """What the members that applied one purge reported with their acks: how many, and the
    sum of their entries and bytes; ``inexact``: how many of them reported a bound."""

    reported: int
    entries: int
    bytes: int
    inexact: int


NO_FIGURES = Figures(0, 0, 0, 0)


# -- receipts: a purge's as the fleet applied it, a dry run's as the members counted it --------


def purge_receipt(
    domain: str,
    purge: Purge,
    *,
    number: int,
    generation: int,
    figures: Figures | None,
    acked: int,
    live: int,
    seconds: float,
) -> PurgeResult:
    """The receipt of a purge every live member applied (``acked`` of ``live``): the
    entries and bytes are the sums of the ``figures`` members sent with their acks (None:
    not known), exact when every member that acked reported exact ones."""
    exact = figures is not None and not figures.inexact and figures.reported == acked
    known = NO_FIGURES if figures is None else figures
    return _receipt(domain, purge, number, generation, known, exact, seconds, acked, live)


def _receipt(
    domain: str,
    purge: Purge,
    number: int,
    generation: int,
    figures: Figures,
    exact: bool,
    seconds: float,
    acked: int | None,
    live: int,
    sample: tuple[str, ...] = (),
) -> PurgeResult:
    # In PurgeResult's order: what was asked, then what came of it.
    asked = (domain, purge.kind, purge.items, purge.soft, purge.dry_run)
    came = (number, generation, figures.entries, figures.bytes, exact, seconds, sample)
    return PurgeResult(*(asked + came), acked=acked, live=live, reported=figures.reported)


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
    figures = Figures(
        reported=len(answers),
        entries=sum(answer.entries for answer in answers),
        bytes=sum(answer.bytes for answer in answers),
        inexact=sum(1 for answer in answers if not answer.exact),
    )
    return _receipt(
        domain,
        replace(purge, dry_run=True),
        max((answer.number for answer in answers), default=0),
        max((answer.generation for answer in answers), default=0),
        figures,
        len(answers) == live and not figures.inexact,
        0.0,
        None,
        live,
        tuple(sample),
    )
