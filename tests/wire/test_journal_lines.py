"""The audit journal's lines (proxy/wire/journal.py; decisions 0016, 0027): written and read
back, a line of schema version 4 (``audit/1``) read with no kind or receipt, a later version
and garbage refused with WireError."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.errors import WireError
from proxy.wire.journal import pack_audit, unpack_audit

VALUES = (1.5, "tok", "127.0.0.1", "a.test", "purged", 200, 3, 1.25, None, 2, 2, "cp", "tag", "{}")


def test_a_line_round_trips_in_ascii() -> None:
    line = pack_audit(VALUES, "j.1")
    assert line.endswith(b"\n") and line.isascii() and line.startswith(b'["audit/2",')
    assert unpack_audit(line) == (*VALUES, "j.1")


def test_a_lone_surrogate_survives_the_round_trip() -> None:
    values = (1.5, None, None, "\udcff.example", "cleared", 200, 0, 1.0, *(None,) * 6)
    assert unpack_audit(pack_audit(values, "j.2"))[3] == "\udcff.example"


def test_a_line_of_version_1_is_read_without_kind_or_receipt() -> None:
    old = json.dumps(["audit/1", *VALUES[:-2], "j.3"]).encode()
    assert unpack_audit(old) == (*VALUES[:-2], None, None, "j.3")


@pytest.mark.parametrize(
    ("line", "says"),
    [
        (json.dumps(["audit/3", *VALUES, "j"]).encode(), "version 'audit/3': this build reads"),
        (b"", "not JSON"),
        (b"{}", "not an array"),
        (b"[]", "not an array"),
        (b'["audit/2"]', "length 15"),
        (
            json.dumps(["audit/2", *VALUES, 7]).encode(),
            r"Expected `str`, got `int` - at `\$\[14\]`",
        ),
        (json.dumps(["audit/2", "x", *VALUES[1:], "j"]).encode(), r"at `\$\[0\]`"),
        (b"[" * 100_000, "not JSON"),
    ],
)
def test_garbage_and_later_versions_are_refused_saying_why(line: bytes, says: str) -> None:
    with pytest.raises(WireError, match=says):
        unpack_audit(line)


@given(line=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_any_line_is_read_or_refused_with_wire_error(line: bytes) -> None:
    with contextlib.suppress(WireError):
        unpack_audit(line)
