"""The fleet's records (proxy/wire/fleet.py; decisions 0026, 0027): each one written and read
back, the bytes of builds before 0027 read as version 1, a later version refused by name, and
garbage refused with WireError (never another exception)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.lease import ClearHint
from proxy.core.purge.fleet import Figures, PurgeRecord
from proxy.core.purge.purges import Purge, PurgeResult, purge_request
from proxy.errors import WireError
from proxy.wire.fleet import (
    pack_ack_figures,
    pack_dry_answer,
    pack_dry_ask,
    pack_dry_request,
    pack_figures,
    pack_hint,
    pack_record_text,
    record_head,
    unpack_ack_hint,
    unpack_dry_answer,
    unpack_dry_ask,
    unpack_dry_request,
    unpack_figures,
    unpack_hint,
    unpack_record,
)

E = "0123456789abcdef0123456789abcdef"  # an epoch id, as the scripts make them
RESULT = PurgeResult("a.test", "prefix", ("/p/",), False, True, 7, 3, 2, 20, True, 0.1, ("/p/x",))


@pytest.mark.parametrize(
    ("hint", "text"),
    [
        (ClearHint(E, 10, 11, "a.test"), f"{E} 10 11 a.test"),  # a clear (0014)
        (ClearHint(E, 10, 11, "a.test", figures=True), f"{E} 10 11 a.test clear"),  # hard all
        (ClearHint(E, 0, 5, "b.test", "url"), f"{E} 0 5 b.test url"),  # a purge (0026)
        (ClearHint(E, 5, 6, "b.test", "all"), f"{E} 5 6 b.test all"),  # a soft all
    ],
)
def test_hints_round_trip_in_the_bytes_the_scripts_publish(hint: ClearHint, text: str) -> None:
    assert pack_hint(hint) == text
    assert unpack_hint(text) == hint


def test_a_hint_tagged_version_1_is_read_and_a_later_version_is_refused_by_name() -> None:
    assert unpack_hint(f"hint/1 {E} 10 11 a.test") == ClearHint(E, 10, 11, "a.test")
    with pytest.raises(WireError, match="hint of version 2: this build reads version 1"):
        unpack_hint(f"hint/2 {E} 10 11 a.test url 7")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "120",  # the bare number of a control plane older than 0014's hints
        f"{E} 100 x a.test",
        f"{E} -1 5 a.test",
        f"{E} 10 11 a.test ban",  # a kind this build does not know: it syncs
        f"{E} 10 11 a.test url x",
        "record/1 1 a url 0 []",  # another family's tag
        "hint/x 1 2 3 a",
        f"{E} ² 3 a.test",  # a digit, but not an ASCII one
        f"{E} {'9' * 5000} 3 a.test",  # longer than any number Valkey keeps
    ],
)
def test_unreadable_hints_are_refused(text: str) -> None:
    with pytest.raises(WireError):
        unpack_hint(text)


@pytest.mark.parametrize(
    "purge",
    [
        purge_request("url", ["/a", "/q?x=1"]),
        purge_request("prefix", ["/"], soft=True),
        purge_request("tag", ["t-1", "T"]),
        purge_request("all", soft=True),
    ],
)
def test_records_round_trip(purge: Purge) -> None:
    text = pack_record_text(123, "a.test", purge)
    assert unpack_record(text) == PurgeRecord(123, "a.test", purge)
    assert record_head(text) == (123, "a.test")


def test_a_record_in_todays_bytes_is_read() -> None:
    """What the purge script of decision 0026 keeps: number domain kind soft items."""
    record = unpack_record('42 a.test tag 1 ["t-1","t-2"]')
    assert record == PurgeRecord(42, "a.test", purge_request("tag", ["t-1", "t-2"], soft=True))


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "not a purge-record"),
        ("x a url 0 []", "not a purge-record"),
        ("1 a url 2 []", "not a purge-record"),
        ("1 a url 0 [", "not a purge-record"),
        ("1 a url 0 {}", "Expected `array`"),
        ("1 a url 0 [1]", "Expected `str`"),
        ("1 a no 0 []", "is not a purge: kind must be one of"),
        ('1 a url 0 ["no-slash"]', "is not a purge"),
        ("purge-record/3 1 a url 0 []", "purge-record of version 3"),
    ],
)
def test_unreadable_records_are_refused_saying_why(text: str, says: str) -> None:
    with pytest.raises(WireError, match=says):
        unpack_record(text)
    number, _ = record_head(text)
    assert number is None or number == int(text.split(" ")[0])


def test_figures_round_trip_and_garbage_is_refused() -> None:
    figures = Figures(reported=3, entries=30, bytes=3000, inexact=1)
    assert unpack_figures(pack_figures(figures)) == figures
    assert pack_ack_figures([(7, 2, 20, True), (8, 1, 9, False)]) == (7, 2, 20, 1, 8, 1, 9, 0)
    for text in ("", "1 2 3", "1 2 3 x", "1 2 3 4 5", "-1 2 3 4"):
        with pytest.raises(WireError):
            unpack_figures(text)


def test_ack_hints_are_numbers() -> None:
    assert unpack_ack_hint("1732441234567890") == 1732441234567890
    for text in ("", "x", "-1", "1 2", "²", "9" * 5000):
        with pytest.raises(WireError):
            unpack_ack_hint(text)


def test_dry_runs_round_trip() -> None:
    purge = purge_request("prefix", ["/p/"], dry_run=True)
    assert unpack_dry_ask(pack_dry_ask("00ff", "n/0/x")) == ("00ff", "n/0/x")
    assert unpack_dry_request(pack_dry_request("a.test", purge)) == ("a.test", purge)
    answer = pack_dry_answer(RESULT, "n/0/x")
    assert unpack_dry_answer(answer) == replace(RESULT, answered_by="n/0/x")


def test_a_dry_answer_in_todays_bytes_is_read_and_a_later_version_refused() -> None:
    """The object builds before 0027 sent (json.dumps of the receipt's fields)."""
    old = (
        '{"domain":"a.test","kind":"url","items":["/a"],"soft":false,"dry_run":true,'
        '"number":7,"generation":3,"entries":1,"bytes":10,"exact":true,"seconds":0.01,'
        '"sample":["/a"],"acked":null,"live":null,"reported":null,"answered_by":"n/1/y"}'
    )
    assert unpack_dry_answer(old).answered_by == "n/1/y"
    assert unpack_dry_answer(old.replace("{", '{"v":1,', 1)).entries == 1
    with pytest.raises(WireError, match="dry-answer of version 2"):
        unpack_dry_answer(old.replace("{", '{"v":2,', 1))


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{}",
        "[]",
        "not json",
        '{"v":"1"}',
        pack_dry_answer(RESULT, "m").replace('"m"', "null"),  # names no member
        pack_dry_answer(RESULT, "m").replace('"prefix"', '"ban"'),
        pack_dry_answer(RESULT, "m").replace('"entries":2', '"entries":"2"'),
        pack_dry_answer(RESULT, "m")[:-5],  # cut short
    ],
)
def test_unreadable_dry_answers_are_refused(text: str) -> None:
    with pytest.raises(WireError):
        unpack_dry_answer(text)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "not a dry-request: not a purge-record"),
        ("a.test url 0 [1]", "not a dry-request: not a purge-record: Expected `str`"),
        ("a.test ban 0 []", "not a dry-request: purge-record 0 is not a purge"),
        ("dry-request/2 a.test all 0 []", "dry-request of version 2"),
    ],
)
def test_unreadable_dry_requests_are_refused_saying_why(text: str, says: str) -> None:
    with pytest.raises(WireError, match=says):
        unpack_dry_request(text)


@pytest.mark.parametrize("text", ["", "00ff", "00ff ", " n/0/x", "dry-call/2 00ff n/0/x"])
def test_unreadable_dry_calls_are_refused(text: str) -> None:
    with pytest.raises(WireError):
        unpack_dry_ask(text)


READERS = [
    unpack_hint,
    unpack_record,
    unpack_figures,
    unpack_ack_hint,
    unpack_dry_ask,
    unpack_dry_request,
    unpack_dry_answer,
]


@pytest.mark.parametrize("read", READERS)
@given(text=st.text(max_size=200) | st.from_regex(r"[0-9\u00b2 ]{0,60}", fullmatch=True))
def test_any_text_is_read_or_refused_with_wire_error(
    read: Callable[[str], object], text: str
) -> None:
    """Whatever arrives on a channel or in a key, its reader raises nothing but WireError."""
    with contextlib.suppress(WireError):
        read(text)


@given(
    epoch=st.text("0123456789abcdef", min_size=1, max_size=32),
    previous=st.integers(0, 2**62),
    number=st.integers(0, 2**62),
    domain=st.from_regex(r"[a-z0-9-]{1,20}(\.[a-z0-9-]{1,20}){0,3}", fullmatch=True),
    kind=st.sampled_from(["clear", "url", "prefix", "tag", "all"]),
    figures=st.booleans(),
)
def test_any_hint_round_trips(
    epoch: str, previous: int, number: int, domain: str, kind: str, figures: bool
) -> None:
    hint = ClearHint(epoch, previous, number, domain, kind, figures=figures and kind == "clear")
    assert unpack_hint(pack_hint(hint)) == hint
