"""A member's info and report (proxy/wire/reports.py; decision 0027): written and read back,
the object builds before 0027 wrote read as version 1, a later version and garbage refused."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.errors import WireError
from proxy.wire.reports import NO_INFO, EdgeReport, MemberInfo, pack_member_info, unpack_member_info

REPORT = EdgeReport(
    counts={"a.test": {"hit": 3, "miss": 1}},
    minutes=[(1732441200.0, 3, 1)],
    store=(4, 4000, 1 << 20, 0),
    connections={"edge": [2, 0, 1]},
    responses={"domains": {"a.test": [[4, 0, 0, 0, 0], 4, [], 0.01]}, "log_lost": 0},
    domains={"a.test": (4, 4000)},
)
INFO = MemberInfo(
    **{name: getattr(REPORT, name) for name in REPORT.__struct_fields__},
    node="n1",
    worker=2,
    pid=4242,
    address="127.0.0.1:8080",
    fenced=False,
    applied=17,
    renew_failures=1,
    purges=1,
)


def test_an_info_round_trips() -> None:
    assert unpack_member_info(pack_member_info(INFO)) == INFO


def test_the_purge_script_finds_that_a_member_applies_purges() -> None:
    """purge_scripts.py searches the info for this text (decision 0026)."""
    assert '"purges":1' in pack_member_info(INFO)
    assert '"purges":1' not in pack_member_info(MemberInfo())


def test_an_info_written_before_0027_is_read_with_what_it_lacks_at_its_default() -> None:
    """A member of a build before purges and connections were reported (json.dumps)."""
    old = json.dumps(
        {
            "node": "n0",
            "worker": 0,
            "pid": 7,
            "address": "",
            "fenced": True,
            "applied": 3,
            "renew_failures": 0,
            "counts": {"a.test": {"hit": 1}},
            "minutes": [[60.0, 1, 0]],
            "store": [1, 10, 100, 0],
            "some_later_key": {"x": 1},
        },
        separators=(",", ":"),
    )
    info = unpack_member_info(old)
    assert (info.node, info.pid, info.fenced, info.applied, info.purges) == ("n0", 7, True, 3, 0)
    assert (info.minutes, info.store, info.connections) == ([(60.0, 1, 0)], (1, 10, 100, 0), {})
    assert unpack_member_info(old.replace("{", '{"v":1,', 1)) == info


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"v":2,"node":"n"}', "member-info of version 2: this build reads version 1"),
        ('{"v":"2"}', "its version is '2', not a number"),
        ("", "not a member-info"),
        ("[]", "not a member-info"),
        ("not json", "not a member-info"),
        ('{"pid":"7"}', r"Expected `int`, got `str` - at `\$.pid`"),
        ('{"fenced":1}', r"Expected `bool`, got `int` - at `\$.fenced`"),
        ('{"store":[1,2,3]}', r"at `\$.store`"),
        ('{"minutes":[[60.0,1]]}', r"at `\$.minutes\[0\]`"),
        ('{"counts":{"a":{"hit":true}}}', "Expected `int`, got `bool`"),
        ('{"node":"n"', "not a member-info"),  # cut short
    ],
)
def test_an_unreadable_info_is_refused_saying_why(text: str, says: str) -> None:
    with pytest.raises(WireError, match=says):
        unpack_member_info(text)


def test_an_empty_info_has_every_default() -> None:
    assert unpack_member_info("{}") == NO_INFO


@given(text=st.text(max_size=200) | st.binary(max_size=200))
def test_any_info_is_read_or_refused_with_wire_error(text: str | bytes) -> None:
    with contextlib.suppress(WireError):
        unpack_member_info(text)
