"""Hits read from the node's shared tier, labelled by this edge (issue 23, decision 0030).

A shared-tier record keeps the hit lines of its fill (``StoredResponse.hit_lines``: what the
fast path writes), and their last line starts with the edge's own fields as the *filling*
process wrote them, Via then Cache-Status (``respond.hit_lines``), before the defaults
aiohttp would add. Those two fields say who answers and from which tier, not what was stored,
so a hit read from disk, and its copy in the memory tier, take them from the current config:
a change of ``edge.via`` (or ``cache.name``, or the rules' names) and a restart never serves
the old lines. A hit from disk says ``detail="disk"`` (before the rules' detail, as the full
path says it: ``Edge._cacheable``); its memory copy says what a memory hit says.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache

from proxy.config.model import Config, DomainConfig
from proxy.core.cache.entry import StoredResponse
from proxy.core.cache.keys import target_of
from proxy.core.http.headers import cache_status, via_value
from proxy.core.observe.responses import Responses
from proxy.core.observe.traffic import HIT
from proxy.edge import respond
from proxy.observe.telemetry import Telemetry
from proxy.store.base import Store
from proxy.store.shared.records import SharedHit
from proxy.store.tiered import TieredStore

VIA = b"Via: "
CACHE_STATUS = b"Cache-Status: "


@dataclass(frozen=True, slots=True)
class Labels:
    """The Via and Cache-Status lines a hit of one URL is written with, by tier."""

    memory: bytes  # a hit from the memory tier (the copy of a disk hit kept there)
    disk: bytes  # a hit read from the shared tier


class HitLabels:
    """This edge's labels by the rules that apply (``of``), built once per rules' detail."""

    def __init__(self, *, name: str, via: str) -> None:
        self._name = name
        self._via = via
        self._built: dict[str | None, Labels] = {}

    def of(self, config: DomainConfig, path: str) -> Labels | None:
        """The labels of a hit on ``path`` (a request-target; its query is not read) under
        the domain's current rules. None when its hit may not be written from lines: rules
        that rewrite the answer's Cache-Control (browser_ttl; ``Edge._ready`` keeps no lines
        for them either)."""
        detail = None
        if config.rules is not None:
            applied = config.rules.match(path.partition("?")[0])
            if applied is not None:
                if applied.browser_ttl is not None:
                    return None
                detail = applied.detail
        return self._of(detail)

    def plain(self) -> Labels:
        """The labels of a hit no rule applies to."""
        return self._of(None)

    def _of(self, detail: str | None) -> Labels:
        labels = self._built.get(detail)
        if labels is None:
            disk = "disk" if detail is None else f"disk; {detail}"
            labels = self._built[detail] = Labels(
                memory=lines(self._via, cache_status(self._name, hit=True, detail=detail)),
                disk=lines(self._via, cache_status(self._name, hit=True, detail=disk)),
            )
        return labels


class FastCounts(dict[str, list[float]]):
    """Each domain's response counts, for the fast path's hits (``respond.Hit`` counts one
    once it is written): ``counts[domain]``, made on first use."""

    def __init__(self, responses: Responses) -> None:
        super().__init__()
        self._responses = responses

    def __missing__(self, domain: str) -> list[float]:
        counts = self[domain] = self._responses.of(domain).counts
        return counts


class DiskHits:
    """The fast path's hits read from the shared tier (``hit``), and the copies of shared
    hits the memory tier keeps (``TieredStore.relabel``), labelled for this edge."""

    def __init__(
        self,
        *,
        store: TieredStore,
        name: str,
        via: str,
        domains: Callable[[], Mapping[str, DomainConfig]],
        telemetry: Telemetry,
        counts: FastCounts,
        clock: Callable[[], float],
    ) -> None:
        self._store = store
        self._labels = HitLabels(name=name, via=via)
        self._plain = self._labels.plain()  # a domain without rules: every hit's
        self._domains = domains  # the edge's, as its last reload left them
        self._request_at = telemetry.request_at
        self._counts = counts
        self._clock = clock
        self._memory_holds = store.memory.holds  # bound once: on every hit from disk
        self._tier_peek = store.tier.peek
        # The last hit's record, its labels and its head (``lane_hit``): kept by identity.
        self._last: tuple[SharedHit | None, Labels | None, tuple[bytes, ...] | None]
        self._last = (None, None, None)
        store.relabel = self._memory_copy

    @classmethod
    def of(
        cls,
        store: Store,
        config: Config,
        telemetry: Telemetry,
        counts: FastCounts,
        clock: Callable[[], float],
        domains: Callable[[], Mapping[str, DomainConfig]],
    ) -> tuple[DiskHits | None, DiskHits | None]:
        """An edge's, for the shared tier behind its ``store`` (None without one), and again
        for its fast path: None too when ``store`` wraps the tiers (a fleet member's, which
        fences every read: the full path answers there)."""
        local = getattr(store, "local", store)
        if not isinstance(local, TieredStore):
            return None, None
        edge, cache = config.edge_role()
        hits = cls(
            store=local,
            name=cache.name,
            via=edge.via,
            domains=domains,
            telemetry=telemetry,
            counts=counts,
            clock=clock,
        )
        return hits, (hits if store is local else None)

    async def hit(
        self, config: DomainConfig, target: str, path: str, started: float
    ) -> respond.Hit | None:
        """A fresh hit for a URL (``target``: its key target) the memory tier does not hold,
        read and judged against the purges by ``TieredStore.peek_shared``, kept in the memory
        tier when it fits (``TieredStore.keep``, as a lookup keeps it: no await between the
        read and the copy suspends, so no purge lands in between), and written from the
        record's lines as a memory hit is, with this edge's labels and ``detail="disk"``.
        None when the full path must answer, as for a memory entry (stale, no lines...)."""
        read = self._read(config, target, path)
        if read is None:
            return None
        found, parts, now = read
        store = self._store
        if len(found.body) <= store.memory_object_max:  # kept in memory if it fits there
            await store.keep(config.name, target, found)
        store.hits["disk"] += 1
        self._request_at(config.name, HIT, now)
        return respond.Hit(parts, self._counts[config.name], started)

    def lane_hit(
        self, config: DomainConfig, target: str, path: str
    ) -> tuple[tuple[bytes, ...], list[float]] | None:
        """``hit`` for the hit lane (decision 0050), which answers from ``data_received``
        and cannot await: the parts of the answer and the domain's response figures. The
        memory copy is made in the same step (``TieredStore.keep_now``), so, as in ``hit``,
        no purge lands between the read and the copy. ``_read`` without its calls (and
        ``fresh_age``'s): the hit lane's every hit from disk (decision 0056)."""
        labels = self._plain if config.rules is None else self._labels.of(config, path)
        if labels is None:
            return None
        domain = config.name
        if self._memory_holds(domain, target):
            return None
        found = self._tier_peek(domain, target)
        if found is None:
            return None
        now = self._clock()
        age = now - found.birth  # ``SharedHit.fresh_age``
        if age < 0.0:
            age = 0.0
        if age >= found.freshness_lifetime:
            return None
        last = self._last  # the same record read again (and labelled alike): its head
        head = last[2] if last[0] is found and last[1] is labels else self._last_head(found, labels)
        if head is None:
            return None
        body = found.body
        store = self._store
        if len(body) <= store.memory_object_max:
            store.keep_now(domain, target, found)
        store.hits["disk"] += 1
        self._request_at(domain, HIT, now)
        return (*head, b"Age: %d\r\n\r\n" % age, body), self._counts[domain]

    def _last_head(self, found: SharedHit, labels: Labels) -> tuple[bytes, ...] | None:
        """The lines a hit of ``found`` starts with, labelled (None when they cannot be),
        kept for its next read: the shared tier gives the same ``SharedHit`` for a record
        read again unchanged (store/shared/decoded.py)."""
        lines = found.hit_lines
        tail = relabelled(lines[-1], labels.disk) if lines else None
        head = None if tail is None else (*lines[:-1], tail)
        self._last = (found, labels, head)
        return head

    def _read(
        self, config: DomainConfig, target: str, path: str
    ) -> tuple[SharedHit, tuple[bytes, ...], float] | None:
        """The shared tier's fresh hit for ``target``, the parts of its answer, and now."""
        labels = self._plain if config.rules is None else self._labels.of(config, path)
        if labels is None:
            return None
        store = self._store
        # ``TieredStore.peek_shared``, without its call: on every hit from disk.
        found = (
            None
            if store.memory.holds(config.name, target)
            else store.tier.peek(config.name, target)
        )
        if found is None or not found.hit_lines:
            return None
        now = self._clock()
        age = found.fresh_age(now)
        lines = found.hit_lines
        tail = relabelled(lines[-1], labels.disk)
        if age is None or tail is None:
            return None
        return found, (*lines[:-1], tail, b"Age: %d\r\n\r\n" % age, found.body), now

    def _memory_copy(self, domain: str, target: str, response: StoredResponse) -> StoredResponse:
        """``TieredStore.relabel``: a shared hit as this edge's memory tier keeps it."""
        config = self._domains().get(domain)
        labels = None if config is None else self._labels.of(config, target_of(target))
        return memory_copy(response, labels)


@lru_cache(maxsize=256)
def lines(via: str, status: str) -> bytes:
    """The Via and Cache-Status lines as ``respond.hit_lines`` starts its last line with."""
    return b"%s%s\r\n%s%s\r\n" % (VIA, via_value((), via).encode(), CACHE_STATUS, status.encode())


@lru_cache(maxsize=4096)
def relabelled(tail: bytes, labels: bytes) -> bytes | None:
    """A record's last hit line with its Via and Cache-Status lines replaced by ``labels``
    (the rest kept: the defaults of its fill's message); None when it does not start with
    them, and the full path answers. Cached: most records share a few tails."""
    if not tail.startswith(VIA):
        return None
    second = tail.find(b"\r\n") + 2
    end = tail.find(b"\r\n", second)
    if second == 1 or end < 0 or not tail.startswith(CACHE_STATUS, second):
        return None
    return labels + tail[end + 2 :]


def memory_copy(response: StoredResponse, labels: Labels | None) -> StoredResponse:
    """A hit read from disk as the memory tier keeps it: its lines labelled for a memory
    hit, or none when they cannot be (it is then answered by the full path, from its fields),
    and its fields kept only as lines (``lean``)."""
    kept = response.hit_lines
    tail = None if not kept or labels is None else relabelled(kept[-1], labels.memory)
    status, reason, birth, lifetime, key_size, _, rare = response.parts()
    copy = StoredResponse.from_parts(
        status,
        reason,
        response.body,
        birth,
        lifetime,
        key_size,
        () if tail is None else (*kept[:-1], tail),
        rare,
    )
    return copy.lean()
