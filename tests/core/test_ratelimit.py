"""The throttle under the sliding-window rule (the clear-cache API), with bounded memory."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.auth.ratelimit import FailureThrottle, SlidingWindow

T0 = 1_000.0


@pytest.mark.parametrize(
    ("failures", "now", "expected"),
    [
        ([], T0, None),
        ([T0], T0, None),  # below the limit
        ([T0, T0 + 1], T0 + 2, None),
        ([T0, T0 + 1, T0 + 2], T0 + 2, 58),  # blocked until the oldest leaves the window
        ([T0, T0 + 1, T0 + 2], T0 + 30, 30),
        ([T0, T0 + 1, T0 + 2], T0 + 59.5, 1),  # rounded up, never 0
        ([T0, T0 + 1, T0 + 2], T0 + 60, None),  # the oldest is exactly a window old
        # Blocked until fewer than `allowed` failures remain: the newest three count.
        ([T0, T0 + 40, T0 + 41, T0 + 50], T0 + 59, 41),
        ([T0, T0 + 1, T0 + 2, T0 + 50], T0 + 60, 1),
        ([T0, T0 + 10, T0 + 20], T0 + 100, None),  # all expired
        ([T0, T0 + 1, T0 + 2], T0 - 3600, 60),  # clock stepped back: never beyond one window
    ],
)
def test_retry_after(failures: list[float], now: float, expected: int | None) -> None:
    limiter = FailureThrottle(SlidingWindow(allowed=3, window=60))
    for at in failures:
        limiter.record_failure("10.0.0.1", at)
    assert limiter.retry_after("10.0.0.1", now) == expected


def test_clients_are_counted_separately() -> None:
    limiter = FailureThrottle(SlidingWindow(allowed=2, window=60))
    for _ in range(2):
        limiter.record_failure("10.0.0.1", T0)
    limiter.record_failure("10.0.0.2", T0)
    assert limiter.retry_after("10.0.0.1", T0) == 60
    assert limiter.retry_after("10.0.0.2", T0) is None
    assert limiter.retry_after("10.0.0.3", T0) is None


def test_oldest_client_is_forgotten_when_full() -> None:
    limiter = FailureThrottle(SlidingWindow(allowed=1, window=60), max_keys=3)
    for client in ["a", "b", "c"]:
        limiter.record_failure(client, T0)
    limiter.record_failure("a", T0 + 1)  # "a" is now the most recent
    limiter.record_failure("d", T0 + 2)  # evicts "b", the least recent

    assert len(limiter) == 3
    assert limiter.retry_after("b", T0 + 2) is None
    for client in ["a", "c", "d"]:
        assert limiter.retry_after(client, T0 + 2) is not None


def test_expired_clients_are_dropped_when_looked_up() -> None:
    limiter = FailureThrottle(SlidingWindow(allowed=2, window=60))
    limiter.record_failure("a", T0)
    assert limiter.retry_after("a", T0 + 61) is None
    assert len(limiter) == 0


@pytest.mark.parametrize(
    ("allowed", "window", "max_clients"), [(0, 60, 10), (1, 0, 10), (1, -1, 10), (1, 60, 0)]
)
def test_bad_settings_are_refused(allowed: int, window: float, max_clients: int) -> None:
    with pytest.raises(ValueError):
        FailureThrottle(SlidingWindow(allowed, window), max_keys=max_clients)


@given(
    st.lists(
        st.tuples(st.sampled_from("abcdefgh"), st.floats(0, 1000)),
        max_size=200,
    )
)
def test_memory_stays_bounded_and_waits_stay_within_the_window(
    events: list[tuple[str, float]],
) -> None:
    limiter = FailureThrottle(SlidingWindow(allowed=3, window=30), max_keys=4)
    for client, at in events:
        limiter.record_failure(client, at)
        assert len(limiter) <= 4
        wait = limiter.retry_after(client, at)
        assert wait is None or 1 <= wait <= 30
