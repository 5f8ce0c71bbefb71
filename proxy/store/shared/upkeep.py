"""The node's background upkeep of its shared tier: one task per kind of work (the sweep,
sweep.py; the retirement of URL purge records, retire.py), run by the process that holds the
directory, never by its workers (their ``tier.instance`` is None), and cancelled when the
block ends."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from proxy.store.shared.tier import SharedTier


@contextlib.asynccontextmanager
async def node_task(
    tier: SharedTier, work: Callable[[], Coroutine[Any, Any, None]], name: str
) -> AsyncIterator[None]:
    """``work()`` as a task of the node holding ``tier``'s directory, until the block ends
    (nothing in a worker)."""
    if tier.instance is None:
        yield
        return
    task = asyncio.create_task(work(), name=name)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
