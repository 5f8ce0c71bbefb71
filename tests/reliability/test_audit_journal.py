"""No confirmed clear loses its audit record to a crash (issue 13, failure 6): a real node
answers clears 200, is killed with SIGKILL right after the last one, and is started again;
every clear it confirmed is in the audit log."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import aiohttp
import pytest

from tests.nodes import WORKER_COUNTS
from tests.reliability.api_support import clear, served, start_node

CLEARS = 60


def cleared_records(state_path: Path) -> int:
    with sqlite3.connect(state_path) as raw:
        (count,) = raw.execute("SELECT count(*) FROM audit WHERE outcome = 'cleared'").fetchone()
    raw.close()
    return int(count)


async def confirmed_clears(api: str, token: str, count: int) -> None:
    """``count`` clears, each answered 200: one after another, then a concurrent burst, so
    that the records of the last ones are still waiting for their SQLite batch."""
    async with aiohttp.ClientSession() as session:
        for _ in range(count // 2):
            status, _, body = await clear(session, api, token)
            assert (status, body) == (200, b"Cache cleared")
        rest = count - count // 2
        answers = await asyncio.gather(*(clear(session, api, token) for _ in range(rest)))
        assert [status for status, _, _ in answers] == [200] * rest


@pytest.mark.slow
@pytest.mark.parametrize(
    "workers",
    WORKER_COUNTS,
)
async def test_every_confirmed_clear_is_in_the_audit_log_after_kill_9(
    tmp_path: Path, workers: int
) -> None:
    state_path = tmp_path / "state.db"
    async with served(tmp_path, workers=workers) as first:
        node, total = first.node, 0
        try:
            for count in (CLEARS, 1):  # two crashes: the second right after a single clear
                await confirmed_clears(node.api, first.token, count)
                total += count
                await node.kill()  # SIGKILL, to the whole process group, at once
                node = await start_node(first.config, first.log)  # replays, then listens
                assert cleared_records(state_path) == total
        finally:
            await node.kill()
    assert "Traceback" not in first.log_text()
