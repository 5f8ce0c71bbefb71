"""The control plane's clear: record it in one step, then wait for the fleet (0014).

``clear_domain`` runs the clear script (the clear is then recorded, numbered and published,
and the script's reply already says which live members have not applied it), then waits
until ``proxy.core.lease`` decides: done (return, so the API answers 200), or give up at
``clear_timeout`` (raise ``ClearNotConfirmed``, so the API answers 503 with Retry-After).
Valkey is asked again (the pending script) when an ack hint says every member the clear
waited for has acked it, and every ``poll_interval`` regardless.

The ack hints come through one subscription to ``{cdn}:acked`` that lives as long as the
purger (``AckHints``); each clear registers a waiter with it *before* the clear script runs,
so no hint of this clear can be missed while the subscription holds. A hint lost anyway
costs at most one poll interval: hints decide when to ask Valkey, never the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace

from proxy.core.lease import (
    Done,
    FleetView,
    GiveUp,
    Wait,
    hints_cover,
    unreachable_retry_after,
    wait_decision,
)
from proxy.core.purge.fleet import merge_dry_answers, purge_receipt
from proxy.core.purge.purges import Purge, PurgeResult
from proxy.errors import ClearNotConfirmed, FleetUnavailable, NotReplicated, WireError
from proxy.fleet.scripts import ACKED, ClearRecord, FleetScripts, MembersView
from proxy.fleet.settings import FleetSettings
from proxy.store.base import ClearResult, Position
from proxy.wire.fleet import pack_dry_request, unpack_ack_hint, unpack_dry_answer
from proxy.wire.reports import unpack_member_info

log = logging.getLogger("proxy.fleet")


class AckWaiter:
    """One clear's view of the ack hints: the highest clear number hinted as acked by every
    member it waited for."""

    def __init__(self) -> None:
        self.hinted = 0
        self.arrived = asyncio.Event()

    def add(self, number: int) -> None:
        self.hinted = max(self.hinted, number)
        self.arrived.set()


class AckHints:
    """The control plane's one subscription to the ack hints, started at the first clear and
    subscribed again after it breaks or after any failed Valkey call (a black-holed
    connection would otherwise wait in silence). Each hint is a clear's number."""

    def __init__(self, scripts: FleetScripts, settings: FleetSettings) -> None:
        self._scripts = scripts
        self._settings = settings
        self._waiters: set[AckWaiter] = set()
        self._subscribed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping: set[asyncio.Task[None]] = set()  # cancelled, until they are done

    @contextlib.contextmanager
    def waiter(self) -> Iterator[AckWaiter]:
        waiter = AckWaiter()
        self._waiters.add(waiter)
        try:
            yield waiter
        finally:
            self._waiters.discard(waiter)

    async def ready(self) -> None:
        """Start the subscription if it is not running, and wait (at most one Valkey call's
        timeout) until it holds. If it does not, the clear goes on and polls."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._listen(), name="fleet-ack-hints")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._settings.timeout):
                await self._subscribed.wait()

    def restart(self) -> None:
        """Drop the subscription; the next clear subscribes again."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)
        self._subscribed.clear()

    async def aclose(self) -> None:
        self.restart()
        if self._stopping:
            # Bounded: a call stuck on a black-holed socket must not hold up shutdown.
            await asyncio.wait(self._stopping, timeout=2 * self._settings.timeout)

    async def _listen(self) -> None:
        while True:
            hints = self._scripts.hints(ACKED)
            try:
                await hints.subscribe()
                self._subscribed.set()
                while True:
                    text = await hints.next(self._settings.renew)
                    if text is not None:
                        self._dispatch(text)
            except FleetUnavailable:
                pass
            finally:
                self._subscribed.clear()
                await hints.aclose()
            await asyncio.sleep(self._settings.poll_interval)  # back off, then subscribe again

    def _dispatch(self, text: str) -> None:
        try:
            number = unpack_ack_hint(text)
        except WireError as exc:
            log.info("ack hint ignored: %s", exc)  # hints only say when to ask Valkey
            return
        for waiter in self._waiters:
            waiter.add(number)


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
        self.settings, self.name, self._clock = settings, name, clock
        self._scripts = FleetScripts.of(settings, replicated=True)
        self._hints = AckHints(self._scripts, settings) if settings.hints else None

    async def aclose(self) -> None:
        if self._hints is not None:
            await self._hints.aclose()
        await self._scripts.aclose()

    async def members(self) -> MembersView:
        """Every member with its info, lease and ack (the Nodes page)."""
        return await self._scripts.members()

    async def position(self, domain: str) -> Position:
        """The fleet's latest number and ``domain``'s generation, for a dry run's receipt and
        a trace: the series receipts are numbered in (issue 34 B3). FleetUnavailable."""
        return await self._scripts.position(domain)

    async def clear_domain(self, domain: str) -> ClearResult:
        """Raises FleetUnavailable when the clear could not be recorded (or it is unknown
        whether it was, or fewer than ``replicas`` replicas confirmed it: NotReplicated),
        ClearNotConfirmed when it was but the fleet did not confirm it."""
        record, done = await self._recorded(
            domain, lambda: self._scripts.clear(domain, by=self.name, figures=True)
        )
        # Each edge process drops its own copies and acks with their count: the audit log
        # records their sum, as a dry run just before counts them (issue 31 §5).
        try:
            figures = await self._scripts.figures(record.number)
        except (FleetUnavailable, WireError):  # the clear is done; only its figures are unknown
            figures = None
        return ClearResult(
            domain=domain,
            entries_dropped=0 if figures is None else figures.entries,
            generation=record.number,
            bytes_dropped=0 if figures is None else figures.bytes,
            acked=done.acked,
            live=done.live,
            epoch=record.epoch,
        )

    async def purge(self, domain: str, purge: Purge) -> PurgeResult:
        """A purge of any kind through the fleet's numbered log (decision 0026): a hard
        ``all`` is a clear; the others are records applied by every member before it acks.
        Returns once every live member applied it, raises as ``clear_domain`` does. The
        entries and bytes are the sums the members sent with their acks (``reported`` of
        them). A dry run is counted by every live member, each in its own store."""
        started = time.perf_counter()
        if purge.dry_run:
            return await self._dry_run(domain, purge, started)
        hard_all = purge.kind == "all" and not purge.soft
        scripts = self._scripts

        def record() -> Awaitable[ClearRecord]:
            if hard_all:
                return scripts.clear(domain, by=self.name, figures=True)
            return scripts.purge(domain, purge, by=self.name)

        recorded, done = await self._recorded(domain, record)
        try:
            figures = await scripts.figures(recorded.number)
        except (FleetUnavailable, WireError):  # the purge is done; only its figures are unknown
            figures = None
        receipt = purge_receipt(
            domain,
            purge,
            number=recorded.number,
            generation=recorded.number if hard_all else recorded.generation,
            figures=figures,
            acked=done.acked,
            live=done.live,
            seconds=time.perf_counter() - started,
        )
        return replace(receipt, epoch=recorded.epoch)

    async def _dry_run(self, domain: str, purge: Purge, started: float) -> PurgeResult:
        """Not a fleet operation: every live member not fenced is asked to count what the
        purge would cover in its store, and the receipt sums those that answered within
        ``clear_timeout`` (decision 0026, "Dry runs"). A member whose lease runs out while
        it is waited for no longer serves from its cache and is no longer waited for.
        FleetUnavailable if none is live, or none answered."""
        # Read first: every purge answered before the dry run has a number up to this one,
        # and every live member applied it before it was answered, so before it counts.
        position = await self._scripts.position(domain)
        asked = self._live(await self._scripts.members())
        if not asked:
            raise FleetUnavailable("no live edge process to answer the dry run")
        within = self.settings.clear_timeout
        ident = await self._scripts.ask_dry(
            sorted(asked), pack_dry_request(domain, purge), ttl=within + self.settings.timeout
        )
        if ident is None:
            raise FleetUnavailable("no edge process listens for dry runs")
        answers: dict[str, PurgeResult] = {}
        every = min(self.settings.poll_interval, 0.01)
        deadline = self._clock() + within
        look_again = self._clock() + self.settings.renew
        try:
            while True:
                for text in await self._scripts.dry_answers(ident):
                    try:
                        answer = unpack_dry_answer(text)
                    except WireError as exc:
                        log.warning("dry-run answer ignored: %s", exc)
                        continue
                    member = answer.answered_by
                    if member is not None and member in asked:
                        answers[member] = answer
                if asked <= answers.keys() or self._clock() >= deadline:
                    break
                if self._clock() >= look_again:
                    asked &= self._live(await self._scripts.members()) | answers.keys()
                    look_again = self._clock() + self.settings.renew
                    continue
                await asyncio.sleep(every)
        finally:
            with contextlib.suppress(FleetUnavailable):
                await self._scripts.end_dry(ident)
        if not answers:
            raise FleetUnavailable(f"no edge process answered the dry run within {within:g} s")
        result = merge_dry_answers(domain, purge, list(answers.values()), len(asked))
        # The members' answers number the purge in each store's own count: the receipt
        # gives the fleet's numbers instead, the series of every purge's receipt.
        return replace(
            result,
            number=position.number,
            generation=position.generation,
            seconds=time.perf_counter() - started,
        )

    @staticmethod
    def _live(view: MembersView) -> set[str]:
        """The members whose lease is live and which were not fenced at their last sync (a
        member whose info cannot be read is asked: it may answer)."""
        return {
            row.member
            for row in view.members
            if row.expires_ms > view.now_ms and not _fenced(row.info)
        }

    async def _recorded(
        self, domain: str, record: Callable[[], Awaitable[ClearRecord]]
    ) -> tuple[ClearRecord, Done]:
        """Record a clear or a purge (``record``: the script), then wait for the fleet."""
        deadline = self._clock() + self.settings.clear_timeout
        if self._hints is None:
            return await self._confirmed(domain, record, deadline, None)
        await self._hints.ready()
        with self._hints.waiter() as waiter:
            return await self._confirmed(domain, record, deadline, waiter)

    async def _confirmed(
        self,
        domain: str,
        recording: Callable[[], Awaitable[ClearRecord]],
        deadline: float,
        waiter: AckWaiter | None,
    ) -> tuple[ClearRecord, Done]:
        try:
            record = await recording()
        except NotReplicated:
            raise  # Valkey answered: the hint subscription is sound
        except FleetUnavailable:
            self._restart_hints()
            raise
        settings = self.settings
        view: FleetView | None = record.view
        acked, live = 0, len(record.view.live)
        while True:
            now = self._clock()
            if view is not None:
                decision = wait_decision(
                    number=record.number,
                    epoch_at_clear=record.epoch,
                    view=view,
                    grace=settings.lease,
                    poll_interval=settings.poll_interval,
                    now=now,
                    deadline=deadline,
                )
                if isinstance(decision, Done):
                    return record, decision
                if isinstance(decision, GiveUp):
                    raise ClearNotConfirmed(
                        domain=domain,
                        number=record.number,
                        acked=decision.acked,
                        live=decision.live,
                        retry_after=decision.retry_after,
                    )
                acked, live = decision.acked, decision.live
                await self._pause(decision, waiter)
            elif now >= deadline:
                raise ClearNotConfirmed(
                    domain=domain,
                    number=record.number,
                    acked=acked,
                    live=live,
                    retry_after=unreachable_retry_after(settings.lease),
                )
            else:
                await asyncio.sleep(min(settings.poll_interval, deadline - now))
            try:
                view = await self._scripts.pending()
            except FleetUnavailable:
                self._restart_hints()
                view = None

    async def _pause(self, wait: Wait, waiter: AckWaiter | None) -> None:
        """Until an ack hint covers the clear, or ``wait.seconds`` pass."""
        if waiter is None or not wait.pending:
            await asyncio.sleep(wait.seconds)
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait.seconds):
                while not hints_cover(wait, waiter.hinted):
                    waiter.arrived.clear()
                    await waiter.arrived.wait()
        # Valkey is asked next. If it still shows members pending, only a new hint counts.
        waiter.hinted = 0

    def _restart_hints(self) -> None:
        if self._hints is not None:
            self._hints.restart()


def _fenced(info: str) -> bool:
    try:
        return unpack_member_info(info).fenced
    except WireError:
        return False
