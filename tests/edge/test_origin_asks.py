"""Requests the origin is asked for at once, per connection and per client address (issue 32
§2, decision 0057): an HTTP/2 client that sends many requests at once, before any answer is
charged to its answers' budget, no longer has the origin asked for each.

- the slots' bookkeeping: taken within the caps, waiters served oldest first as slots come
  back, one held back by its connection not holding back another's, a cancelled wait
  leaving nothing behind;
- against a real ``cdn-proxy serve``: a zero-window HTTP/2 connection asking 100 large
  ``no-store`` objects has the origin asked at most its answers' budget's worth plus its
  slots; a slow origin is asked at most a connection's slots (and a client's over its
  connections) at once, while another client's miss is not held back; a client that reads
  everything gets every answer, and /metrics shows the caps and the waits.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiohttp import web

from proxy.edge.origin_asks import OriginAsks
from tests.conftest import Origin
from tests.edge.h2_support import RawH2
from tests.edge.test_answer_budget import CHARGE, samples, statuses, zero_window
from tests.edge.test_answers_held import asked, serve_large
from tests.nodes import Node, write_config
from tests.polling import until


async def test_slots_are_taken_within_the_caps_and_given_to_waiters_in_order() -> None:
    asks = OriginAsks(per_connection=2, per_client=3)
    one, two = object(), object()
    first = await asks.take(one, "10.0.0.1")
    second = await asks.take(one, "10.0.0.1")
    third = asyncio.ensure_future(asks.take(one, "10.0.0.1"))  # past the connection's cap
    fourth = asyncio.ensure_future(asks.take(one, "10.0.0.1"))
    await asyncio.sleep(0)  # both start waiting
    assert not third.done() and not fourth.done()
    other = await asks.take(two, "10.0.0.1")  # another connection: the client has room
    fifth = asyncio.ensure_future(asks.take(two, "10.0.0.1"))  # past the client's cap
    await asyncio.sleep(0)
    elsewhere = await asks.take(two, "10.0.0.2")  # another client: not held back
    assert asks.figures() == [4, 2, 3, 3]  # in flight, caps, three waited
    first.give_back()
    first.give_back()  # once only
    await asyncio.sleep(0)
    assert third.done() and not fourth.done() and not fifth.done()
    other.give_back()  # the client has room: the oldest waiter that fits is two's
    await asyncio.sleep(0)
    assert fifth.done() and not fourth.done()
    for slot in (second, third.result(), fifth.result(), elsewhere):
        slot.give_back()
    await asyncio.sleep(0)
    assert fourth.done()
    fourth.result().give_back()
    assert asks.figures() == [0, 2, 3, 3]
    assert not asks._by_connection and not asks._by_client and not asks._waiting


async def test_a_cancelled_wait_leaves_nothing_behind() -> None:
    asks = OriginAsks(per_connection=1, per_client=0)
    one = object()
    held = await asks.take(one, None)
    waiting = asyncio.ensure_future(asks.take(one, None))
    await asyncio.sleep(0)
    waiting.cancel()  # the stream was reset
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert not asks._waiting
    # Granted and cancelled at once: the slot comes back.
    granted = asyncio.ensure_future(asks.take(one, None))
    await asyncio.sleep(0)
    held.give_back()  # grants it
    granted.cancel()
    with pytest.raises(asyncio.CancelledError):
        await granted
    assert asks.in_flight == 0 and not asks._by_connection


def slow_origin(origin: Origin) -> tuple[asyncio.Event, list[int]]:
    """/slow?... waits for the returned event; the list holds [asked now, most at once]."""
    go = asyncio.Event()
    counts = [0, 0]

    async def slow(request: web.Request) -> web.StreamResponse:
        counts[0] += 1
        counts[1] = max(counts[1], counts[0])
        try:
            await go.wait()
        finally:
            counts[0] -= 1
        return web.Response(body=b"slow", headers={"Cache-Control": "no-store"})

    async def route(request: web.Request) -> web.StreamResponse:
        if request.path == "/slow":
            return await slow(request)
        return web.Response(body=b"fast", headers={"Cache-Control": "no-store"})

    origin.default = route
    return go, counts


async def ended(client: RawH2, streams: list[int], within: float = 30.0) -> None:
    async with asyncio.timeout(within):
        while not all(client.answers[s].ended for s in streams):
            await client.read_events(within)


async def test_a_zero_window_connection_costs_the_origin_its_budget_and_slots_only(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    """Before: all 100 streams arrived before any answer was charged, and the origin was
    asked 100 times to refuse 97 of them."""
    serve_large(origin)
    admitted, slots, count = 3, 4, 100
    edge = (
        "h2c = true\n"
        f'answers_held_per_connection_bytes = "{admitted * CHARGE + CHARGE // 2}"\n'
        f"origin_requests_per_connection = {slots}\n"
    )
    node = await Node.start(write_config(tmp_path, origin.url, edge=edge))
    nodes.append(node)
    client = await zero_window(node.edge)
    try:
        streams = [client.request(f"/big?n={n}") for n in range(count)]
        seen = await statuses(client, streams)
        figures = await samples(node.api)
    finally:
        await client.close()
    assert seen.count(200) == admitted and seen.count(503) == count - admitted, seen
    assert asked(origin) <= admitted + slots, asked(origin)
    assert figures["cdn_proxy_origin_requests_connection_max"] == slots
    assert figures["cdn_proxy_origin_requests_waited_total"] >= count - admitted - slots


async def test_a_slow_origin_is_asked_a_connections_slots_at_once_and_others_go_on(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    go, counts = slow_origin(origin)
    slots = 4
    edge = f"h2c = true\norigin_requests_per_connection = {slots}\n"
    node = await Node.start(write_config(tmp_path, origin.url, edge=edge))
    nodes.append(node)
    greedy, polite = await RawH2.open(node.edge), await RawH2.open(node.edge)
    try:
        streams = [greedy.request(f"/slow?n={n}") for n in range(20)]
        await until(lambda: counts[0] == slots, within=10, every=0.05)

        async def waiting() -> bool:
            found = await samples(node.api)
            return found["cdn_proxy_origin_requests_waited_total"] == 20 - slots

        await until(waiting, within=10, every=0.1)
        # Another connection is not held back by the greedy one's slots.
        fast = polite.request("/fast?n=1")
        answer = await polite.answer(fast, wait=10)
        assert (answer.status, answer.body) == (200, b"fast")
        assert counts[0] == slots
        go.set()
        await ended(greedy, streams)
        figures = await samples(node.api)
    finally:
        await greedy.close()
        await polite.close()
    # Every stream answered in full, the origin asked for each, never more than 4 at once.
    assert [greedy.answers[s].status for s in streams] == [200] * 20
    assert all(greedy.answers[s].body == b"slow" for s in streams)
    assert origin.count("/slow?n=0") == 1 and counts[1] == slots
    assert figures["cdn_proxy_origin_requests_in_flight"] == 0


async def test_a_client_address_is_asked_for_its_slots_over_its_connections(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    go, counts = slow_origin(origin)
    edge = "h2c = true\norigin_requests_per_connection = 4\norigin_requests_per_client = 6\n"
    node = await Node.start(write_config(tmp_path, origin.url, edge=edge))
    nodes.append(node)
    clients = [await RawH2.open(node.edge) for _ in range(3)]
    try:
        streams = [
            [c.request(f"/slow?c={i}&n={n}") for n in range(4)] for i, c in enumerate(clients)
        ]
        await until(lambda: counts[0] == 6, within=10, every=0.05)

        async def waiting() -> bool:
            return (await samples(node.api))["cdn_proxy_origin_requests_waited_total"] == 6

        await until(waiting, within=10, every=0.1)
        assert counts[0] == 6
        go.set()
        for client, mine in zip(clients, streams, strict=True):
            await ended(client, mine)
    finally:
        for client in clients:
            await client.close()
    assert counts[1] == 6
    assert all(c.answers[s].status == 200 for c, m in zip(clients, streams, strict=True) for s in m)
