"""Which HTTP/1.1 requests the hit lane may answer (issue 35, decision 0050).

The lane (proxy/edge/hit_lane.py) answers a fresh, whole-object hit before aiohttp reads the
request: no request object, task or writer. It reads request heads itself, and so it must
never answer a request whose bytes aiohttp's llhttp parser would read differently. It takes
a strict, unambiguous subset of HTTP/1.1, which llhttp reads one way only:

- the request line ``GET`` or ``HEAD``, one space, an origin-form target of RFC 3986's
  characters (RFC 9112 §3.2.1), one space, ``HTTP/1.1``, CRLF;
- 1 to ``MAX_FIELDS`` field lines, each a token (RFC 9110 §5.6.2), a colon right after it,
  and a value of visible ASCII, space and tab only (§5.5): no obs-fold (a line may not begin
  with white space), no bare CR or LF, no NUL or other control, no byte past 0x7f;
- CRLF, and the whole head at most ``MAX_HEAD`` bytes (under aiohttp's line limits);
- no field named twice, one Host, and none of the fields that frame a body or change the
  connection: Content-Length, Transfer-Encoding, Upgrade, Expect, and Connection but
  ``keep-alive``.

``read_head`` returns None for anything else, a head not whole yet included: those bytes go to
aiohttp's parser unchanged (the full path), which answers them exactly as with the lane off.
Then ``fast_hit`` decides whether a head the lane read may be answered from a stored entry
at all: the same question the handler's fast path asks of aiohttp's requests (one rule, in
one place).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple, Protocol

from proxy.core.http.requests import PLAIN_GET_BARRED, FieldNames, plain_get

MAX_HEAD = 8190  # aiohttp's max_line_size and max_field_size: a head within it breaks neither
MAX_FIELDS = 100  # under aiohttp's max_headers (128)

_TCHAR = rb"!#$%&'*+.^_`|~0-9A-Za-z-"
# RFC 3986's unreserved, sub-delims, ':', '@', '/', '?' and '%' (pct-encoded).
_TARGET = rb"/[A-Za-z0-9\-._~!$&'()*+,;=:@/?%]*"
_HEAD = re.compile(
    rb"(GET|HEAD) (" + _TARGET + rb") HTTP/1\.1\r\n"
    rb"((?:[" + _TCHAR + rb"]+:[\t -~]*\r\n){1,%d})\r\n" % MAX_FIELDS
)
# The names, and the values without the white space around them (RFC 9112 §5.1, as aiohttp
# reads them), of the field lines _HEAD matched: one of each per line (a name holds no ':',
# and a value runs to its line's end). Read in C, with no Python loop (measured: a loop over
# the lines, and a lazy value pattern, cost a hit some 3,000 instructions).
_NAMES = re.compile(r"^([^:]+):", re.MULTILINE)
_VALUES = re.compile(r":[ \t]*((?:[^\r]*[^\r \t])?)[ \t]*\r\n")
# Fields whose presence takes a request off the lane: they frame a body, or change what the
# connection carries next (RFC 9112 §6, §9.6; RFC 9110 §7.8, §10.1.1).
_BARRED = frozenset({"content-length", "transfer-encoding", "upgrade", "expect"})


class Fields(dict[str, str]):
    """A lane request's fields: lower-case names to values (each name once). Read as
    aiohttp's header mapping is read: case-insensitive ``in``, ``get`` and ``getall``."""

    __slots__ = ()

    def __contains__(self, name: object, /) -> bool:
        return isinstance(name, str) and dict.__contains__(self, name.lower())

    def get(self, name: str, default: str | None = None, /) -> str | None:  # type: ignore[override]
        return dict.get(self, name.lower(), default)

    def getall(self, name: str, default: Iterable[str] = (), /) -> list[str] | Iterable[str]:
        value = dict.get(self, name.lower())
        return default if value is None else [value]


class LaneHead(NamedTuple):
    """A request head the lane read: its method, target and fields (its Host, too), and where
    it ended in the buffer it was read from. (A tuple: a frozen dataclass cost a hit 1.5 µs.)"""

    method: str
    target: str
    fields: Fields
    host: str
    end: int


_new_head = tuple.__new__


def read_head_py(data: bytes, start: int = 0) -> LaneHead | None:
    """The request head at ``data[start:]``, if it is whole and of the lane's strict subset
    (module docstring); else None, and aiohttp reads those bytes. The reference: ``read_head``
    is the C reader (``_lane.c``) when it is built, which must answer as this does (decision
    0055; tests/core/test_lane_c.py)."""
    match = _HEAD.match(data, start)
    if match is None:
        return None
    end = match.end()
    if end - start > MAX_HEAD:
        return None
    block = match.group(3).decode("ascii")
    names = _NAMES.findall(block.lower())
    fields = Fields(zip(names, _VALUES.findall(block), strict=True))
    if len(fields) != len(names) or not _BARRED.isdisjoint(fields.keys()):
        return None  # a field named twice, or one that frames a body or an upgrade
    connection = dict.get(fields, "connection")
    if connection is not None and connection.lower() != "keep-alive":
        return None  # close (the full path's), or a connection option
    host = dict.get(fields, "host")
    if not host:
        return None
    method, target = match.group(1, 2)
    # tuple.__new__: the NamedTuple's own __new__ is a Python function, a frame per head.
    return _new_head(LaneHead, (method.decode("ascii"), target.decode("ascii"), fields, host, end))


class HeadReader(Protocol):
    def __call__(self, data: bytes, start: int = 0, /) -> LaneHead | None: ...


read_head: HeadReader
try:
    from proxy.core.http import _lane
except ImportError:  # built without a C compiler: the pure-Python reader, same answers
    read_head = read_head_py
    READER = "python"
else:
    _lane.setup(Fields, LaneHead)
    read_head = _lane.read_head
    READER = "c"


def fast_hit(
    method: str, fields: FieldNames, *, keep_alive: bool, has_body: bool, early_hints: bool
) -> bool:
    """Whether a request may be answered from a fresh stored entry's precomputed lines (the
    handler's fast path, and the lane): a plain GET (``plain_get``: no directives, validators,
    Range or Upgrade of its own) on a connection kept open, on a domain that does not send
    Early Hints with its hits (those take the full path, which sends the preloads first:
    decision 0049). Whether an entry is fresh (``StoredResponse.fresh_age(now)``), whole and
    without Vary (it has ``hit_lines``) is the entry's to say."""
    if early_hints or not keep_alive:
        return False
    if type(fields) is Fields:  # the lane's: names in lower case, read in one C call
        return method == "GET" and not has_body and fields.keys().isdisjoint(PLAIN_GET_BARRED)
    return plain_get(method, fields, has_body=has_body)
