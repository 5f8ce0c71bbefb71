"""The audit log of a node with workers and the shared tier records what a clear dropped
(issue 31 §5): every edge process's copies (what a dry run counts just before) and the
shared tier's entries, not 0.

Real processes: a node with two workers and its embedded Valkey, the disk tier, a real origin,
the real API, and the audit log read back from the state database.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import aiohttp
import pytest

from tests.conftest import Origin
from tests.nodes import Node, write_config
from tests.polling import until
from tests.test_shared_tier import get_fresh, serve, start, token

pytestmark = pytest.mark.slow  # a node of real processes

TARGETS = [f"/o/{index}" for index in range(12)]


def audited(database: Path) -> list[tuple[str | None, str, int]]:
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT kind, outcome, entries_dropped FROM audit ORDER BY id")
        return [(kind, outcome, entries) for kind, outcome, entries in rows]


async def test_a_clear_records_what_the_workers_and_the_tier_dropped(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    serve(origin, *TARGETS)
    config = write_config(
        tmp_path,
        origin.url,
        workers=2,
        cache=f'disk_path = "{tmp_path / "cache"}"\ndisk_max_bytes = "64MiB"',
    )
    secret = await token(tmp_path)
    node = await start(nodes, config)
    for target in TARGETS:
        for _ in range(3):  # on connections of their own: each worker holds some of them
            assert (await get_fresh(node, target))[0] == 200
    assert sum(origin.count(target) for target in TARGETS) == len(TARGETS)  # one fill each

    headers = {"Authorization": f"Bearer {secret}"}
    async with aiohttp.ClientSession(headers=headers) as client:
        dry = {"domain": "example.com", "all": True, "dry_run": True}
        async with client.post(node.api + "/api/v1/cdn/purge", json=dry) as response:
            assert response.status == 200
            counted = (await response.json())["entries"]
        assert counted >= len(TARGETS)  # the workers' memory copies
        clear = {"domain": "example.com"}
        async with client.post(node.api + "/api/v1/cdn/clear-cache", json=clear) as response:
            assert response.status == 200

    database = tmp_path / "state.db"
    rows = await until(lambda: [row for row in audited(database) if row[1] == "cleared"])
    ((kind, _, dropped),) = rows
    assert kind is None  # clear-cache's record
    assert dropped == counted + len(TARGETS)  # the workers' copies, and the tier's entries
    for target in TARGETS:
        status, cache_status, _ = await get_fresh(node, target)
        assert status == 200 and "hit" not in cache_status.split("; ")[1:]
