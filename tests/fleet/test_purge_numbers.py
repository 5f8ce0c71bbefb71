"""One series of purge numbers on a node with workers (issue 34 B3).

A node with ``[edge] workers = 2`` runs its embedded Valkey, which numbers every clear and
purge by its clock in microseconds. Each worker's store, and the shared tier, keep a count of
their own. A dry run's receipt and a trace used to give those counts: three series an
operator could not compare. Now the API, ``cdn-proxy purge`` and ``cdn-proxy trace`` give
the fleet's numbers, and print them as times.

Real processes: ``cdn-proxy serve`` with two workers (memory only, and with a shared tier),
a real origin, the purge and trace APIs, and the ``cdn-proxy`` commands.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.core.purge.receipts import CLOCK_NUMBERS, number_text
from tests.conftest import Origin
from tests.nodes import Node, cli, write_config
from tests.test_shared_tier import serve

pytestmark = pytest.mark.slow  # nodes of real processes


async def command(node: Node, secret: str, *args: str) -> str:
    """``cdn-proxy ARGS --api ... --token ...``: its output, after checking it succeeded."""
    status, out, err = await cli(*args, "--api", node.api, "--token", secret)
    assert status == 0, err
    return out


async def receipt(node: Node, secret: str, *args: str) -> dict[str, Any]:
    out = await command(node, secret, "purge", "example.com", *args, "--json")
    answer: dict[str, Any] = json.loads(out)
    return answer


async def traced(node: Node, secret: str) -> dict[str, Any]:
    out = await command(node, secret, "trace", "https://example.com/a/1", "--json")
    answer: dict[str, Any] = json.loads(out)
    return answer


@pytest.mark.parametrize("disk", [False, True], ids=["memory", "shared-tier"])
async def test_dry_runs_receipts_and_traces_number_purges_in_one_series(
    tmp_path: Path, origin: Origin, nodes: list[Node], disk: bool
) -> None:
    serve(origin, "/a/1", "/a/2")
    cache = f'disk_path = "{tmp_path / "cache"}"\ndisk_max_bytes = "64MiB"' if disk else ""
    config = write_config(tmp_path, origin.url, workers=2, cache=cache)
    status, out, err = await cli("token", "create", "t", "--all-domains", "--config", str(config))
    assert status == 0, err
    secret = out.strip()
    node = await Node.start(config)
    nodes.append(node)

    before = await receipt(node, secret, "--prefix", "/a/", "--dry-run")
    purged = await receipt(node, secret, "--prefix", "/a/")
    after = await receipt(node, secret, "--url", "/a/1", "--dry-run")
    seen = await traced(node, secret)
    later = await receipt(node, secret, "--url", "/a/2")
    cleared = await receipt(node, secret)  # all of the domain (--json: through the purge API)
    last = await traced(node, secret)

    numbers = [
        before["number"],
        purged["number"],
        after["number"],
        seen["store"]["purge_number"],
        later["number"],
        cleared["number"],
        last["store"]["purge_number"],
    ]
    assert all(n >= CLOCK_NUMBERS for n in numbers), numbers  # the fleet's, not a count
    # A dry run is numbered as of the latest purge; each purge takes a larger number.
    assert before["number"] < purged["number"] == after["number"] == numbers[3], numbers
    assert numbers[3] < later["number"] < cleared["number"] == numbers[6], numbers
    # The domain's generation is the number of its last clear, in the dry run and trace too.
    assert before["generation"] == after["generation"] == seen["store"]["generation"] == 0
    assert cleared["generation"] == cleared["number"] == last["store"]["generation"]
    assert seen["scheme"] == "https"

    # People read each number as the time it stands for, the same in every command.
    text = await command(node, secret, "purge", "example.com", "--url", "/a/1", "--dry-run")
    shown = await command(node, secret, "purge", "example.com", "--url", "/a/1")
    number = json.loads(
        await command(node, secret, "purge", "example.com", "--url", "/a/1", "--dry-run", "--json")
    )["number"]
    assert f"counted after purge {number_text(cleared['number'])}" in text, text
    assert f"(purge {number_text(number)})" in shown, shown
    lines = (await command(node, secret, "trace", "https://example.com/a/1")).splitlines()
    assert lines[0] == "GET https://example.com/a/1", lines
    clear_text = number_text(cleared["number"])
    assert f"  latest purge: {number_text(number)}; the domain's last clear: {clear_text}" in lines
