"""The Domains page's entries and bytes per domain, true right after the page's own clear
(issue 34 B8).

With workers, the figures are the edge processes' own reports, which each writes at its sync
(every ``fleet.renew`` seconds) and the control plane reads once a second
(proxy/fleet/figures.py). A clear answers as soon as every live edge process has applied it,
before any has written its next report: the page it redirects to would sum reports made
before the clear, and show entries that can never answer again under its "Cache cleared"
banner.

A report names the last clear its process had applied (``applied``), in the fleet's one
sequence of clear numbers, the one acks are counted in. Right after a clear, the acks of the
live processes are at or past its number: the lowest of them is the domain's *floor*. A
report below the floor was made before the clear, so none of the domain's entries it counts
can answer (the clear made them unreachable): it counts none. Reports at or past the floor
count as they are. A floor is kept per domain until the dashboard restarts; a process that
caught up is counted again at its next report, so the floor costs no accuracy later.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from proxy.errors import FleetUnavailable
from proxy.store.base import DomainStats

if TYPE_CHECKING:  # the fleet, with its Valkey client, only where a node has one
    from proxy.fleet.figures import FleetFigures


@dataclass(slots=True)
class ClearFloors:
    """Per domain, the lowest ack of the live edge processes right after its last clear
    through the dashboard."""

    floors: dict[str, int] = field(default_factory=dict)

    async def cleared(self, fleet: FleetFigures, domain: str) -> None:
        """Note the floor after a clear of ``domain`` that every live process applied."""
        with contextlib.suppress(FleetUnavailable):  # the page then shows the last reports
            await fleet.refresh()
            acks = [process.acked for process in fleet.processes() if not process.fenced]
            if acks:
                self.floors[domain] = min(acks)

    def domain_stats(self, fleet: FleetFigures, domain: str) -> DomainStats | None:
        """The domain's entries and bytes counting no report made before its floor; None
        when the dashboard has not cleared it (the fleet's own sums are then right)."""
        floor = self.floors.get(domain)
        if floor is None:
            return None
        entries = size = 0
        for info, _ in fleet.reports():
            if info.applied >= floor:
                counted = info.domains.get(domain, (0, 0))
                entries, size = entries + counted[0], size + counted[1]
        return DomainStats(entries=entries, bytes=size)
