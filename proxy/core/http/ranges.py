"""Range requests answered from a whole stored response (RFC 9110 §14, §13.1.5, §15.3.7).

Theory of operation. The cache stores only whole responses; a Range request is answered from
the response the cache would otherwise have sent in full (fresh, revalidated, stale within
stale-while-revalidate or stale-if-error: the range is applied last). ``decide_range`` takes
that response's status, validators and length and the request's Range and If-Range, and
returns one of three decisions:

- ``Whole``: ignore the Range and send the 200 as it is. The RFC allows a server to ignore
  Range at any time (§14.2), and requires it for methods other than GET, for a response that
  would not be a 200 without the Range (§14.2: a stored 404 or 301, a 304 to the client's own
  condition), for a failed If-Range (§13.1.5), and for a unit it does not know. This cache
  also ignores a Range it cannot read (invalid syntax, too many ranges, more than one Range
  field) and one whose satisfiable ranges do not coalesce into a single range (multipart/
  byteranges is not sent: decision 0021).
- ``Part``: a 206 with one Content-Range (§15.3.7.1); overlapping or adjacent ranges are
  coalesced first (§15.3.7.2 allows it).
- ``Unsatisfiable``: a 416 with ``Content-Range: bytes */LEN`` (§15.5.17), when none of the
  ranges is satisfiable (§14.1.1: a first-pos at or past the end, or a suffix of length 0).

The bytes are those of the representation as stored: with its Content-Encoding, if it has
one (§14.1: ranges address the selected representation's data, after content coding).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from proxy.core.http.httpdate import parse_http_date

# More ranges than this in one request are not read: the Range is ignored (§14.2 lets a
# server ignore a set of many small ranges; this bounds the work one header can cause).
MAX_RANGES = 64
# A position with more digits than this is past the end of anything this cache stores, and
# int() of a long enough digit string raises: read it as this much instead.
_MAX_DIGITS = 18
_BEYOND = 10**_MAX_DIGITS

# §14.1.1: range-unit "=" range-set; the unit is case-insensitive (§14.1).
_SPECIFIER = re.compile(r"([!#$%&'*+\-.^_`|~0-9A-Za-z]+)=(.*)", re.DOTALL)
# int-range = first-pos "-" [ last-pos ]; suffix-range = "-" suffix-length
_RANGE_SPEC = re.compile(r"([0-9]*)-([0-9]*)")


@dataclass(frozen=True, slots=True)
class Whole:
    """Send the whole response, ignoring the Range; ``reason`` says why (for tests and logs)."""

    reason: str  # no-range, method, status, invalid, if-range, empty or multiple


@dataclass(frozen=True, slots=True)
class Part:
    """Send bytes ``first`` to ``last`` (inclusive) of ``complete_length`` with a 206."""

    first: int
    last: int
    complete_length: int

    @property
    def content_range(self) -> str:
        return f"bytes {self.first}-{self.last}/{self.complete_length}"  # §14.4


@dataclass(frozen=True, slots=True)
class Unsatisfiable:
    """None of the ranges is satisfiable: a 416 (§15.5.17)."""

    complete_length: int

    @property
    def content_range(self) -> str:
        return f"bytes */{self.complete_length}"  # §14.4: unsatisfied-range


RangeDecision = Whole | Part | Unsatisfiable

# A range as requested: (first, last) with last None for "to the end", or (None, n) for the
# last n bytes.
RangeSpec = tuple[int | None, int | None]


def decide_range(
    *,
    method: str,
    status: int,
    ranges: list[str],
    if_range: str | None,
    etag: str | None,
    last_modified: str | None,
    length: int,
) -> RangeDecision:
    """How to answer a request whose Range field values are ``ranges`` (empty: none) from a
    whole response with ``status``, validators ``etag`` and ``last_modified`` and a body of
    ``length`` bytes. The caller evaluates the client's other conditions first (a 304 to
    If-None-Match is not a 200, so ``status`` is then not 200)."""
    if not ranges:
        return Whole("no-range")
    if method != "GET":  # §14.2: range handling is defined for GET only
        return Whole("method")
    if status != 200:  # §14.2: only where the answer without Range would be a 200
        return Whole("status")
    if len(ranges) != 1:  # a singleton field sent twice: not readable as one request
        return Whole("invalid")
    specs = parse_range(ranges[0])
    if specs is None:
        return Whole("invalid")
    if if_range is not None and not if_range_holds(
        if_range, etag=etag, last_modified=last_modified
    ):
        return Whole("if-range")  # §13.1.5: the client's copy is not this one
    if length == 0 and any(first is None for first, _ in specs):
        return Whole("empty")  # a suffix of nothing: there is no byte to address
    spans = coalesced(satisfiable(specs, length))
    if not spans:
        return Unsatisfiable(length)
    if len(spans) > 1:
        return Whole("multiple")
    first, last = spans[0]
    return Part(first, last, length)


def fetches_whole(ranges: list[str]) -> bool:
    """Whether a miss for a request with these Range values may be filled with the whole
    object (decision 0031): only when the answer is the whole object anyway, so the origin
    sends no more than the client asked for. That is a Range this cache ignores (unreadable,
    another unit, sent twice: §14.2) or one that asks from the first byte to the end
    (``bytes=0-``, what players and browsers open a media file with). Any other range is
    forwarded to the origin as it is, so a one-byte range cannot cost the origin an object
    (the RangeAmp attack)."""
    if len(ranges) != 1:
        return True
    specs = parse_range(ranges[0])
    return specs is None or (0, None) in specs


def parse_range(value: str) -> list[RangeSpec] | None:
    """The byte ranges of a Range field value (§14.1.1, §14.2), or None when it is not a
    ``bytes`` range set this cache reads: another unit, invalid syntax, an int-range whose
    last-pos is before its first-pos, or more than ``MAX_RANGES`` ranges."""
    matched = _SPECIFIER.fullmatch(value.strip(" \t"))
    if matched is None or matched[1].lower() != "bytes":
        return None
    specs: list[RangeSpec] = []
    # 1#range-spec: comma-separated, with optional white space and empty elements (§5.6.1).
    for element in matched[2].split(","):
        element = element.strip(" \t")
        if not element:
            continue
        spec = _RANGE_SPEC.fullmatch(element)
        if spec is None or (not spec[1] and not spec[2]):
            return None
        if len(specs) == MAX_RANGES:
            return None
        if spec[1]:
            first, last = _position(spec[1]), _position(spec[2]) if spec[2] else None
            if last is not None and last < first:
                return None  # §14.1.1: invalid
            specs.append((first, last))
        else:
            specs.append((None, _position(spec[2])))
    return specs or None


def _position(digits: str) -> int:
    return int(digits) if len(digits) <= _MAX_DIGITS else _BEYOND


def satisfiable(specs: list[RangeSpec], length: int) -> list[tuple[int, int]]:
    """The satisfiable ranges of ``specs`` over ``length`` bytes, as inclusive (first, last)
    positions within them (§14.1.1: a last-pos past the end, or a suffix longer than the
    representation, is cut to what there is)."""
    spans: list[tuple[int, int]] = []
    for first, last in specs:
        if first is None:
            suffix = last or 0
            if suffix > 0 and length > 0:
                spans.append((max(0, length - suffix), length - 1))
        elif first < length:
            spans.append((first, length - 1 if last is None else min(last, length - 1)))
    return spans


def coalesced(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The spans merged where they overlap or touch (§15.3.7.2), in ascending order."""
    merged: list[tuple[int, int]] = []
    for first, last in sorted(spans):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return merged


def if_range_holds(value: str, *, etag: str | None, last_modified: str | None) -> bool:
    """§13.1.5: an entity-tag holds when it strongly matches the response's ETag (§8.8.3.2:
    neither is weak and their opaque tags are the same); an HTTP-date holds when it is the
    response's Last-Modified exactly. Anything else (a weak tag, an invalid date, a response
    without that validator) does not hold."""
    value = value.strip(" \t")
    if value.startswith(('"', "W/")):
        return etag is not None and strong_match(value, etag)
    date = parse_http_date(value)
    return date is not None and date == parse_http_date(last_modified)


def strong_match(a: str, b: str) -> bool:
    """§8.8.3.2 strong comparison of two entity-tags."""
    return a == b.strip(" \t") and len(a) >= 2 and a[0] == '"' and a[-1] == '"'
