"""A trace's question to a worker and its answer (proxy/wire/worker.py; decision 0038): the
held variants travel without bodies and with only the fields a trace reads, on one line, and
come back as the same judgement; garbage is refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.cache.entry import StoredResponse
from proxy.core.cache.trace import Held, lifetime_source
from proxy.errors import WireError
from proxy.wire.worker import (
    Inspect,
    Inspected,
    pack_held,
    pack_inspect,
    pack_worker_line,
    unpack_held,
    unpack_inspect,
    unpack_worker_line,
)

STORED = StoredResponse(
    status=200,
    reason="OK",
    headers=(("Content-Type", "text/plain"), ("Cache-Control", "max-age=60"), ("Set-X", "y")),
    body=b"a body that stays in the worker",
    birth=1_700_000_000.5,
    freshness_lifetime=60.0,
    vary=("accept-language",),
    vary_values=("en",),
    stale_if_error=30.0,
    tags=("t1",),
)


def test_an_inspected_line_carries_what_a_trace_judges_and_no_body() -> None:
    held = Held((STORED,), 3, 7, purges=(("url", ("/p",), True),), pending=1)
    text = pack_worker_line(Inspected(42, pack_held(held)))
    assert "\n" not in text and "a body" not in text and "Set-X" not in text
    said = unpack_worker_line(text)
    assert isinstance(said, Inspected) and said.id == 42
    back = unpack_held(said.held)
    assert (back.generation, back.purge_number, back.purges, back.pending) == (
        3,
        7,
        (("url", ("/p",), True),),
        1,
    )
    (variant,) = back.variants
    assert variant.body == b""
    for name in ("status", "birth", "freshness_lifetime", "vary", "vary_values", "tags"):
        assert getattr(variant, name) == getattr(STORED, name), name
    assert variant.stale_if_error == 30.0
    assert lifetime_source(variant, None) == lifetime_source(STORED, None) == "origin"


@given(st.text(min_size=1, max_size=80), st.text(min_size=1, max_size=200))
def test_questions_round_trip_on_one_line(domain: str, target: str) -> None:
    text = pack_inspect(Inspect(9, domain, target))
    assert "\n" not in text
    assert unpack_inspect(text) == Inspect(9, domain, target)


@pytest.mark.parametrize(
    "text",
    [
        "inspect",
        "inspect x {}",
        "inspect 1 {",
        'inspect 1 {"domain": 3}',
        "ready",
        "worker/2 inspect 1 {}",
    ],
)
def test_garbage_questions_are_refused(text: str) -> None:
    with pytest.raises(WireError):
        unpack_inspect(text)


@pytest.mark.parametrize(
    "text", ["inspected", "inspected x {}", "inspected 1 [", 'inspected 1 {"variants": 1}']
)
def test_garbage_answers_are_refused(text: str) -> None:
    with pytest.raises(WireError):
        unpack_worker_line(text)
