"""core/http/balance.py: which origin server a request goes to, and the up/down state machine
(decision 0034). Synchronous, with a fake ``now``."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.http.balance import OriginPool, PoolRules, ServerState, counts_against, may_retry

A, B, C, X = "http://a", "http://b", "http://c", "http://x"


def make(
    origins: list[str] | None = None, backups: list[str] | None = None, **rules: Any
) -> OriginPool:
    return OriginPool.new(origins or [A, B], backups or [], PoolRules(**rules), 0.0)


def server(pool: OriginPool, url: str) -> ServerState:
    return next(s for s in pool.servers if s.url == url)


def chosen(pool: OriginPool, key: str = "/", now: float = 1.0) -> str | None:
    picked = pool.choose(key, now)
    return None if picked is None else picked.url


def test_round_robin_alternates_among_the_up_servers() -> None:
    pool = make([A, B, C])
    assert Counter(chosen(pool) for _ in range(30)) == {A: 10, B: 10, C: 10}


def test_least_connections_prefers_the_server_with_fewest_requests_in_flight() -> None:
    pool = make([A, B, C], balance="least_connections")
    server(pool, A).active, server(pool, B).active, server(pool, C).active = 3, 1, 2
    assert {chosen(pool) for _ in range(5)} == {B}
    server(pool, B).active = 3
    assert {chosen(pool) for _ in range(5)} == {C}


def test_hash_sends_a_key_to_one_server_and_moves_only_a_down_servers_keys() -> None:
    pool = make([A, B, C], balance="hash", fails=1)
    keys = [f"/k/{n}" for n in range(300)]
    first = {key: chosen(pool, key) for key in keys}
    assert first == {key: chosen(pool, key) for key in keys}  # stable
    assert set(Counter(first.values())) == {A, B, C}
    pool.failed(server(pool, B), "refused", 1.0, probe=False)
    after = {key: chosen(pool, key) for key in keys}
    moved = {key for key in keys if after[key] != first[key]}
    assert moved == {key for key in keys if first[key] == B}  # rendezvous hashing


@pytest.mark.parametrize(
    ("rules", "failures", "down"),
    [
        ({"fails": 1}, 1, True),
        ({"fails": 2}, 1, False),
        ({"fails": 2}, 2, True),
        ({"fails": 3, "probing": True}, 2, False),
        ({"fails": 3, "probing": True}, 3, True),
    ],
)
def test_a_server_goes_down_after_fails_consecutive_failures(
    rules: dict[str, Any], failures: int, down: bool
) -> None:
    pool = make(**rules)
    for n in range(failures):
        pool.failed(server(pool, A), "refused", float(n), probe=False)
    assert server(pool, A).up is not down


def test_an_answer_between_failures_resets_the_count() -> None:
    pool = make(fails=2)
    pool.failed(server(pool, A), "refused", 1.0, probe=False)
    pool.succeeded(server(pool, A), 2.0, probe=False)
    pool.failed(server(pool, A), "refused", 3.0, probe=False)
    assert server(pool, A).up


def test_with_probes_only_passes_consecutive_probes_bring_a_server_back() -> None:
    pool = make(fails=1, passes=2, probing=True)
    a = server(pool, A)
    assert pool.failed(a, "refused", 1.0, probe=False)
    assert (a.up, a.since, a.last_failure) == (False, 1.0, "refused")
    assert not pool.succeeded(a, 2.0, probe=False)  # a real answer does not count
    assert not pool.succeeded(a, 3.0, probe=True)
    pool.failed(a, "timeout", 4.0, probe=True)  # the passes start again
    assert not pool.succeeded(a, 5.0, probe=True)
    assert pool.succeeded(a, 6.0, probe=True)
    assert (a.up, a.since) == (True, 6.0)
    assert {chosen(pool, now=7.0) for _ in range(4)} == {A, B}


def test_without_probes_a_down_server_gets_one_trial_after_retry_after() -> None:
    pool = make(fails=1, retry_after=10.0)
    a = server(pool, A)
    pool.failed(a, "refused", 100.0, probe=False)
    assert {chosen(pool, now=105.0) for _ in range(4)} == {B}
    pool.failed(server(pool, B), "refused", 106.0, probe=False)
    assert chosen(pool, now=109.0) is None  # all down, no trial due
    assert pool.retry_in(109.0) == 1.0
    assert chosen(pool, now=110.0) == A  # the trial
    assert chosen(pool, now=110.5) is None  # one trial per wait
    pool.failed(a, "refused", 111.0, probe=False)  # it failed: wait again
    assert chosen(pool, now=118.0) == B and chosen(pool, now=121.0) == A
    assert pool.succeeded(a, 121.0, probe=False) and a.up


def test_backups_are_chosen_only_while_every_primary_is_down() -> None:
    pool = make([A, B], [X], fails=1, probing=True)
    assert X not in {chosen(pool) for _ in range(10)}
    pool.failed(server(pool, A), "refused", 1.0, probe=True)
    assert {chosen(pool) for _ in range(10)} == {B}
    pool.failed(server(pool, B), "refused", 1.0, probe=True)
    assert {chosen(pool) for _ in range(10)} == {X}
    pool.failed(server(pool, X), "refused", 1.0, probe=True)
    assert chosen(pool) is None


def test_a_single_server_without_probes_is_never_marked_down() -> None:
    pool = make([A])
    for n in range(5):
        assert not pool.failed(server(pool, A), "refused", float(n), probe=False)
    assert chosen(pool) == A


def test_choose_skips_the_servers_a_request_tried() -> None:
    pool = make([A, B])
    assert {pool.choose("/", 1.0, [A]).url for _ in range(4)} == {B}  # type: ignore[union-attr]
    assert pool.choose("/", 1.0, [A, B]) is None


def test_a_reload_keeps_the_state_of_servers_it_keeps() -> None:
    pool = make([A, B], fails=1)
    a = server(pool, A)
    a.requests = 7
    pool.failed(a, "refused", 1.0, probe=False)
    again = OriginPool.new([A, C], [B], PoolRules(fails=1), 5.0, previous=pool)
    assert [(s.url, s.backup, s.up) for s in again.servers] == [
        (A, False, False),
        (C, False, True),
        (B, True, True),
    ]
    assert server(again, A).requests == 7 and server(again, C).since == 5.0


@pytest.mark.parametrize(
    ("method", "reached", "retry"),
    [
        ("POST", False, True),  # the connect failed: nothing was sent
        ("PATCH", False, True),
        ("POST", True, False),  # it may have reached the origin
        ("PATCH", True, False),
        ("GET", True, True),  # idempotent (RFC 9110 §9.2.2)
        ("PUT", True, True),
        ("DELETE", True, True),
    ],
)
def test_the_retry_rule(method: str, reached: bool, retry: bool) -> None:
    """RFC 9110 §9.2.2: a request may be sent again automatically only when idempotent,
    unless none of it was sent."""
    assert may_retry(method, reached=reached) is retry


@pytest.mark.parametrize(
    ("method", "reached", "timed_out", "retry"),
    [
        ("GET", False, True, True),  # a connect timeout: nothing was sent
        ("POST", False, True, True),
        ("GET", True, True, False),  # a read timeout: the server may still be at it
        ("PUT", True, True, False),
        ("GET", True, False, True),  # a connection that broke after sending
    ],
)
def test_a_timeout_after_sending_is_not_retried(
    method: str, reached: bool, timed_out: bool, retry: bool
) -> None:
    """Decision 0046 (nginx's proxy_next_upstream without ``timeout``)."""
    assert may_retry(method, reached=reached, timed_out=timed_out) is retry


def test_only_a_failure_to_connect_counts_against_a_server() -> None:
    """Decision 0046: one slow URL must not mark its servers down."""
    assert counts_against(reached=False) is True
    assert counts_against(reached=True) is False


@given(
    events=st.lists(
        st.tuples(st.sampled_from([A, B, X]), st.booleans(), st.booleans()), max_size=60
    ),
    probing=st.booleans(),
    balance=st.sampled_from(["round_robin", "least_connections", "hash"]),
)
def test_the_choice_is_always_an_up_server_primaries_first(
    events: list[tuple[str, bool, bool]], probing: bool, balance: str
) -> None:
    pool = make([A, B], [X], fails=2, passes=2, probing=probing, balance=balance)
    for now, (url, ok, probe) in enumerate(events):
        if ok:
            pool.succeeded(server(pool, url), float(now), probe=probe)
        else:
            pool.failed(server(pool, url), "x", float(now), probe=probe)
        picked = pool.choose(f"/{now}", float(now))
        up = [s for s in pool.servers if s.up]
        if picked is None:
            assert not up and (probing or all(s.trial_at for s in pool.servers if not s.up))
        elif picked.up:
            assert not picked.backup or not any(s.up and not s.backup for s in pool.servers)
        else:
            assert not probing and not up  # a trial only when nothing is up
