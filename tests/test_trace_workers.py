"""The trace with ``[edge] workers = 2`` (issue 25 §3, decision 0038 "trace"): the control
process holds no memory tier, so it asks each worker what it holds (memory-only node), or
reads the node's shared tier; either way the trace agrees with what the next real request
does, and changes nothing.

Real processes: a node (``cdn-proxy serve``) with two workers and its embedded Valkey, a real
origin counting what it is asked, requests on connections of their own (the kernel picks the
worker), the API and the ``cdn-proxy trace`` command.

The module starts one memory-only node and one shared-tier node, which its tests share
(issue 34: a node of two workers takes seconds to start); each test asks for targets of its
own (``/TEST/...``). The test that stops a worker runs last on its node.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from proxy.process.node_trace import INSPECT_WAIT
from tests.conftest import Origin
from tests.nodes import Node, cli, write_config
from tests.test_shared_tier import get_fresh, post, serve, served, tiered_config, token

# slow: nodes of real processes. One event loop for the module: its nodes outlive each test.
pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

MISS = "cdn-proxy; fwd=uri-miss; stored"
CONNECTIONS = 200  # fresh connections to reach both workers (the kernel spreads them)


async def trace(node: Node, secret: str, target: str) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as client,
        client.post(
            node.api + "/api/v1/cdn/trace",
            json={"url": f"http://example.com{target}"},
            headers={"Authorization": f"Bearer {secret}"},
        ) as response,
    ):
        assert response.status == 200, await response.text()
        answer: dict[str, Any] = json.loads(await response.text())
        return answer


def outcome_of(cache_status: str) -> str:
    """The trace's word for what a response's Cache-Status says happened."""
    return "hit" if cache_status.startswith("cdn-proxy; hit") else "miss"


@dataclass
class Running:
    """A node of two workers, its origin and a token for its API."""

    node: Node
    origin: Origin
    secret: str


@contextlib.asynccontextmanager
async def running(directory: Path, *, tiered: bool) -> AsyncIterator[Running]:
    async with served(Origin()) as origin:
        if tiered:
            tiered_config(directory, origin, workers=2)
        else:
            write_config(directory, origin.url, workers=2)
        secret = await token(directory)
        node = await Node.start(directory / "proxy.toml")
        try:
            yield Running(node, origin, secret)
        finally:
            await node.kill()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def memory_node(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    """Memory-only: the control process asks each worker."""
    async with running(tmp_path_factory.mktemp("memory"), tiered=False) as started:
        yield started


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tiered_node(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    """With the node's shared tier, which the control process reads."""
    async with running(tmp_path_factory.mktemp("tiered"), tiered=True) as started:
        yield started


async def test_memory_only_workers_are_asked_and_the_next_request_agrees(
    memory_node: Running,
) -> None:
    node, origin, secret, page = memory_node.node, memory_node.origin, memory_node.secret, "/asked"
    serve(origin, page)
    # Nothing stored: every worker says miss, and so does the next request.
    answer = await trace(node, secret, page)
    assert answer["outcome"] == "miss", answer
    assert [row["worker"] for row in answer["workers"]] == [0, 1], answer
    assert {row["outcome"] for row in answer["workers"]} == {"miss"}
    assert origin.count(page) == 0  # a trace asks no origin
    assert (await get_fresh(node, page))[1] == MISS
    # One worker holds it: the trace says which, and a next request gets one of the two.
    answer = await trace(node, secret, page)
    assert answer["outcome"] == "mixed", answer
    assert sorted(row["outcome"] for row in answer["workers"]) == ["hit", "miss"], answer
    assert answer["entry"]["fresh"] is True and answer["entry"]["lifetime_source"] == "origin"
    # Until both workers hold it; then the trace says hit, and every next request is a hit.
    reads = 0
    while origin.count(page) < 2 and reads < CONNECTIONS:
        await get_fresh(node, page)
        reads += 1
    assert origin.count(page) == 2
    answer = await trace(node, secret, page)
    assert answer["outcome"] == "hit", answer
    assert {row["outcome"] for row in answer["workers"]} == {"hit"}
    for _ in range(6):
        assert outcome_of((await get_fresh(node, page))[1]) == "hit"
    assert origin.count(page) == 2  # the traces stored and fetched nothing
    # A purge answered 200: both workers say miss, and so does the next request.
    purge = {"domain": "example.com", "urls": [page]}
    assert await post(node, secret, "/api/v1/cdn/purge", purge) == 200
    answer = await trace(node, secret, page)
    assert answer["outcome"] == "miss", answer
    assert (await get_fresh(node, page))[1] == MISS
    # The command line reads the same answer.
    status, out, err = await cli(
        "trace", f"http://example.com{page}", "--api", node.api, "--token", secret
    )
    assert status == 0, err
    assert "outcome: mixed (worker 0: " in out, out
    assert "  edge workers: 0: " in out and ", 1: " in out, out


async def test_a_shared_tier_node_traces_from_the_tier_and_the_next_request_agrees(
    tiered_node: Running,
) -> None:
    node, origin, secret, page = tiered_node.node, tiered_node.origin, tiered_node.secret, "/read"
    serve(origin, page)
    answer = await trace(node, secret, page)
    assert answer["outcome"] == "miss" and "workers" not in answer, answer
    assert (await get_fresh(node, page))[1] == MISS
    # Filled by one worker, in the shared tier: a hit for every worker.
    answer = await trace(node, secret, page)
    assert answer["outcome"] == "hit", answer
    assert answer["store"]["variants"] == 1, answer
    for _ in range(6):
        assert outcome_of((await get_fresh(node, page))[1]) == "hit"
    assert origin.count(page) == 1
    purge = {"domain": "example.com", "urls": [page]}
    assert await post(node, secret, "/api/v1/cdn/purge", purge) == 200
    answer = await trace(node, secret, page)
    assert answer["outcome"] == "miss", answer
    assert (await get_fresh(node, page))[1] == MISS
    assert origin.count(page) == 2


@pytest.fixture
def node_of(request: pytest.FixtureRequest) -> Running:
    """The module's shared-tier node when the test asks (``tiered``), else the memory-only."""
    found: Running = request.getfixturevalue("tiered_node" if request.param else "memory_node")
    return found


@pytest.mark.parametrize("node_of", [False, True], ids=["memory", "shared-tier"], indirect=True)
async def test_a_trace_names_why_a_refused_key_holds_nothing(node_of: Running) -> None:
    """Issue 34 §3: a trace without a fetch of an object refused as ``private`` said only "0
    variants". The worker that filled it remembers why (hit-for-miss), and the trace says."""
    node, origin, secret, page = node_of.node, node_of.origin, node_of.secret, "/me"
    origin.reply(page, b"yours", headers={"Cache-Control": "private"})
    assert (await trace(node, secret, page))["store"]["refused"] is None
    assert "private" in (await get_fresh(node, page))[1]
    answer = await trace(node, secret, page)
    refused = answer["store"]["refused"]
    assert (refused["why_not"], refused["status"]) == ("private", 200), answer
    assert 0 <= refused["age"] < 60, answer
    assert answer["store"]["variants"] == 0 and answer["outcome"] in ("miss", "mixed"), answer
    status, out, err = await cli(
        "trace", f"http://example.com{page}", "--api", node.api, "--token", secret
    )
    assert status == 0, err
    assert "  last fill not stored, " in out and "s ago: private (status 200)" in out, out


async def test_a_stuck_worker_is_named_unknown_and_the_trace_still_answers(
    memory_node: Running,
) -> None:
    """Last on the memory-only node: the worker it stops may miss its lease meanwhile."""
    node, origin, secret, page = memory_node.node, memory_node.origin, memory_node.secret, "/stuck"
    serve(origin, page)
    stuck, *_ = sorted(node.worker_pids())
    os.kill(stuck, signal.SIGSTOP)  # it reads no question and answers none
    try:
        began = time.monotonic()
        answer = await trace(node, secret, page)
        took = time.monotonic() - began
    finally:
        os.kill(stuck, signal.SIGCONT)
    assert took < INSPECT_WAIT + 3, took  # bounded by the wait for an answer
    assert answer["outcome"] == "mixed", answer
    rows = {row["outcome"]: row for row in answer["workers"]}
    assert set(rows) == {"unknown", "miss"}, answer
    assert rows["unknown"]["why"].endswith("did not answer"), answer
    # Once it runs again it answers the next question, and the earlier one is not mistaken
    # for it.
    answer = await trace(node, secret, page)
    assert answer["outcome"] == "miss" and len(answer["workers"]) == 2, answer
