"""Refusals remembered per key, as Varnish's hit-for-miss objects (issue 34 §3).

A key whose last answer was not stored (``private`` here) is remembered for a while. Its next
misses ask the origin at once, each for itself, instead of queueing behind a leader whose
answer cannot be shared. They may still store: a key whose answer became cacheable is stored
again by its next miss. A 5xx is not remembered, so collapsing still spares an origin in
trouble. A real edge, a real origin whose handler holds its answers until the test opens it.
"""

from __future__ import annotations

import asyncio

from proxy.edge.refusals import MAX_KEYS, REMEMBER, Refusals
from tests.conftest import EdgeUnderTest, Origin
from tests.edge.test_flow import Gate
from tests.polling import until

CLIENTS = 10


async def test_misses_of_a_refused_key_reach_the_origin_together(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    """Before: each waited on the key's leader, and went to the origin only once the
    leader's headers came back (two round trips); the gate, which opens only when every
    client is at the origin, was never opened."""
    origin.reply("/me", b"first", headers={"Cache-Control": "private"})
    response, _ = await edge.get("/me")
    assert response.headers["Cache-Status"] == 'cdn-proxy; fwd=uri-miss; detail="private"'
    gate = Gate(lambda n: f"for client {n}".encode(), {"Cache-Control": "private"})
    origin.route("/me", gate)
    requests = [asyncio.create_task(edge.get("/me")) for _ in range(CLIENTS)]
    await until(lambda: gate.arrived == CLIENTS, within=5)
    assert edge.edge.flights.get(("example.com", 0, "/me")) is None  # no waiting list
    gate.open.set()
    results = await asyncio.gather(*requests)
    assert len({body for _, body in results}) == CLIENTS  # each client got its own answer
    assert origin.count("/me") == CLIENTS + 1


async def test_a_refused_key_that_becomes_cacheable_is_stored_by_its_next_miss(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    origin.reply("/p", b"mine", headers={"Cache-Control": "private"})
    await edge.get("/p")
    assert edge.edge.refusals.recent("example.com", "/p", edge.clock()) is not None
    origin.reply("/p", b"everyone's", headers={"Cache-Control": "max-age=60"})
    response, _ = await edge.get("/p")
    assert response.headers["Cache-Status"] == "cdn-proxy; fwd=uri-miss; stored"
    assert edge.edge.refusals.recent("example.com", "/p", edge.clock()) is None
    response, body = await edge.get("/p")
    assert response.headers["Cache-Status"].startswith("cdn-proxy; hit") and body == b"everyone's"
    assert origin.count("/p") == 2


async def test_a_refusal_is_forgotten_after_a_while_and_a_5xx_is_never_remembered(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    origin.reply("/p", b"mine", headers={"Cache-Control": "no-store"})
    await edge.get("/p")
    refusal = edge.edge.refusals.recent("example.com", "/p", edge.clock())
    assert refusal is not None and (refusal.reason, refusal.status) == ("no-store", 200)
    edge.clock.advance(REMEMBER + 1)
    assert edge.edge.refusals.recent("example.com", "/p", edge.clock()) is None
    origin.reply("/down", b"busy", status=503, headers={"Cache-Control": "no-store"})
    await edge.get("/down")
    assert edge.edge.refusals.recent("example.com", "/down", edge.clock()) is None


def test_the_memory_is_bounded_the_oldest_refusal_going_first() -> None:
    refusals = Refusals(max_keys=3)
    for n in range(5):
        refusals.refused("a.test", f"/{n}", "private", 200, now=100.0)
    assert len(refusals) == 3
    assert refusals.recent("a.test", "/1", 100.0) is None
    assert refusals.recent("a.test", "/4", 100.0) is not None
    assert MAX_KEYS == 10_000
