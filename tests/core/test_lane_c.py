"""The hit lane's two head readers answer alike (decision 0055): ``read_head`` in C
(proxy/core/http/_lane.c) and ``read_head_py``, the pure-Python reference and fallback. Every
byte string of the lane's tests (tests/core/test_lane.py, the edge corpus of
tests/edge/test_hit_lane.py, the llhttp differential's pieces in every place) is read by both
at every offset, and so are generated heads: same None, or the same LaneHead (same types,
fields in the same order)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.http import lane
from proxy.core.http.lane import MAX_FIELDS, MAX_HEAD, Fields, LaneHead, read_head_py
from tests.core.test_lane import READ, REFUSED
from tests.edge.test_hit_lane import CORPUS, FIELDS, LINES
from tests.edge.test_hit_lane_parser import PIECES, VALID, mutated, pieces_joined

try:
    from proxy.core.http import _lane
except ImportError:  # pragma: no cover - a build without a C compiler
    _lane = None  # type: ignore[assignment]

needs_c = pytest.mark.skipif(
    _lane is None, reason="the C reader is not built: `pip install -e .` or setup.py build_ext"
)


def same(data: bytes) -> None:
    """Both readers, at every offset of ``data`` (and one past its end)."""
    assert _lane is not None
    for start in range(len(data) + 2):
        c = _lane.read_head(data, start)
        py = read_head_py(data, start)
        if py is None:
            assert c is None, (data, start)
            continue
        assert c is not None, (data, start)
        assert type(c) is LaneHead and type(c.fields) is Fields
        assert tuple(c) == tuple(py)
        assert list(c.fields.items()) == list(py.fields.items())
        assert c.host == c.fields["host"]


@needs_c
def test_the_built_reader_is_not_older_than_its_source() -> None:
    """An in-place build (``setup.py build_ext --inplace``, ``pip install -e .``) is not
    rebuilt when _lane.c changes: a stale one would be what every lane test ran."""
    assert _lane is not None and _lane.__file__ is not None
    source = Path(lane.__file__).with_name("_lane.c")
    assert Path(_lane.__file__).stat().st_mtime >= source.stat().st_mtime, (
        "proxy/core/http/_lane.c changed since the build: run `pip install -e .` or "
        "`python setup.py build_ext --inplace`"
    )


def test_the_lane_reads_with_c_when_it_is_built() -> None:
    expected = "python" if _lane is None else "c"
    assert expected == lane.READER
    assert lane.read_head is (read_head_py if _lane is None else _lane.read_head)


@needs_c
def test_the_lane_tests_heads_read_alike() -> None:
    for data, *_ in READ:
        same(data)
    for data in REFUSED.values():
        same(data)


@needs_c
def test_the_edge_corpus_reads_alike() -> None:
    for data in CORPUS.values():
        same(data)
        same(data + data)  # pipelined


@needs_c
def test_every_piece_in_every_place_reads_alike() -> None:
    for data in pieces_joined():
        assert _lane is not None
        assert _lane.read_head(data) == read_head_py(data)


EDGES = [
    b"GET / HTTP/1.1\r\nHost: a\r\n\r",
    b"GET / HTTP/1.1\r\nHost: a\r\n\rX",
    b"GET / HTTP/1.1\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: \t \r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nX: \t\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nConnection: \tKEEP-ALIVE \r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nconnection:keep-alivex\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nContent-LENGTH: 0\r\n\r\n",
    b"GET / HTTP/1.1\r\nhOsT: a:b: c\r\n\r\n",
    b"GET / HTTP/1.1\r\n:a\r\nHost: a\r\n\r\n",
    b"HEAD /?%% HTTP/1.1\r\nHost: a\r\n\r\n",
    # 27 bytes but the target's a: MAX_HEAD bytes in all, and one more.
    b"GET /" + b"a" * (MAX_HEAD - 27) + b" HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET /" + b"a" * (MAX_HEAD - 26) + b" HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\n" + b"".join(b"X-%d: v\r\n" % n for n in range(98)) + b"\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\n"
    + b"".join(b"X-%d: v\r\n" % n for n in range(MAX_FIELDS - 1))
    + b"\r\n",
]


@needs_c
@pytest.mark.parametrize("data", EDGES)
def test_the_edges_of_the_grammar_read_alike(data: bytes) -> None:
    same(data)


def test_the_size_limit_is_met_exactly() -> None:
    assert len(EDGES[11]) == MAX_HEAD and read_head_py(EDGES[11]) is not None
    assert len(EDGES[12]) == MAX_HEAD + 1 and read_head_py(EDGES[12]) is None


@needs_c
def test_any_buffer_reads_as_bytes_do() -> None:
    assert _lane is not None
    for data in (VALID, VALID * 2):
        assert _lane.read_head(bytearray(data)) == read_head_py(data)  # type: ignore[arg-type]
        assert _lane.read_head(memoryview(data)) == read_head_py(data)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        _lane.read_head("GET / HTTP/1.1\r\n")  # type: ignore[arg-type]


@st.composite
def joined(draw: st.DrawFn) -> bytes:
    """Heads of the edge tests' lines and fields (bare LF at times), and the pieces."""
    data = b""
    for _ in range(draw(st.integers(1, 3))):
        ending = b"\n" if draw(st.integers(0, 9)) == 0 else b"\r\n"
        line = draw(st.sampled_from(LINES))
        fields = draw(st.lists(st.sampled_from(FIELDS + PIECES), max_size=5))
        data += line + ending + b"".join(field + ending for field in fields) + ending
    return data


@needs_c
@settings(max_examples=1500, deadline=None, derandomize=True)
@given(st.one_of(mutated(), joined(), st.binary(max_size=64).map(lambda t: VALID[:20] + t)))
def test_generated_heads_read_alike(data: bytes) -> None:
    same(data)
