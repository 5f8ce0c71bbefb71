"""The clear-cache API in front of a fleet: 200 only when every live edge process has applied
the clear (or lost its lease); otherwise 503 with Retry-After, saying what was done. Every
attempt's audit record says how many edge processes applied it and who answered."""

from __future__ import annotations

import json

import pytest

from tests.api.support import ApiFactory
from tests.fleet.conftest import Fleet, Node
from tests.polling import until


@pytest.mark.slow
async def test_a_clear_the_fleet_cannot_confirm_in_time_is_a_503_and_audited(
    fleet: Fleet, make_api: ApiFactory
) -> None:
    """Protection: the API never answers 200 for a clear the purger could not confirm."""
    alive = await fleet.node()
    stopped = await fleet.node()
    await fleet.purger().clear_domain("b.test")  # waits out the grace of the test's epoch
    await stopped.member.close()  # it stops renewing: its lease runs on for up to 0.6 s
    api = await make_api(purger=fleet.purger(clear_timeout=0.25))

    answer = await api.post()
    assert answer.status == 503
    assert answer.headers["Content-Type"] == "application/problem+json"
    assert answer.headers["Retry-After"] == "1"
    detail = json.loads(answer.body)["detail"]
    assert "is recorded and was applied by 1 of 2 live edge processes" in detail
    assert "Retrying is safe" in detail
    [record] = await api.audit()
    assert (record.outcome, record.status, record.acked, record.live) == (
        "unconfirmed",
        503,
        1,
        2,
    )
    assert record.answered_by == "cp-test"

    # Once the stopped process's lease has run out in Valkey, a clear is confirmed by the
    # one process left.
    await lease_gone(fleet, stopped)
    answer = await api.post()
    assert (answer.status, answer.body) == (200, b"Cache cleared")
    newest = (await api.audit())[0]
    assert (newest.outcome, newest.acked, newest.live) == ("cleared", 1, 1)
    assert not alive.member.fenced


async def lease_gone(fleet: Fleet, node: Node) -> None:
    """Wait until Valkey no longer counts the node's lease as live (checked every 20 ms: the
    expiry is Valkey's to decide, by its clock, and sends no notice)."""
    view = fleet.purger()

    async def expired() -> bool:
        members = await view.members()
        return all(
            row.expires_ms <= members.now_ms
            for row in members.members
            if row.member == node.member.name
        )

    await until(expired, within=5.0, every=0.02)
