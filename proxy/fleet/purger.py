"""The control plane's clear: record it in one step, then wait for the fleet (0014).

``clear_domain`` runs the clear script (the clear is then recorded, numbered and published),
then asks the pending script who has not applied it, again whenever an ack hint arrives on
``{cdn}:acked`` and every ``poll_interval`` regardless, until ``proxy.core.lease`` decides:
done (return, so the API answers 200), or give up at ``clear_timeout`` (raise
``ClearNotConfirmed``, so the API answers 503 with Retry-After). It subscribes to the ack
hints before the clear, so no hint of this clear can be missed; a hint lost anyway costs at
most one poll interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from proxy.core.lease import Done, GiveUp, wait_decision
from proxy.errors import ClearNotConfirmed, FleetUnavailable
from proxy.fleet.scripts import ACKED, FleetScripts, Hints, MembersView, connect
from proxy.fleet.settings import FleetSettings
from proxy.store.base import ClearResult


class FleetPurger:
    """Implements ``proxy.store.base.Purger`` for a fleet. ``name`` is the control plane's, for
    the clear log (History shows which control plane answered each clear)."""

    def __init__(
        self,
        *,
        settings: FleetSettings,
        name: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.name = name
        self._clock = clock
        self._scripts = FleetScripts(
            connect(settings.url, timeout=settings.timeout), timeout=settings.timeout
        )

    async def aclose(self) -> None:
        await self._scripts.aclose()

    async def members(self) -> MembersView:
        """Every member with its info, lease and ack (the Nodes page)."""
        return await self._scripts.members()

    async def clear_domain(self, domain: str) -> ClearResult:
        """Raises FleetUnavailable when the clear could not be recorded (or it is unknown
        whether it was), ClearNotConfirmed when it was but the fleet did not confirm it."""
        settings = self.settings
        deadline = self._clock() + settings.clear_timeout
        hints = self._scripts.hints(ACKED) if settings.hints else None
        try:
            if hints is not None:
                with contextlib.suppress(FleetUnavailable):  # polling does without hints
                    await hints.subscribe()
            record = await self._scripts.clear(domain, by=self.name)
            decision = await self._wait(domain, record.number, record.epoch, deadline, hints)
        finally:
            if hints is not None:
                await hints.aclose()
        return ClearResult(
            domain=domain,
            entries_dropped=0,  # each edge process drops its own; none is counted here
            generation=record.number,
            acked=decision.acked,
            live=decision.live,
        )

    async def _wait(
        self, domain: str, number: int, epoch: str, deadline: float, hints: Hints | None
    ) -> Done:
        settings = self.settings
        acked = live = 0
        retry_after = max(1, round(settings.lease + 0.5))
        while True:
            try:
                view = await self._scripts.pending()
            except FleetUnavailable:
                view = None
            now = self._clock()
            if view is None:
                if now >= deadline:
                    raise ClearNotConfirmed(
                        domain=domain,
                        number=number,
                        acked=acked,
                        live=live,
                        retry_after=retry_after,
                    )
                await asyncio.sleep(min(settings.poll_interval, deadline - now))
                continue
            decision = wait_decision(
                number=number,
                epoch_at_clear=epoch,
                view=view,
                grace=settings.lease,
                poll_interval=settings.poll_interval,
                now=now,
                deadline=deadline,
            )
            if isinstance(decision, Done):
                return decision
            if isinstance(decision, GiveUp):
                raise ClearNotConfirmed(
                    domain=domain,
                    number=number,
                    acked=decision.acked,
                    live=decision.live,
                    retry_after=decision.retry_after,
                )
            acked, live = decision.acked, decision.live
            await self._pause(decision.seconds, hints)

    async def _pause(self, seconds: float, hints: Hints | None) -> None:
        """Until an ack hint arrives or ``seconds`` pass."""
        if hints is None or seconds <= 0:
            await asyncio.sleep(max(seconds, 0))
            return
        try:
            await hints.next(seconds)
        except FleetUnavailable:
            await asyncio.sleep(seconds)
