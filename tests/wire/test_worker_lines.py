"""A worker's lines to its node (proxy/wire/worker.py; decision 0027): written and read back,
today's lines read as version 1, a later version and garbage refused."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.errors import WireError
from proxy.wire.worker import Ready, Reloaded, WorkerLine, pack_worker_line, unpack_worker_line

DIGEST = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


@pytest.mark.parametrize(
    ("line", "text"),
    [
        (Ready(), "ready"),
        (Reloaded(True, DIGEST, "2 domains, 1 added"), f"reloaded ok {DIGEST} 2 domains, 1 added"),
        (Reloaded(False, None, "config error: x"), "reloaded failed - config error: x"),
        (Reloaded(True, DIGEST, ""), f"reloaded ok {DIGEST}"),
    ],
)
def test_lines_round_trip_in_the_bytes_workers_print(line: WorkerLine, text: str) -> None:
    assert pack_worker_line(line) == text
    assert unpack_worker_line(text) == line


def test_a_message_on_several_lines_is_sent_on_one() -> None:
    text = pack_worker_line(Reloaded(False, DIGEST, "edge.listen: bad\n  at line 3"))
    assert "\n" not in text
    assert unpack_worker_line(text) == Reloaded(False, DIGEST, "edge.listen: bad at line 3")


def test_a_tagged_version_1_is_read_and_a_later_version_refused_by_name() -> None:
    assert unpack_worker_line("worker/1 ready") == Ready()
    with pytest.raises(WireError, match="worker of version 2: this build reads version 1"):
        unpack_worker_line("worker/2 reloaded ok abc {}")


@pytest.mark.parametrize(
    "text",
    ["", "Ready", "ready now", "reloaded", "reloaded ok", "reloaded maybe abc x", "loaded ok a"],
)
def test_garbage_is_refused(text: str) -> None:
    with pytest.raises(WireError, match="not a worker"):
        unpack_worker_line(text)


@given(text=st.text(max_size=120))
def test_any_line_is_read_or_refused_with_wire_error(text: str) -> None:
    with contextlib.suppress(WireError):
        unpack_worker_line(text)
