"""The trace's view of a memory-store key (MemoryStore.inspect, core/cache/trace.py): what a
lookup would find, judged against the domain's outstanding lazy purges, changing nothing."""

from __future__ import annotations

from proxy.core.cache.entry import StoredResponse
from proxy.core.cache.trace import Held
from proxy.core.purge.purges import HARD, covering
from proxy.store.entries import Stored, soft_expired, variants_of
from proxy.store.purging import DomainPurges, covers


def held(stored: Stored | None, target: str, generation: int, state: DomainPurges | None) -> Held:
    """What is stored for ``target`` as a lookup would serve it. Variants an outstanding lazy
    purge covers hard are left out and counted as ``pending``; soft-covered ones are shown
    expired."""
    variants: list[StoredResponse] = []
    pending = 0
    for variant in variants_of(stored) if stored is not None else ():
        if state is not None and variant.mark < state.top:
            covered = covering(
                state.bans, state.tags, mark=variant.mark, target=target, tags=variant.tags
            )
            if covered is HARD:
                pending += 1
                continue
            if covered is not None:
                variant = soft_expired(variant, covered.stale_at)
        variants.append(variant)
    recent = () if state is None else tuple(p for _, p in state.recent)
    return Held(
        variants=tuple(variants),
        generation=generation,
        purge_number=generation if state is None else state.number,
        purges=tuple((p.kind, p.items, p.soft) for p in recent if covers(p, target, ())),
        pending=pending,
    )
