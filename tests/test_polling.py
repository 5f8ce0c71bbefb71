"""tests/polling.py's ``until``: the one way tests wait for a state they are not told of."""

from __future__ import annotations

import asyncio

import pytest

from tests.polling import until


async def test_it_returns_the_conditions_value_once_another_task_made_it_true() -> None:
    box: list[str] = []

    async def later() -> None:
        for _ in range(3):
            await asyncio.sleep(0)
        box.append("ready")

    task = asyncio.create_task(later())
    assert await until(lambda: box[:1]) == ["ready"]
    await task


async def test_an_async_condition_is_awaited() -> None:
    checks: list[int] = []

    async def third_time() -> int | None:
        checks.append(1)
        return len(checks) if len(checks) == 3 else None

    assert await until(third_time) == 3


@pytest.mark.slow
async def test_it_fails_after_its_bound_and_says_so() -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(AssertionError, match=r"condition not met within 0.05 s"):
        await until(lambda: False, within=0.05, every=0.01)
    assert loop.time() - started >= 0.05
