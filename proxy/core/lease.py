"""The rules of the fleet purge protocol (docs/decisions/0014), with no I/O and no clock.

Theory of operation. Every edge process (a *member*) holds a lease in Valkey and serves from
its cache only while its own monotonic clock is before a local deadline, which it computes
from the time it *sent* its last successful sync: ``sent + lease - margin``. Valkey recorded
that lease as expiring at ``valkey_now + lease``, later than the send, so the local deadline
always passes first (the margin absorbs clock-rate differences). A clear answers 200 once
every live member has acknowledged it, or has had its lease run out, and, in the first lease
of a new epoch (Valkey lost its data), only after that first lease is over: a member of the
lost data set may still be serving without being registered in the new one.

The I/O shell (``proxy.fleet``) reads the clock, runs the scripts and passes the results in
here; this module only decides. Callers pass ``now`` in seconds of a monotonic clock, except
where a name says Valkey milliseconds (``*_ms``: Valkey's ``TIME``, one clock for all).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from proxy.core.purge.fleet import CLEAR, PurgeRecord, PurgeStep, steps_after_clears

MARGIN_FRACTION = 0.1  # of the lease
MIN_MARGIN = 0.1  # seconds


# -- the member's side ---------------------------------------------------------------------------


def lease_margin(lease: float) -> float:
    """How much earlier than Valkey's expiry a member stops serving: 10% of the lease, at
    least 100 ms (the clock-rate assumption of 0014)."""
    return max(lease * MARGIN_FRACTION, MIN_MARGIN)


def lease_deadline(sent_at: float, lease: float, margin: float | None = None) -> float:
    """The local deadline a successful sync buys: ``sent_at`` is the monotonic time *before*
    the sync was sent, so the deadline falls before the expiry Valkey recorded."""
    if lease <= 0:
        raise ValueError("lease must be positive")
    return sent_at + lease - (lease_margin(lease) if margin is None else margin)


def may_serve(deadline: float, now: float) -> bool:
    """Whether a member may serve from its cache at monotonic time ``now``."""
    return now < deadline


@dataclass(frozen=True, slots=True)
class Applied:
    """What a member's cache reflects: the epoch it was filled under (None before the first
    sync), the last clear number it applied, and each domain's fleet generation."""

    epoch: str | None
    seq: int
    generations: Mapping[str, int]
    # Domains the member took on after it had applied purges of this epoch (a config
    # reload; a start from a record of workers that did not serve them): the clears and
    # purges of theirs numbered up to ``seq`` were never applied by it. Its next sync clears
    # them, numbered ``seq``, before anything else of theirs is written, so that the shared
    # tier's fleet mark (store/shared/node_writes.py) is never moved past a write nobody
    # made (decision 0052).
    learned: frozenset[str] = frozenset()


def for_domains(applied: Applied, domains: Sequence[str]) -> Applied:
    """``applied`` for a member that now serves ``domains``: a domain it did not have enters
    at generation 0, learned when the member has applied something of the epoch already (a
    number above 0; before its first sync, or at the start of an epoch, there is nothing it
    could have missed). A domain it no longer serves leaves, so that added again it is
    learned again."""
    generations = {d: applied.generations.get(d, 0) for d in domains}
    learned = applied.learned.intersection(domains)
    if applied.epoch is not None and applied.seq > 0:
        learned |= {d for d in domains if d not in applied.generations}
    if learned == applied.learned and generations == applied.generations:
        return applied  # the same object: a renewal changes nothing (the tier's record is kept)
    return Applied(applied.epoch, applied.seq, generations, frozenset(learned))


NOTHING_APPLIED = Applied(epoch=None, seq=0, generations={})


@dataclass(frozen=True, slots=True)
class SyncResult:
    """What the sync script answered: the epoch, the number of the last clear, and, when the
    epoch or that number differ from what the member applied, its domains' generations (a
    domain never cleared in this epoch is at 0)."""

    epoch: str
    seq: int
    generations: Mapping[str, int] | None
    # With the generations (decision 0026): the purge records of the member's domains
    # numbered above its applied number, and each domain's floor (the highest number of a
    # record Valkey no longer keeps; 0: none dropped).
    purges: tuple[PurgeRecord, ...] = ()
    floors: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SyncPlan:
    """What the member does with a sync result, in this order: clear every domain locally
    (``clear_all``, the epoch changed) or the listed ones, then apply ``purges`` in order,
    then adopt ``applied``, then ack ``applied.seq`` when ``ack`` (there is something new to
    acknowledge)."""

    clear_all: bool
    clear: tuple[str, ...]
    applied: Applied
    ack: bool
    purges: tuple[PurgeStep, ...] = ()
    # Of ``clear``, the domains cleared only because records the member needs were dropped
    # (their generation did not move): what was purged is unknown, not everything. A store
    # that can revalidate its entries may distrust them instead (decision 0040).
    unknown: tuple[str, ...] = ()
    # Of ``clear``, the member's learned domains (``Applied.learned``): cleared as of the
    # sync's number, whatever their generation.
    learned: tuple[str, ...] = ()


def plan_sync(applied: Applied, result: SyncResult) -> SyncPlan:
    """0014 "Sync", steps 1 to 3. Generations are compared for difference, not order: the
    member never needs to know which of two numbers is newer, only that it has not applied
    this one."""
    if result.epoch != applied.epoch:
        # The data set the cache was filled under is gone: nothing in the cache can be
        # trusted, whatever the generations say.
        generations = dict(result.generations or {})
        new = Applied(epoch=result.epoch, seq=result.seq, generations=generations)
        return SyncPlan(clear_all=True, clear=(), applied=new, ack=True)
    learned = tuple(sorted(applied.learned))
    if result.generations is None or result.seq == applied.seq:
        if learned:  # nothing new of the fleet: the learned domains are cleared all the same
            known = Applied(applied.epoch, applied.seq, applied.generations)
            return SyncPlan(False, clear=learned, applied=known, ack=False, learned=learned)
        return SyncPlan(clear_all=False, clear=(), applied=applied, ack=False)
    # A domain whose generation moved, or whose records the member needs were dropped
    # (its floor is above what the member applied), is cleared; a clear now covers every
    # purge of it up to now, so its records are not applied (decision 0026).
    changed = tuple(
        sorted(
            domain
            for domain, generation in result.generations.items()
            if applied.generations.get(domain, 0) != generation
            or result.floors.get(domain, 0) > applied.seq
            or domain in applied.learned
        )
    )
    steps = tuple(
        PurgeStep(r.number, r.domain, r.purge.kind, r)
        for r in sorted(result.purges, key=lambda r: r.number)
        if applied.seq < r.number <= result.seq and r.domain in result.generations
    )
    generations = {**applied.generations, **result.generations}
    new = Applied(epoch=applied.epoch, seq=result.seq, generations=generations)
    purges = steps_after_clears(steps, changed)
    unknown = tuple(
        d
        for d in changed
        if applied.generations.get(d, 0) == result.generations[d] and d not in applied.learned
    )
    return SyncPlan(
        clear_all=False,
        clear=changed,
        applied=new,
        ack=True,
        purges=purges,
        unknown=unknown,
        learned=tuple(d for d in learned if d in changed),
    )


@dataclass(frozen=True, slots=True)
class ClearHint:
    """What a clear publishes on ``{cdn}:clears``: the epoch it was made in, the number of the
    clear before it (``seq`` just before the clear script ran), its own number, and its
    domain. Clear numbers in one epoch form a chain: each clear's ``previous`` is the number
    of the clear before it. A purge of another kind (decision 0026) takes its place in the
    same chain, and its hint names its kind as a fifth part. proxy/wire/fleet.py reads and
    writes it."""

    epoch: str
    previous: int
    number: int
    domain: str
    kind: str = CLEAR
    figures: bool = False  # a clear whose acks carry figures (a hard purge of all)


def plan_hints(applied: Applied, hints: Sequence[ClearHint]) -> SyncPlan | None:
    """0014 "Applying hints": apply published clears without a sync when they continue,
    with no gap, the chain of clears the member has applied. Then ``applied.seq`` can move to
    the last one and be acknowledged, as a sync would have done. None when they do not (a
    hint was lost, the epoch changed, or the member has not synced yet): the member syncs.
    Hints for clears it has already applied are skipped."""
    if applied.epoch is None or applied.learned:
        return None  # a learned domain is cleared by a sync first
    seq = applied.seq
    generations = dict(applied.generations)
    cleared: list[str] = []
    steps: list[PurgeStep] = []
    for hint in hints:
        if hint.epoch != applied.epoch:
            return None
        if hint.number <= seq:
            continue  # a sync read it already
        if hint.previous != seq:
            return None  # a clear in between was not seen
        seq = hint.number
        if hint.domain not in generations:
            continue  # not one of the member's domains
        if hint.kind != CLEAR:
            steps.append(PurgeStep(hint.number, hint.domain, hint.kind))
            continue
        generations[hint.domain] = hint.number
        if hint.domain not in cleared:
            cleared.append(hint.domain)
        # Clears are applied first: the purges of the domain before this clear are covered
        # by it, the ones after it are applied after it.
        if steps:
            steps = list(steps_after_clears(steps, (hint.domain,)))
    if seq == applied.seq:
        return SyncPlan(clear_all=False, clear=(), applied=applied, ack=False)
    new = Applied(epoch=applied.epoch, seq=seq, generations=generations)
    return SyncPlan(
        clear_all=False, clear=tuple(cleared), applied=new, ack=True, purges=tuple(steps)
    )


# -- the control plane's side --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LiveMember:
    member: str
    expires_ms: int  # its lease's expiry, Valkey ms
    ack: int  # the last clear number it applied in the current epoch (0: none yet)


@dataclass(frozen=True, slots=True)
class FleetView:
    """What the pending script answered: the current epoch, when it was born, Valkey's time,
    and the members whose lease is live (expired ones were removed in the same step)."""

    epoch: str
    born_ms: int
    now_ms: int
    live: tuple[LiveMember, ...]


def pending_members(number: int, epoch_at_clear: str, view: FleetView) -> tuple[LiveMember, ...]:
    """The live members that have not applied clear ``number`` (made under
    ``epoch_at_clear``). Acks are recorded only under the epoch the member has adopted, so
    once the epoch has changed, any ack (> 0) means the member dropped its whole cache after
    the clear; this holds whatever the clocks of an old and a new Valkey say."""
    threshold = ack_threshold(number, epoch_at_clear, view)
    return tuple(m for m in view.live if m.ack < threshold)


def ack_threshold(number: int, epoch_at_clear: str, view: FleetView) -> int:
    """The lowest ack that shows a member applied clear ``number`` (see pending_members)."""
    return number if view.epoch == epoch_at_clear else 1


@dataclass(frozen=True, slots=True)
class Progress:
    """How far a clear has got, as every wait decision reports it: ``acked`` of the
    ``live`` members have applied it."""

    acked: int
    live: int


@dataclass(frozen=True, slots=True)
class Done(Progress):
    """Answer 200: every live member applied the clear or can no longer serve."""


@dataclass(frozen=True, slots=True)
class Wait(Progress):
    """Ask again after at most ``seconds``, or sooner: once an ack hint says the members
    waited for (``pending``) have acked a number of at least ``threshold`` (``hints_cover``)."""

    seconds: float
    pending: tuple[str, ...] = ()
    threshold: int = 0


def hints_cover(wait: Wait, hinted: int) -> bool:
    """Whether an ack hint received (``hinted``: the highest clear number that every member
    it waited for has acked) covers the clear, so that asking Valkey again should find it
    done. Hints only decide *when* to ask: the answer is always Valkey's."""
    return bool(wait.pending) and hinted >= wait.threshold


@dataclass(frozen=True, slots=True)
class GiveUp(Progress):
    """The 200 cannot be made true before the deadline: answer 503 with Retry-After. The
    clear is recorded; the ``live - acked`` others apply it when they next sync or stop
    serving from cache when their lease runs out, by ``retry_after`` seconds from now."""

    retry_after: int


WaitDecision = Done | Wait | GiveUp


def unreachable_retry_after(lease: float) -> int:
    """The Retry-After of a clear recorded while Valkey stopped answering before the fleet
    confirmed it (no view to judge by): a member that did not apply it stops serving from
    its cache once its lease runs out, so within about one lease from now: the lease and
    half a second, rounded to whole seconds, at least 1. (``wait_decision`` gives the
    sibling rule when Valkey answers: until the last pending lease's expiry.)"""
    return max(1, round(lease + 0.5))


def wait_decision(
    *,
    number: int,
    epoch_at_clear: str,
    view: FleetView,
    grace: float,
    poll_interval: float,
    now: float,
    deadline: float,
) -> WaitDecision:
    """0014 "Wait for the fleet". ``grace`` is the lease (seconds): a new epoch must be that
    old before a clear can answer. ``now`` and ``deadline`` are the control plane's
    monotonic clock; the epoch's age is judged on Valkey's clock (``view.now_ms``)."""
    pending = pending_members(number, epoch_at_clear, view)
    live = len(view.live)
    acked = live - len(pending)
    grace_left_ms = view.born_ms + math.ceil(grace * 1000) - view.now_ms
    if not pending and grace_left_ms <= 0:
        return Done(acked=acked, live=live)
    if now >= deadline:
        last_ms = max([m.expires_ms for m in pending], default=view.now_ms)
        left_ms = max(last_ms - view.now_ms, grace_left_ms, 0)
        return GiveUp(acked=acked, live=live, retry_after=max(1, math.ceil(left_ms / 1000)))
    # Nothing pending: only the grace is left to run out, and nothing but time ends it.
    seconds = poll_interval if pending else grace_left_ms / 1000
    return Wait(
        acked=acked,
        live=live,
        seconds=max(0.0, min(seconds, deadline - now)),
        pending=tuple(m.member for m in pending),
        threshold=ack_threshold(number, epoch_at_clear, view),
    )
