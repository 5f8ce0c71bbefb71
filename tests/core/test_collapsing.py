"""How long a collapsed request waits for its leader (proxy/core/cache/collapsing.py)."""

from __future__ import annotations

import pytest

from proxy.core.cache.collapsing import LEADER_FIRST, give_up_at


@pytest.mark.parametrize(
    ("started", "progressed", "expected"),
    [
        # No headers yet: the leader's connect and header-read bounds, from the flight's start.
        (100.0, None, 100.0 + 5 + 30 + LEADER_FIRST),
        # Headers at 101: one read timeout from then.
        (100.0, 101.0, 101.0 + 30 + LEADER_FIRST),
        # A body still arriving an hour later: total time does not count, progress does.
        (100.0, 3700.0, 3700.0 + 30 + LEADER_FIRST),
    ],
)
def test_a_waiter_gives_up_only_on_a_leader_without_progress(
    started: float, progressed: float | None, expected: float
) -> None:
    assert (
        give_up_at(started=started, progressed=progressed, connect_timeout=5, read_timeout=30)
        == expected
    )


def test_the_leaders_own_timeout_comes_first() -> None:
    """The waiter's bound is later than the leader's (connect + read before the headers,
    read after), so when the origin stalls the waiters get the leader's error."""
    assert LEADER_FIRST > 0
    at = give_up_at(started=0.0, progressed=None, connect_timeout=1, read_timeout=2)
    assert at > 1 + 2
    assert give_up_at(started=0.0, progressed=10.0, connect_timeout=1, read_timeout=2) > 10 + 2
