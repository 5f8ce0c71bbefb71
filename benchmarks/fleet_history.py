"""The checker's history (benchmarks/fleet_checker.py): every read, clear and fault with its
start and end on one monotonic clock, and the check of the property of decision 0014:

    no read that starts after a clear's 200 returns a version older than that clear.

A clear's version is the one the origin was bumped to just before the clear was sent. Only
clears answered 200 constrain reads: a 503, another status or no answer at all promises
nothing. Only reads that got a 200 with a version can violate: a read that failed, timed
out or got a 5xx while a node was down is counted apart.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Read:
    node: str
    domain: str
    start: float
    end: float
    status: int | None  # None: no answer (refused, reset, timed out)
    version: int | None  # the body's version, for a 200
    hit: bool  # Cache-Status said hit: served from an edge cache
    error: str = ""
    page: str = ""  # the page read of the domain
    cache: str = ""  # the answer's Cache-Status header, as sent


@dataclass(frozen=True, slots=True)
class Clear:
    domain: str
    version: int
    start: float
    end: float
    status: int | None
    error: str = ""
    # A purge (decision 0026): its kind ("clear": the clear-cache API) and the pages of the
    # domain it covers (None: all of them); a soft purge must not let a covered page be
    # served without revalidation, which the origin answers with the new version.
    kind: str = "clear"
    pages: tuple[str, ...] | None = None

    def covers(self, page: str) -> bool:
        return self.pages is None or page in self.pages


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str
    target: str
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class Violation:
    read: Read
    clear: Clear  # the newest confirmed clear that ended before the read started


@dataclass
class History:
    reads: list[Read] = field(default_factory=list)
    clears: list[Clear] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    unrecovered: list[str] = field(default_factory=list)  # faults after which no clear got 200

    @property
    def confirmed(self) -> int:
        return sum(1 for clear in self.clears if clear.status == 200)

    def violations(self) -> list[Violation]:
        """Every read that returned a version older than a clear (or a purge covering its
        page) answered 200 before it started. Per domain and page: the confirmed clears and
        purges that cover it, sorted by end, with a running maximum of their versions; each
        read is checked against those that ended before it began."""
        found: list[Violation] = []
        pages = {(read.domain, read.page) for read in self.reads}
        for domain, page in pages:
            confirmed = sorted(
                (
                    c
                    for c in self.clears
                    if c.domain == domain and c.status == 200 and c.covers(page)
                ),
                key=lambda c: c.end,
            )
            ends = [clear.end for clear in confirmed]
            newest: list[Clear] = []  # newest[i]: the highest version among confirmed[: i + 1]
            for clear in confirmed:
                newest.append(
                    clear if not newest or clear.version > newest[-1].version else newest[-1]
                )
            for read in self.reads:
                if read.domain != domain or read.page != page or read.version is None:
                    continue
                before = bisect.bisect_left(ends, read.start)  # clears that ended before it
                if before and read.version < newest[before - 1].version:
                    found.append(Violation(read, newest[before - 1]))
        return found

    def report(self) -> str:
        """The counts, one line each: clears, reads, faults, violations, 503s, errors."""
        statuses = Counter(clear.status for clear in self.clears)
        clear_errors = Counter(clear.error for clear in self.clears if clear.status is None)
        other = sum(n for status, n in statuses.items() if status not in (200, 503, None))
        good = [read for read in self.reads if read.version is not None]
        read_5xx = sum(1 for read in self.reads if read.status and read.status >= 500)
        read_failed = Counter(read.error for read in self.reads if read.status is None)
        faults = Counter(fault.kind for fault in self.faults)
        violations = self.violations()
        kinds = Counter(c.kind for c in self.clears if c.status == 200)
        lines = [
            f"clears and purges {len(self.clears)}: 200 {statuses[200]}, 503 {statuses[503]},"
            f" other status {other}, no answer {sum(clear_errors.values())}"
            + _detail(clear_errors),
            "answered 200 by kind: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())),
            f"reads {len(self.reads)}: with a version {len(good)}"
            f" (cache hits {sum(1 for read in good if read.hit)}), 5xx {read_5xx},"
            f" no answer {sum(read_failed.values())}" + _detail(read_failed),
            f"faults {len(self.faults)}: "
            + ", ".join(f"{kind} {n}" for kind, n in sorted(faults.items())),
            f"violations {len(violations)}",
        ]
        if self.unrecovered:
            lines.append(f"not recovered after: {', '.join(self.unrecovered)}")
        for violation in violations[:10]:
            read, clear = violation.read, violation.clear
            lines.append(
                f"  {read.node} {read.domain}/{read.page}: read at {read.start:.3f} returned"
                f" v{read.version} after the {clear.kind} to v{clear.version} answered 200"
                f" at {clear.end:.3f}; Cache-Status {read.cache or '-'!r}"
                + self._fault_near(read.start)
            )
        return "\n".join(lines)

    def _fault_near(self, when: float) -> str:
        """The last fault that began before ``when``, to tell which fault a violation followed."""
        began = [fault for fault in self.faults if fault.start <= when]
        if not began:
            return ""
        fault = max(began, key=lambda f: f.start)
        return f"; last fault {fault.kind} {fault.target} {fault.start:.3f}-{fault.end:.3f}"


def _detail(errors: Counter[str]) -> str:
    return f" ({', '.join(f'{e} {n}' for e, n in errors.most_common())})" if errors else ""
