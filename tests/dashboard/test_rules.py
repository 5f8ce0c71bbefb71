"""The dashboard's sans-I/O rules as plain functions with a fake ``now``: session expiry, CSRF
tokens, the sign-in backoff, and the chart's geometry."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.api.dashboard.chart import build_chart, nice_step
from proxy.core.auth.ratelimit import DoublingDelay, FailureThrottle
from proxy.core.auth.sessions import (
    SessionCheck,
    SessionPolicy,
    check_session,
    csrf_matches,
    csrf_token,
    expiry_cutoffs,
    is_session_id,
    needs_touch,
    session_digest,
)

POLICY = SessionPolicy(idle_timeout=100.0, lifetime=1000.0)


@pytest.mark.parametrize(
    ("created", "last_seen", "now", "expected"),
    [
        (0, 0, 0, SessionCheck.VALID),
        (0, 0, 99.9, SessionCheck.VALID),
        (0, 0, 100, SessionCheck.IDLE),
        (0, 950, 999.9, SessionCheck.VALID),
        (0, 950, 1000, SessionCheck.EXPIRED),  # busy, but too old
        (0, 0, 5000, SessionCheck.EXPIRED),
    ],
)
def test_a_session_ends_when_idle_or_too_old(
    created: float, last_seen: float, now: float, expected: SessionCheck
) -> None:
    assert check_session(POLICY, created, last_seen, now) == expected


def test_the_cutoffs_agree_with_the_check() -> None:
    idle_cutoff, created_cutoff = expiry_cutoffs(POLICY, 2000.0)
    assert check_session(POLICY, 1500, idle_cutoff, 2000) == SessionCheck.IDLE
    assert check_session(POLICY, created_cutoff, 1999, 2000) == SessionCheck.EXPIRED
    assert check_session(POLICY, created_cutoff + 1, idle_cutoff + 1, 2000) == SessionCheck.VALID


@pytest.mark.parametrize(
    ("last_seen", "now", "touch"), [(0, 59.9, False), (0, 60, True), (100, 50, True)]
)
def test_last_use_is_written_at_most_once_a_minute(
    last_seen: float, now: float, touch: bool
) -> None:
    assert needs_touch(last_seen, now) is touch


def test_bad_policies_are_refused() -> None:
    with pytest.raises(ValueError):
        SessionPolicy(0, 10)


def test_the_database_keeps_a_digest_and_forms_a_derived_token() -> None:
    session_id = secrets.token_urlsafe(32)
    assert is_session_id(session_id)
    assert session_digest(session_id) == hashlib.sha256(session_id.encode()).hexdigest()
    token = csrf_token(session_id)
    assert token not in (session_id, session_digest(session_id))
    assert csrf_matches(session_id, token)
    assert not csrf_matches(session_id, None)
    assert not csrf_matches(session_id, "")
    assert not csrf_matches(session_id, token[:-1])
    assert not csrf_matches(secrets.token_urlsafe(32), token)
    assert not csrf_matches(session_id, token + "é")


@given(st.text(max_size=100))
def test_csrf_never_raises_on_what_a_form_sends(given_token: str) -> None:
    assert csrf_matches("A" * 43, given_token) is (given_token == csrf_token("A" * 43))


# -- backoff -----------------------------------------------------------------------------------


def test_failures_beyond_the_allowance_double_the_wait() -> None:
    backoff = DoublingDelay(free=2, max_delay=30)
    assert [backoff.delay_after(n) for n in range(1, 10)] == [0, 0, 1, 2, 4, 8, 16, 30, 30]
    assert backoff.delay_after(10**6) == 30  # no overflow


def test_a_key_waits_after_its_failures_and_a_success_forgets_them() -> None:
    backoff = FailureThrottle(DoublingDelay(free=1, max_delay=60))
    backoff.record_failure("k", 0.0)
    assert backoff.retry_after("k", 0.0) is None
    backoff.record_failure("k", 0.0)
    assert backoff.retry_after("k", 0.0) == 1
    assert backoff.retry_after("k", 0.5) == 1  # rounded up, never 0
    assert backoff.retry_after("k", 1.0) is None
    backoff.record_failure("k", 1.0)
    assert backoff.retry_after("k", 1.0) == 2
    assert backoff.retry_after("other", 1.0) is None
    backoff.record_success("k")
    backoff.record_failure("k", 2.0)
    assert backoff.retry_after("k", 2.0) is None


def test_keys_are_forgotten_after_a_quiet_while_and_bounded_in_number() -> None:
    backoff = FailureThrottle(DoublingDelay(free=0, max_delay=10, forget_after=100), max_keys=3)
    backoff.record_failure("a", 0)
    backoff.record_failure("a", 0)
    assert backoff.retry_after("a", 50) is None  # waited out, still counted
    backoff.record_failure("a", 50)
    assert backoff.retry_after("a", 50) == 4
    backoff.record_failure("b", 200)  # "a" has been quiet for 150 s
    backoff.record_failure("a", 200)
    assert backoff.retry_after("a", 200) == 1  # counting from one again
    for key in "cdef":
        backoff.record_failure(key, 201)
    assert len(backoff) == 3


def test_a_clock_stepping_back_never_makes_a_wait_longer_than_the_cap() -> None:
    backoff = FailureThrottle(DoublingDelay(free=0, max_delay=10))
    backoff.record_failure("k", 1000)
    assert backoff.retry_after("k", 0) == 10


@pytest.mark.parametrize(
    ("kwargs", "max_keys"),
    [
        ({"free": -1, "max_delay": 1}, 10),
        ({"free": 1, "max_delay": 0.5}, 10),
        ({"free": 1, "max_delay": 1, "forget_after": 0}, 10),
        ({"free": 1, "max_delay": 1}, 0),
    ],
)
def test_bad_backoffs_are_refused(kwargs: dict[str, float], max_keys: int) -> None:
    with pytest.raises(ValueError):
        FailureThrottle(DoublingDelay(**kwargs), max_keys=max_keys)  # type: ignore[arg-type]


# -- chart -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Minute:
    hits: int = 0
    misses: int = 0
    clears: int = 0


@pytest.mark.parametrize(
    ("value", "step"), [(0, 1), (0.25, 1), (1, 1), (1.5, 2), (3, 5), (7, 10), (11, 20), (260, 500)]
)
def test_gridlines_are_round_numbers(value: float, step: int) -> None:
    assert nice_step(value) == step


def test_the_chart_puts_now_at_the_right_and_scales_to_the_busiest_minute() -> None:
    minutes = [Minute()] * 58 + [Minute(hits=10, misses=3, clears=2), Minute(hits=1)]
    chart = build_chart(minutes)
    assert [tick.label for tick in chart.x_ticks] == [
        "-60 min",
        "-45 min",
        "-30 min",
        "-15 min",
        "now",
    ]
    assert chart.x_ticks[0].position == chart.left
    assert chart.x_ticks[-1].position == chart.right
    assert [tick.label for tick in chart.y_ticks] == ["0", "5", "10", "15", "20"]
    assert chart.y_ticks[0].position == chart.bottom
    assert chart.y_ticks[-1].position == chart.top
    hits = [tuple(map(float, point.split(","))) for point in chart.hits.split()]
    assert len(hits) == 60
    assert hits[-1] == (chart.right, chart.bottom - (chart.bottom - chart.top) * 1 / 20)
    assert hits[-2][1] == chart.bottom - (chart.bottom - chart.top) * 10 / 20
    assert [(round(mark.x, 1), mark.count) for mark in chart.clears] == [(hits[-2][0], 2)]
    assert (chart.total_hits, chart.total_misses, chart.total_clears) == (11, 3, 2)
    assert chart.hit_ratio == 11 / 14


@pytest.mark.slow
def test_an_empty_hour_still_draws() -> None:
    chart = build_chart([Minute()] * 60)
    assert chart.hit_ratio is None
    assert [tick.label for tick in chart.y_ticks] == ["0", "1", "2", "3", "4"]
    assert chart.clears == ()
