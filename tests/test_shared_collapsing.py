"""Collapsing across workers (issue 23 §2): concurrent misses for one URL on the workers of a
node make one origin request, and a worker that waits past ``[cache] lock_timeout`` fetches by
itself and says so in Cache-Status.

Real processes: a node with ``workers = 2`` and a shared tier, requests on connections of their
own (the kernel picks the worker), and the origin counting what it was asked.

Two nodes for the module, one with the default lock timeout and one with ``LOCK_TIMEOUT``,
each shared by the tests that need it (issue 34: a node of two workers takes seconds to
start); each test asks for a URL of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from aiohttp import web

from tests.conftest import Origin
from tests.nodes import Node, write_config
from tests.test_shared_tier import get_fresh, served

# slow: nodes of real processes. One event loop for the module: its nodes outlive each test.
pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

CLIENTS = 16  # concurrent misses: the chance that all reach one worker is 2**-15
SLOW = 0.5  # seconds the origin takes to answer
LOCK_TIMEOUT = 1.0


def config(tmp_path: Path, origin: Origin, *, lock_timeout: float | None = None) -> Path:
    cache = f'disk_path = "{tmp_path / "cache"}"\ndisk_max_bytes = "64MiB"'
    if lock_timeout is not None:
        cache += f"\nlock_timeout = {lock_timeout}"
    # The origin's timeouts outlast the lock timeout: a hanging leader is still waiting on
    # its origin when the other worker's wait ends.
    extra = "connect_timeout = 1\nread_timeout = 4"
    return write_config(tmp_path, origin.url, workers=2, cache=cache, extra=extra)


@dataclass
class Running:
    node: Node
    origin: Origin


@contextlib.asynccontextmanager
async def running(directory: Path, *, lock_timeout: float | None) -> AsyncIterator[Running]:
    """A node of two workers with a shared tier, on an origin of its own."""
    async with served(Origin()) as origin:
        node = await Node.start(config(directory, origin, lock_timeout=lock_timeout))
        try:
            yield Running(node, origin)
        finally:
            await node.kill()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def default_node(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    async with running(tmp_path_factory.mktemp("default"), lock_timeout=None) as started:
        yield started


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def short_lock_node(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    """``[cache] lock_timeout = LOCK_TIMEOUT``."""
    async with running(tmp_path_factory.mktemp("short-lock"), lock_timeout=LOCK_TIMEOUT) as started:
        yield started


async def test_concurrent_misses_on_two_workers_make_one_origin_request(
    default_node: Running,
) -> None:
    node, origin = default_node.node, default_node.origin

    async def slow(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(SLOW)  # the origin's pace, not a synchronisation
        return web.Response(text="the one body", headers={"Cache-Control": "max-age=600"})

    origin.route("/slow", slow)
    answers = await asyncio.gather(*(get_fresh(node, "/slow") for _ in range(CLIENTS)))
    assert origin.count("/slow") == 1, answers
    assert {(status, body) for status, _, body in answers} == {(200, "the one body")}
    statuses = [cache_status for _, cache_status, _ in answers]
    assert statuses.count("cdn-proxy; fwd=uri-miss; stored") == 1, statuses
    # The other worker's requests waited for the fill and were answered from the shared tier.
    across = 'cdn-proxy; fwd=uri-miss; collapsed; detail="disk"'
    assert across in statuses, statuses
    assert set(statuses) <= {
        "cdn-proxy; fwd=uri-miss; stored",
        "cdn-proxy; fwd=uri-miss; collapsed",
        across,
    }


async def test_a_leader_that_never_finishes_lets_the_other_worker_fetch_after_the_lock_timeout(
    short_lock_node: Running,
) -> None:
    node, origin = short_lock_node.node, short_lock_node.origin

    asked = asyncio.Event()
    release = asyncio.Event()

    async def hangs_first(request: web.Request) -> web.StreamResponse:
        if not asked.is_set():
            asked.set()
            await release.wait()  # the leader's origin request never answers in time
        return web.Response(text="answered", headers={"Cache-Control": "max-age=600"})

    origin.route("/hang", hangs_first)
    # The lock timeout runs from the leader's fill marker (made after this), not from each
    # waiter's arrival: a waiter that came later gives up sooner after its own start.
    leader_began = time.monotonic()
    leader = asyncio.ensure_future(get_fresh(node, "/hang"))
    await asyncio.wait_for(asked.wait(), 10)  # the leader's request is at the origin

    async def timed() -> tuple[float, tuple[int, str, str]]:
        answer = await get_fresh(node, "/hang")
        return time.monotonic() - leader_began, answer

    try:
        answers = await asyncio.gather(*(timed() for _ in range(CLIENTS)))
    finally:
        release.set()
    assert (await leader)[0] == 504  # its origin outlasted read_timeout
    # The other worker's requests fetched by themselves after the lock timeout, and said so.
    fetched = [
        (took, cs) for took, (status, cs, body) in answers if (status, body) == (200, "answered")
    ]
    assert fetched, answers
    assert all(took >= LOCK_TIMEOUT for took, _ in fetched), answers
    # One fetched (and says why); that worker's other requests were collapsed onto it.
    assert {cs for _, cs in fetched} <= {
        'cdn-proxy; fwd=uri-miss; stored; detail="lock-timeout"',
        "cdn-proxy; fwd=uri-miss; collapsed",
    }, answers
    assert 'cdn-proxy; fwd=uri-miss; stored; detail="lock-timeout"' in {cs for _, cs in fetched}
    # The leader's own worker kept today's rule: its requests shared the leader's one error.
    others = {(status, cs) for _, (status, cs, body) in answers if body != "answered"}
    assert others <= {(504, "cdn-proxy; fwd=uri-miss")}, answers
    assert origin.count("/hang") == 2  # the leader's request, and the other worker's one


async def test_a_slow_leader_whose_body_keeps_coming_is_followed_past_the_lock_timeout(
    short_lock_node: Running,
) -> None:
    """Issue 23 §2: the in-process rule (follow a slow leader while its body makes progress)
    holds across workers. The body takes three lock timeouts to come, piece by piece: the
    other worker's requests wait for it (the leader's marker is renewed as it moves), and the
    origin is asked once."""
    node, origin = short_lock_node.node, short_lock_node.origin
    pieces, piece = 20, b"0123456789abcdef" * 3200  # 51,200 bytes each

    async def trickle(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Cache-Control": "max-age=600"})
        response.content_length = pieces * len(piece)
        await response.prepare(request)
        for _ in range(pieces):
            await asyncio.sleep(3 * LOCK_TIMEOUT / pieces)  # the origin's pace
            await response.write(piece)
        return response

    origin.route("/trickle", trickle)
    began = time.monotonic()
    answers = await asyncio.gather(*(get_fresh(node, "/trickle") for _ in range(CLIENTS)))
    assert time.monotonic() - began >= 3 * LOCK_TIMEOUT  # the body did outlast the timeout
    assert origin.count("/trickle") == 1, [cs for _, cs, _ in answers]
    expected = (piece * pieces).decode()
    assert all((status, body) == (200, expected) for status, _, body in answers)
    statuses = [cache_status for _, cache_status, _ in answers]
    assert not any("lock-timeout" in cs for cs in statuses), statuses
    assert 'cdn-proxy; fwd=uri-miss; collapsed; detail="disk"' in statuses, statuses


async def test_a_stale_entry_is_revalidated_once_for_the_node(default_node: Running) -> None:
    """A stale entry with a validator, asked for at once on both workers, costs the origin one
    conditional request: the revalidation is led for the node as a fill is, and the other
    worker serves the entry its 304 refreshed (after a Valkey loss every entry of the tier is
    stale in this way)."""
    node, origin = default_node.node, default_node.origin
    conditional: list[str] = []

    async def validated(request: web.Request) -> web.StreamResponse:
        if request.headers.get("If-None-Match") == '"v1"':
            conditional.append(request.headers["If-None-Match"])
            await asyncio.sleep(SLOW)  # the origin's pace, not a synchronisation
            return web.Response(status=304, headers={"Cache-Control": "max-age=600"})
        # Stored, and stale at once: each later request must be revalidated.
        return web.Response(text="v1 body", headers={"Cache-Control": "max-age=0", "ETag": '"v1"'})

    origin.route("/validated", validated)
    status, cache_status, body = await get_fresh(node, "/validated")
    assert (status, body) == (200, "v1 body") and "stored" in cache_status, cache_status
    answers = await asyncio.gather(*(get_fresh(node, "/validated") for _ in range(CLIENTS)))
    assert {(status, body) for status, _, body in answers} == {(200, "v1 body")}
    assert conditional == ['"v1"'], [cs for _, cs, _ in answers]
    assert origin.count("/validated") == 2  # the fill, and the one revalidation
    statuses = [cache_status for _, cache_status, _ in answers]
    # The other worker's requests waited for the revalidation and were served its entry.
    assert 'cdn-proxy; fwd=stale; collapsed; detail="disk"' in statuses, statuses
    assert set(statuses) <= {
        "cdn-proxy; fwd=stale; stored",
        "cdn-proxy; fwd=stale",
        "cdn-proxy; fwd=stale; collapsed",
        'cdn-proxy; fwd=stale; collapsed; detail="disk"',
    }, statuses
    # And it is fresh now, on either worker, with no further origin request.
    later = await asyncio.gather(*(get_fresh(node, "/validated") for _ in range(4)))
    assert {(status, body) for status, _, body in later} == {(200, "v1 body")}
    assert origin.count("/validated") == 2
