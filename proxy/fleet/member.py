"""The edge process's side of the fleet: sync, renew, apply, ack (docs/decisions/0014).

One task syncs: at start and every ``renew`` seconds. A second task listens for the hints
on ``{cdn}:clears``, and subscribes again whenever its connection is lost or a sync has
failed (a black-holed connection would otherwise wait forever in silence). Each hint names
the clear before it; when the hints continue the chain of clears the member has applied,
the first task applies them at once and acks, without a sync (0014 "Applying hints");
otherwise (a hint lost, a new epoch) it syncs at once. Syncs and applied hints never
overlap, so results are applied in the order they were read. Hints only make acks fast;
the renewal alone keeps the member correct.

The member's ``deadline`` is the fence: the store serves from its cache only while the
monotonic clock is before it (``proxy.fleet.store``). It starts at -inf (a process serves
nothing from its cache before its first sync) and is extended only after a sync's result
has been applied to the local store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

import msgspec

from proxy.core.lease import (
    NOTHING_APPLIED,
    Applied,
    ClearHint,
    SyncPlan,
    for_domains,
    lease_deadline,
    may_serve,
    plan_hints,
    plan_sync,
)
from proxy.core.purge.fleet import PurgeRecord, PurgeStep
from proxy.errors import FleetUnavailable, NotReplicated, WireError
from proxy.fleet.peers import live_peers
from proxy.fleet.scripts import CLEARS, DRY, FleetScripts
from proxy.fleet.settings import FleetSettings
from proxy.store.base import ClearResult, Store
from proxy.store.shared.node_writes import FleetBatch, NodeWrite
from proxy.wire.fleet import (
    pack_ack_figures,
    pack_dry_answer,
    unpack_dry_ask,
    unpack_dry_request,
    unpack_hint,
)
from proxy.wire.reports import EdgeReport, MemberInfo, pack_member_info

log = logging.getLogger("proxy.fleet")


@runtime_checkable
class Distrusting(Protocol):
    """A store whose entries outlive the process (proxy/store/tiered.py): where the member
    cannot know what was purged, it has them revalidated instead of dropping them."""

    def distrust_now(
        self, domains: Sequence[str], *, every: bool, made_for: str = ""
    ) -> list[ClearResult]: ...


@runtime_checkable
class NodeShared(Protocol):
    """A store in front of a tier the node's processes share (proxy/store/tiered.py): a
    batch's writes to that tier are made once per node, durably, off the event loop
    (``apply_fleet``, decision 0048), and the batch is then applied to this process's own
    copies (``memory``) without suspending."""

    @property
    def memory(self) -> Store: ...

    async def apply_fleet(self, batch: FleetBatch) -> None: ...


class FleetMember:
    """One edge process incarnation (``node/worker/random``) in the fleet."""

    def __init__(
        self,
        *,
        settings: FleetSettings,
        store: Store,
        domains: Sequence[str],
        node: str,
        worker: int = 0,
        address: str = "",
        clock: Callable[[], float] = time.monotonic,
        report: Callable[[], Awaitable[EdgeReport]] | None = None,
        advertise: str = "",
    ) -> None:
        self.settings = settings
        self.store = store
        self.domains = tuple(domains)
        self.name = f"{node}/{worker}/{secrets.token_hex(4)}"
        self.deadline = float("-inf")  # the fence: serve from cache only before it
        self.renew_failures = 0
        self.syncs = 0  # successful ones
        self.hints_applied = 0  # times published clears were applied without a sync
        self.applied: Applied = NOTHING_APPLIED
        self._node = node
        self._worker = worker
        self._address = address
        self.clock = clock  # what the deadline is measured by (FleetStore reads it too)
        # The process's own figures (traffic, store), sent with every sync so the control
        # plane can show the whole fleet (proxy/fleet/figures.py).
        self._report = report
        self._scripts: FleetScripts | None = None
        self._hint = asyncio.Event()  # set when hints arrived or a sync is needed
        self._hints: list[ClearHint] = []  # arrived, not yet applied
        self._must_sync = False  # a hint could not be read, or some may have been lost
        self._next_sync = float("-inf")  # when the next renewal is due
        self._synced = asyncio.Event()  # set after each successful sync (for waiters)
        self._tasks: list[asyncio.Task[None]] = []
        self._listener: asyncio.Task[None] | None = None
        self._stopping: set[asyncio.Task[None]] = set()  # cancelled listeners, until done
        self._answering: set[asyncio.Task[None]] = set()  # dry runs asked of this member
        self.purges_applied = 0  # purge records applied (decision 0026)
        # Peer fills (decision 0047): where other nodes reach this node's edge, and the live
        # nodes that take them (node -> advertise URL), read again at each renewal.
        self.advertise = advertise if settings.peer_fill else ""
        self.peers: dict[str, str] = {}
        # The fleet's peer key, which a peer request's scheme is believed with (None until
        # read), and the one this member offers should Valkey hold none.
        self.peer_key: str | None = None
        self._key_offered = secrets.token_urlsafe(24)

    @property
    def node(self) -> str:
        return self._node

    @property
    def fenced(self) -> bool:
        return not may_serve(self.deadline, self.clock())

    def set_domains(self, domains: Sequence[str]) -> None:
        """The domains this process serves, after a config reload (decision 0020). An added
        domain enters ``applied.generations`` at 0, so a hint that clears it is applied to the
        store before it is acknowledged (a domain missing there would be acked unapplied);
        if its fleet generation is not 0, the next sync clears it once more, harmlessly. It
        is also learned (``core.lease.for_domains``): the purges of it the member passed
        while it did not serve it were never applied here, so a sync is asked for at once,
        which clears it before anything else of it is written (decision 0052). A removed
        domain leaves, so that added again it starts again. No await: a sync in flight
        applies its result to this state, which only ever clears more."""
        self.domains = tuple(domains)
        self.applied = for_domains(self.applied, self.domains)
        if self.applied.learned:
            self._must_sync = True
            self._hint.set()

    def adopt(self, applied: Applied) -> None:
        """Start from ``applied`` (what the node's shared tier applied, store/shared/applied.py,
        which its writer may have kept for other domains): before ``start``."""
        self.applied = for_domains(applied, self.domains)

    async def start(self) -> None:
        """Connect, try a first sync (a failure leaves the member fenced, and the loop keeps
        trying), and start the sync loop and the hint listener."""
        self._scripts = FleetScripts.of(self.settings, replicated=True)
        await self.sync()
        self._tasks.append(asyncio.create_task(self._sync_loop(), name=f"fleet-sync {self.name}"))
        self._restart_listener()

    async def close(self) -> None:
        tasks = [*self._tasks, *self._stopping, *self._answering]
        tasks += [self._listener] if self._listener else []
        for task in tasks:
            task.cancel()
        if tasks:
            # Bounded: a client call stuck on a black-holed socket must not hold up shutdown.
            await asyncio.wait(tasks, timeout=2 * self.settings.timeout)
        self._tasks.clear()
        self._listener = None
        if self._scripts is not None:
            await self._scripts.aclose()

    async def wait_synced(self) -> None:
        """Return after the next successful sync (tests, start-up probes)."""
        self._synced.clear()
        await self._synced.wait()

    async def sync(self) -> bool:
        """One sync (0014 "Sync"): register and read, apply, extend the deadline, ack."""
        assert self._scripts is not None, "start() first"
        sent_at = self.clock()
        self._next_sync = sent_at + self.settings.renew
        try:
            result = await self._scripts.sync(
                member=self.name,
                lease_ms=round(self.settings.lease * 1000),
                epoch=self.applied.epoch,
                applied=self.applied.seq,
                info=await self._info(),
                domains=self.domains,
            )
        except NotReplicated:
            # Valkey answered, but a failover could lose this renewal: the deadline stays
            # (0014 "Failover"). The connection is sound, so the listener is kept.
            self.renew_failures += 1
            return False
        except FleetUnavailable:
            self.renew_failures += 1
            self._restart_listener()
            return False
        plan = plan_sync(self.applied, result)
        # No await from here until the deadline is set: the store is never seen with the new
        # deadline and the old generations (a sync's plan carries its records: no read).
        figures = await self._apply(plan)
        self.deadline = max(
            self.deadline, lease_deadline(sent_at, self.settings.lease, self.settings.margin)
        )
        self.syncs += 1
        self._synced.set()
        await self._ack(plan, figures)
        if self.advertise:
            await self._read_peers()
        return True

    async def _read_peers(self) -> None:
        """The live nodes that take peer fills; kept as they were when Valkey cannot say (a
        dead owner costs a failed attempt, then the origin, until its lease is gone)."""
        assert self._scripts is not None
        with contextlib.suppress(FleetUnavailable):
            self.peers = live_peers(await self._scripts.members())
            self.peer_key = await self._scripts.peer_key(self._key_offered)

    async def apply_hints(self, hints: list[ClearHint]) -> bool:
        """Apply published clears without a sync, and ack them; False when they do not
        continue what the member applied (it must sync instead). The deadline is not
        extended: only a sync renews the lease."""
        plan = plan_hints(self.applied, hints)
        if plan is None:
            return False
        # Only the clears whose hints ask for figures (a hard purge of all) are counted: a
        # plain clear's answer shows none (decision 0026, "The cost of a clear").
        figures = await self._apply(plan, frozenset(h.number for h in hints if h.figures))
        self.hints_applied += 1
        await self._ack(plan, figures)
        return True

    async def _apply(
        self, plan: SyncPlan, wanted: frozenset[int] | None = None
    ) -> list[tuple[int, int, int, bool]]:
        """Clear, then purge, then adopt ``plan.applied``; returns each purge's figures
        (number, entries, bytes, exact) for the ack, and those of the clears numbered in
        ``wanted`` (None: of every clear new to the member, as after a sync, which cannot
        tell a plain clear from a purge of all). A purge whose record cannot be read clears
        its domain instead: over-purging is safe (decision 0026)."""
        # A plain clear (the common case) reads no records and counts nothing: its hint
        # asks for no figures, and each await here costs every worker on every clear.
        records = await self._records(plan.purges) if plan.purges else {}
        clear: Sequence[str] = self.domains if plan.clear_all else plan.clear
        if plan.purges:  # their domains, once each, when a record is missing
            missing = [s.domain for s in plan.purges if records.get(s.number) is None]
            clear = tuple(dict.fromkeys([*clear, *missing]))
        figures: list[tuple[int, int, int, bool]] = []
        local = self.store
        if isinstance(local, NodeShared):
            # The node's shared tier first, durably, in its writer thread and once per node
            # (decision 0048); a lookup meanwhile may still find this process's own copies,
            # which is allowed: nothing of the batch is acked before the end.
            batch = node_batch(plan, clear, records)
            if batch.writes or batch.every:  # a renewal with nothing new writes nothing
                await local.apply_fleet(batch)
            local = local.memory
        # No await from here to the end: the batch is applied in one step, so no lookup sees
        # half of it. The store's clear_now and purge_now never suspend (the Store protocol
        # declares them plain methods; proxy/store/base.py).
        distrusted = self._distrust(plan, clear) if plan.clear_all or plan.unknown else {}
        for domain in clear:
            number = plan.applied.generations.get(domain, 0)
            cleared = distrusted[domain] if domain in distrusted else local.clear_now(domain)
            if (  # a clear new to it, whose figures are asked for
                not plan.clear_all
                and number > self.applied.seq
                and (wanted is None or number in wanted)
            ):
                figures.append((number, cleared.entries_dropped, cleared.bytes_dropped, True))
        for step in plan.purges:
            record = records.get(step.number)
            if record is None:
                continue  # its domain was cleared instead
            result = local.purge_now(record.domain, record.purge)
            figures.append((step.number, result.entries, result.bytes, result.exact))
            self.purges_applied += 1
        # A domain a reload added while the batch was written is not in the plan's
        # generations: it stays learned, for the next sync. A renewal with nothing new keeps
        # the very state (no await came between its plan and here): nothing to redo, which
        # with 10,000 domains saves 2.6 ms of the event loop at every renewal.
        if plan.applied is not self.applied:
            self.applied = for_domains(plan.applied, self.domains)
        return figures

    def _distrust(self, plan: SyncPlan, clear: Sequence[str]) -> dict[str, ClearResult]:
        """Where the member cannot know what was purged (a new epoch; records dropped from
        the log), a store that keeps entries across restarts (the shared tier) distrusts them
        instead of dropping them: they are served again once revalidated (decision 0040).
        The domains so handled, with what their memory tier dropped; the caller clears the
        others."""
        store = self.store
        if isinstance(store, NodeShared):  # the tier distrusted already (node_batch): copies
            kept = clear if plan.clear_all else [d for d in plan.unknown if d in clear]
            return {domain: store.memory.clear_now(domain) for domain in kept}
        if not isinstance(store, Distrusting):
            return {}
        if plan.clear_all:
            made_for = f"{plan.applied.epoch} {plan.applied.seq}"
            results = store.distrust_now(clear, every=True, made_for=made_for)
            return dict(zip(clear, results, strict=True))
        unknown = [domain for domain in plan.unknown if domain in clear]
        return dict(zip(unknown, store.distrust_now(unknown, every=False), strict=True))

    async def _records(self, steps: Sequence[PurgeStep]) -> dict[int, PurgeRecord]:
        """The records of ``steps``: those a sync read, and the others read now, in one call
        (those of hints). A record missing or not the one its hint named is left out."""
        found = {s.number: s.record for s in steps if s.record is not None}
        wanted = [s for s in steps if s.record is None]
        if wanted and self._scripts is not None:
            numbers = [s.number for s in wanted]
            try:
                read = await self._scripts.records(min(numbers), max(numbers))
            except FleetUnavailable:
                read = ()
            by_number = {r.number: r for r in read if r is not None}
            for step in wanted:
                record = by_number.get(step.number)
                if record is not None and step.matches(record):
                    found[step.number] = record
        return found

    async def _ack(self, plan: SyncPlan, figures: Sequence[tuple[int, int, int, bool]]) -> None:
        if not plan.ack:
            return
        assert self._scripts is not None
        try:
            await self._scripts.ack(
                member=self.name,
                epoch=plan.applied.epoch or "",
                number=plan.applied.seq,
                figures=pack_ack_figures(figures) if figures else (),
            )
        except FleetUnavailable:
            self.renew_failures += 1  # the next sync records the ack instead

    async def _info(self) -> str:
        report = await self._report() if self._report is not None else EdgeReport()
        return pack_member_info(
            MemberInfo(
                **msgspec.structs.asdict(report),
                node=self._node,
                worker=self._worker,
                pid=os.getpid(),
                address=self._address,
                fenced=self.fenced,
                applied=self.applied.seq,
                renew_failures=self.renew_failures,
                purges=1,  # it applies purge records (decision 0026)
                peer_fill=bool(self.advertise),
                advertise=self.advertise,
            )
        )

    async def _sync_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, self._next_sync - self.clock())):
                    await self._hint.wait()
            self._hint.clear()
            hints, self._hints = self._hints, []
            must_sync, self._must_sync = self._must_sync, False
            if (
                hints
                and not must_sync
                and self.clock() < self._next_sync
                and await self.apply_hints(hints)
            ):
                continue
            await self.sync()

    def _restart_listener(self) -> None:
        if not self.settings.hints:
            return
        if self._listener is not None:
            self._listener.cancel()
            self._stopping.add(self._listener)
            self._listener.add_done_callback(self._stopping.discard)
        self._listener = asyncio.create_task(self._listen(), name=f"fleet-hints {self.name}")

    async def _listen(self) -> None:
        """Subscribe to the clear hints, again and again: each (re)subscription is followed
        by a sync, since hints published while unsubscribed are lost."""
        assert self._scripts is not None
        while True:
            hints = self._scripts.hints(CLEARS, DRY)
            try:
                await hints.subscribe()
                self._must_sync = True  # hints published while unsubscribed are lost
                self._hint.set()
                while True:
                    message = await hints.next_from(self.settings.renew)
                    if message is None:
                        continue
                    channel, text = message
                    if channel == DRY:
                        self._dry_asked(text)
                        continue
                    try:
                        self._hints.append(unpack_hint(text))
                    except WireError as exc:
                        log.info("%s syncs: %s", self.name, exc)
                        self._must_sync = True
                    self._hint.set()
            except FleetUnavailable:
                pass
            finally:
                await hints.aclose()
            await asyncio.sleep(self.settings.renew)  # back off before subscribing again

    def _dry_asked(self, text: str) -> None:
        """A control plane asks a member (``id member``) for a dry run: if this one, it
        answers from its store in a task of its own (a dry run walks the domain's keys)."""
        try:
            ident, member = unpack_dry_ask(text)
        except WireError as exc:
            log.warning("%s: dry run not answered: %s", self.name, exc)
            return
        if member != self.name:
            return
        task = asyncio.create_task(self._answer_dry(ident), name=f"fleet-dry {self.name}")
        self._answering.add(task)
        task.add_done_callback(self._answering.discard)

    async def _answer_dry(self, ident: str) -> None:
        assert self._scripts is not None
        with contextlib.suppress(FleetUnavailable):
            text = await self._scripts.take_dry(ident)
            try:
                asked = None if text is None else unpack_dry_request(text)
            except WireError as exc:
                log.warning("%s: dry run not answered: %s", self.name, exc)
                return
            if asked is not None:
                result = await self.store.purge(*asked)
                await self._scripts.answer_dry(ident, pack_dry_answer(result, self.name))


def node_batch(
    plan: SyncPlan, clear: Sequence[str], records: Mapping[int, PurgeRecord]
) -> FleetBatch:
    """What a batch writes to the node's shared tier (node_writes.py), as ``_apply`` applies
    it: a new epoch distrusts every domain (one write per node, named by ``epoch seq``); a
    domain whose records were dropped is distrusted; the other cleared domains are cleared
    (under their clear's number, or a purge's whose record could not be read); then the
    purges, in order."""
    applied = plan.applied
    if plan.clear_all:
        return FleetBatch(applied.epoch, applied.seq, (), every=f"{applied.epoch} {applied.seq}")
    unknown = set(plan.unknown)
    unread: dict[str, int] = {}
    for step in plan.purges:
        if records.get(step.number) is None:
            unread[step.domain] = max(unread.get(step.domain, 0), step.number)
    writes = []
    learned = set(plan.learned)
    for domain in clear:
        if domain in learned:  # cleared as of the batch's number (decision 0052)
            writes.append(NodeWrite(domain, applied.seq))
            continue
        if domain in unknown:
            writes.append(NodeWrite(domain, applied.seq, distrust=True))
            continue
        number = max(applied.generations.get(domain, 0), unread.get(domain, 0))
        writes.append(NodeWrite(domain, number or applied.seq))
    for step in plan.purges:
        record = records.get(step.number)
        if record is not None:
            writes.append(NodeWrite(record.domain, step.number, record.purge))
    return FleetBatch(applied.epoch, applied.seq, tuple(writes))
