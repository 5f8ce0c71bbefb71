"""The one way tests wait for a state they cannot be told about: ``until``.

A condition is checked, and while it does not hold the test yields to the event loop (one
turn by default, ``every`` seconds when the state lives in another process or behind a
round trip, so as not to spin), until it holds or ``within`` seconds have passed. It never
stands in for an event the test could wait on: prefer an ``asyncio.Event``, a reader's
EOF or a pidfd where there is one.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import TypeVar, overload

T = TypeVar("T")


@overload
async def until(
    condition: Callable[[], Awaitable[T]], *, within: float = ..., every: float = ...
) -> T: ...


@overload
async def until(condition: Callable[[], T], *, within: float = ..., every: float = ...) -> T: ...


async def until(
    condition: Callable[[], object], *, within: float = 10.0, every: float = 0.0
) -> object:
    """Wait until ``condition()`` (or, for a coroutine function, its awaited result) is
    true, and return that value; fail after ``within`` seconds. Between checks: one turn of
    the loop, or ``every`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() >= deadline:
            raise AssertionError(f"condition not met within {within} s")
        await asyncio.sleep(every)
