"""What a node's control process reads for a trace (decision 0038, "trace").

It serves no traffic and holds no memory tier, so:

- with a shared tier (``cache.disk_path``), it reads the tier itself (``shared_held``): the
  one copy of every object on the node, judged against its purges as a worker's lookup judges
  it, in this process (a read transaction on the shared map), changing nothing;
- without one, it asks its edge workers (``asker``): each answers from its own memory tier,
  over the pipe it has from its node (proxy/process/supervisor.py ``Workers.inspect``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from proxy.api.trace_workers import AskWorkers
from proxy.core.cache.trace import Held
from proxy.process.supervisor import Workers
from proxy.store.shared import SharedTier

INSPECT_WAIT = 2.0  # seconds a worker has to answer a trace's question


def shared_held(tier: SharedTier, domain: str, target: str) -> Held:
    """What the node's shared tier holds for ``target`` (a cache target), as a worker's
    lookup would find it after its memory tier: no body read, nothing copied or counted."""
    found = tier.inspect(domain, target)
    state = tier.purges.current(domain)
    return Held(
        variants=tuple(entry.response for entry in found.variants),
        generation=state.cleared,
        purge_number=found.token,
    )


def asker(workers: Sequence[Workers]) -> AskWorkers:
    """The question to every running worker of ``workers`` (filled once they start)."""

    async def ask(domain: str, target: str) -> Mapping[int, Held | None]:
        answers: dict[int, Held | None] = {}
        for each in workers:
            answers.update(await each.inspect(domain, target, wait=INSPECT_WAIT))
        return answers

    return ask
