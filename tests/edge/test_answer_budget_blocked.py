"""A client whose answer passed its budget is refused before the origin is asked (issue 32 §2,
decision 0051): until one of its answers ends, a request that would ask the origin gets its
503 at once, so a client that never reads cannot make the origin work for answers it will
never get.

- the budget's bookkeeping: refused, blocked, unblocked when an answer ends, per
  connection and per client address, and never blocked while holding nothing;
- against a real ``cdn-proxy serve``: a zero-window HTTP/2 connection whose budget is
  spent asks the origin nothing more, and is served again once it resets a held stream.
"""

from __future__ import annotations

from pathlib import Path

from h2.errors import ErrorCodes

from proxy.edge.answer_budget import AnswerBudget
from tests.conftest import Origin
from tests.edge.test_answer_budget import CHARGE, samples, statuses, zero_window
from tests.edge.test_answers_held import asked, serve_large
from tests.nodes import Node, write_config
from tests.polling import until


def test_a_refused_connection_is_blocked_until_one_of_its_answers_ends() -> None:
    budget = AnswerBudget(per_connection=100, per_client=0)
    one, other = object(), object()
    assert budget.take(one, "10.0.0.1", 60)
    assert not budget.blocked(one, "10.0.0.1")
    assert not budget.take(one, "10.0.0.1", 60)  # refused: 120 > 100
    assert budget.blocked(one, "10.0.0.1")  # and so each later request, before the origin
    assert budget.blocked(one, "10.0.0.1")
    assert not budget.blocked(other, "10.0.0.1")  # the connection's budget, not the client's
    assert budget.refused == 3  # the refusal and the two blocked requests
    budget.give_back(one, "10.0.0.1", 60)
    assert not budget.blocked(one, "10.0.0.1")
    assert budget.take(one, "10.0.0.1", 60)


def test_a_client_address_over_its_budget_is_blocked_on_every_connection() -> None:
    budget = AnswerBudget(per_connection=0, per_client=100)
    one, two = object(), object()
    assert budget.take(one, "10.0.0.1", 80)
    assert not budget.take(two, "10.0.0.1", 40)
    assert budget.blocked(two, "10.0.0.1") and budget.blocked(object(), "10.0.0.1")
    assert not budget.blocked(two, "10.0.0.2")  # another client
    budget.give_back(one, "10.0.0.1", 80)
    assert not budget.blocked(two, "10.0.0.1")


def test_an_answer_larger_than_the_whole_budget_blocks_nothing() -> None:
    """Refused, but nothing it holds could ever unblock it: not blocked."""
    budget = AnswerBudget(per_connection=100, per_client=100)
    one = object()
    assert not budget.take(one, "10.0.0.1", 200)
    assert not budget.blocked(one, "10.0.0.1")
    assert budget.take(one, "10.0.0.1", 50)


async def test_a_connection_past_its_budget_asks_the_origin_nothing_more(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    serve_large(origin)
    admitted = 3
    edge = f'h2c = true\nanswers_held_per_connection_bytes = "{admitted * CHARGE + CHARGE // 2}"'
    node = await Node.start(write_config(tmp_path, origin.url, edge=edge))
    nodes.append(node)
    client = await zero_window(node.edge)
    try:
        first = [client.request(f"/big?n={n}") for n in range(admitted + 1)]
        got = await statuses(client, first)
        # Which one is refused depends on which of the origin's heads comes last: any.
        assert sorted(got) == [200] * admitted + [503], got
        held = [stream for stream, status in zip(first, got, strict=True) if status == 200]
        assert asked(origin) == admitted + 1  # the refused one was asked, then refused
        later = [client.request(f"/big?n=later-{n}") for n in range(10)]
        assert await statuses(client, later) == [503] * 10
        assert asked(origin) == admitted + 1  # refused before the origin was asked
        figures = await samples(node.api)
        assert figures["cdn_proxy_answers_refused_total"] == 11
        # The client lets one held answer go: its charge comes back, and it is served again.
        client.h2.reset_stream(held[0], ErrorCodes.CANCEL)
        client.flush()

        async def served() -> bool:
            stream = client.request(f"/big?n=after-{asked(origin)}")
            return await statuses(client, [stream]) == [200]

        await until(served, within=10, every=0.1)
        assert asked(origin) >= admitted + 2
    finally:
        await client.close()
