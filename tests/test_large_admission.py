"""A first fill the shared tier's eviction would refuse (an object over half the tier: decision
0029, "Large objects") is not written to disk at all, and says so: its Cache-Status does not say
``stored``. Its key is remembered, so the next fill of it is stored, and the one after is a hit.

A real node (one process) with a 5 MiB shared tier (4 MiB usable: the rest is kept for LMDB's
free pages, decision 0041) and a 1 MiB memory share, so a 3 MiB body is streamed (decision
0039); the origin counts what it was asked.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Origin
from tests.nodes import Node, write_config
from tests.test_shared_tier import get_fresh

pytestmark = pytest.mark.slow  # a node of real processes

BODY = b"0123456789abcdef" * (3 * 65536)  # 3 MiB: over half of the 4 MiB usable


def bodies(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache" / "bodies").glob("*.body"))


async def test_a_first_fill_over_half_the_tier_is_not_written_and_its_second_is_stored(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    origin.reply("/big", BODY, headers={"Cache-Control": "max-age=600"})
    cache = (
        f'disk_path = "{tmp_path / "cache"}"\ndisk_max_bytes = "5MiB"\nmax_object_bytes = "4MiB"'
    )
    node = await Node.start(write_config(tmp_path, origin.url, cache=cache))
    nodes.append(node)

    status, cache_status, body = await get_fresh(node, "/big")
    assert (status, body.encode()) == (200, BODY)
    assert cache_status == 'cdn-proxy; fwd=uri-miss; detail="not-admitted"', cache_status
    assert bodies(tmp_path) == []  # not a byte of it written

    status, cache_status, body = await get_fresh(node, "/big")
    assert (status, body.encode()) == (200, BODY)
    assert cache_status == "cdn-proxy; fwd=uri-miss; stored", cache_status
    assert len(bodies(tmp_path)) == 1

    status, cache_status, body = await get_fresh(node, "/big")
    assert (status, body.encode()) == (200, BODY)
    assert cache_status.startswith("cdn-proxy; hit"), cache_status
    assert origin.count("/big") == 2
