"""One synced write per purge on a node of workers with its embedded Valkey (issue 31 item 4,
decision 0052): the workers write each purge to the node's shared tier once between them
(decision 0048), and the control plane, which used to write each one again before telling
the fleet, now writes only what no worker wrote. Real processes: ``cdn-proxy serve`` with two
workers, the origin counting what it is asked, the tier's purge state read from outside."""

from __future__ import annotations

from pathlib import Path

import lmdb
import pytest

from tests.conftest import Origin
from tests.nodes import Node
from tests.test_shared_tier import DISK_HIT, get_fresh, post, serve, start, tiered_config, token

pytestmark = pytest.mark.slow  # a node of real processes, killed and started again


def state_transactions(directory: Path) -> int:
    """The committed write transactions of the node's purge state, read from this process."""
    env = lmdb.open(str(directory / "state"), readonly=True, max_dbs=0, lock=False)
    try:
        return int(env.info()["last_txnid"])
    finally:
        env.close()


async def test_each_purge_is_written_once_per_node_and_holds_after_a_kill(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    targets = [f"/p{n}" for n in range(6)]
    serve(origin, *targets, "/keep")
    config = tiered_config(tmp_path, origin, workers=2)
    secret = await token(tmp_path)
    node = await start(nodes, config)
    for target in (*targets, "/keep"):
        assert (await get_fresh(node, target))[0] == 200
    before = state_transactions(tmp_path / "cache")
    for target in targets:
        body = {"domain": "example.com", "urls": [target]}
        assert await post(node, secret, "/api/v1/cdn/purge", body) == 200
    written = state_transactions(tmp_path / "cache") - before
    assert 1 <= written <= len(targets), written  # 12 before: the control plane's and a worker's
    await node.kill()  # every process at once: what was answered 200 is in the tier
    node = await start(nodes, config)
    for target in targets:
        status, cache_status, body_text = await get_fresh(node, target)
        assert (status, body_text) == (200, f"body of {target}")
        assert "hit" not in cache_status.split("; ")[1:], cache_status
        assert origin.count(target) == 2
    assert (await get_fresh(node, "/keep"))[1] == DISK_HIT
    assert origin.count("/keep") == 1
