"""Parsing the fields freshness is computed from: HTTP-dates (RFC 9110 §5.6.7), Cache-Control
(RFC 9111 §5.2) and the field-name lists its directives carry, and Age (RFC 9111 §5.1)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

Directives = dict[str, str | None]


_DAYS = "Mon|Tue|Wed|Thu|Fri|Sat|Sun"
_LONG_DAYS = "Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday"
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_MONTH = "|".join(_MONTHS)
_TIME = r"(\d\d):(\d\d):(\d\d)"
# RFC 9110 §5.6.7's three formats, exactly: one space between parts, two-digit day and hour,
# GMT. Names are matched without regard to case (what the cache-tests suite calls optimal).
_IMF_FIXDATE = re.compile(rf"(?:{_DAYS}), (\d\d) ({_MONTH}) (\d{{4}}) {_TIME} GMT", re.I)
_RFC850 = re.compile(rf"(?:{_LONG_DAYS}), (\d\d)-({_MONTH})-(\d\d) {_TIME} GMT", re.I)
_ASCTIME = re.compile(rf"(?:{_DAYS}) ({_MONTH}) ( \d|\d\d) {_TIME} (\d{{4}})", re.I)


def parse_http_date(value: str | None) -> float | None:
    """Seconds since the epoch for an HTTP-date, or None if absent or invalid.

    Only the three formats of RFC 9110 §5.6.7 are dates; anything else (other zones, missing
    comma, extra spaces, dashes in IMF-fixdate, one-digit hours, ...) is invalid, which for
    Expires means "already expired" (RFC 9111 §5.3).
    """
    if not value:
        return None
    text = value.strip()
    if match := _IMF_FIXDATE.fullmatch(text):
        day, month, year, hour, minute, second = match.groups()
        return _timestamp(int(year), month, day, hour, minute, second)
    if match := _RFC850.fullmatch(text):
        day, month, short_year, hour, minute, second = match.groups()
        # Two-digit years: 70-99 are 19xx, 00-69 are 20xx (the POSIX %y pivot; the RFC's
        # "more than 50 years in the future" rule needs a clock, which this module never reads).
        year = int(short_year) + (1900 if int(short_year) >= 70 else 2000)
        return _timestamp(year, month, day, hour, minute, second)
    if match := _ASCTIME.fullmatch(text):
        month, day, hour, minute, second, year = match.groups()
        return _timestamp(int(year), month, day, hour, minute, second)
    return None


def _timestamp(
    year: int, month: str, day: str, hour: str, minute: str, second: str
) -> float | None:
    try:
        moment = datetime(
            year,
            _MONTHS.index(month.lower()) + 1,
            int(day),
            int(hour),
            int(minute),
            min(int(second), 59),  # a leap second counts as the second before it
            tzinfo=UTC,
        )
    except ValueError:
        return None  # 31 Feb, hour 25, and so on
    return moment.timestamp()


def parse_cache_control(value: str | None) -> Directives:
    """Directive names (lowercased) to their argument, or None. A quoted argument loses its
    quotes, and an escaped quote inside it is read as a quote (other escapes are kept as sent).

    A directive given twice with different arguments is marked as a conflict:
    ``delta_seconds`` then reports it invalid and ``unqualified`` treats it as unqualified.
    """
    directives: Directives = {}
    if not value:
        return directives
    for part in _split_commas(value):
        name, sep, arg = part.partition("=")
        name = name.strip().lower()
        if not name:
            continue
        argument: str | None = None
        if sep:
            arg = arg.strip()
            if len(arg) >= 2 and arg[0] == '"' and arg[-1] == '"':
                arg = arg[1:-1].replace('\\"', '"')
            argument = arg
        if name in directives:
            if directives[name] != argument:
                directives[name] = _CONFLICT
            continue
        directives[name] = argument
    return directives


_CONFLICT = "\x00conflict"


def delta_seconds(directives: Directives, name: str) -> int | None:
    """The directive's delta-seconds argument (RFC 9111 §1.2.2).

    None when absent; -1 when present but invalid or given twice with different values,
    which callers treat as 'already stale' (§4.2.1: invalid freshness means stale).
    """
    if name not in directives:
        return None
    arg = directives[name]
    if arg is None or not arg.isascii() or not arg.isdigit():
        return -1
    if len(arg.lstrip("0")) > 10:
        return 2**31  # §1.2.2; also keeps int() clear of its 4300-digit limit
    return min(int(arg), 2**31)


def unqualified(directives: Directives, name: str) -> bool:
    """The directive is present without a field-name list, or given both ways (conflict)."""
    if name not in directives:
        return False
    arg = directives[name]
    return arg == _CONFLICT or not field_names(arg)


def field_names(argument: str | None) -> list[str]:
    """The field names in a qualified directive such as no-cache="set-cookie, x"."""
    if not argument:
        return []
    return [name.strip().lower() for name in argument.split(",") if name.strip()]


def _split_commas(value: str) -> list[str]:
    """Split on commas outside quoted strings."""
    parts: list[str] = []
    current: list[str] = []
    quoted = False
    escaped = False
    for char in value:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\" and quoted:
            current.append(char)
            escaped = True
        elif char == '"':
            quoted = not quoted
            current.append(char)
        elif char == "," and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [part.strip() for part in parts if part.strip()]


def age_seconds(values: list[str]) -> int:
    """The Age a response carries (RFC 9111 §5.1), as the current cache-tests suite reads it:
    the first field line, and in it the first list member, must be a non-negative integer
    (parameters after ``;`` are dropped); anything else is ignored (0). Values past 2**31 are
    2**31 (§1.2.2)."""
    if not values:
        return 0
    first = values[0].split(",", 1)[0].split(";", 1)[0].strip()
    if not first or not first.isascii() or not first.isdigit():
        return 0
    if len(first.lstrip("0")) > 10:
        return 2**31
    return min(int(first), 2**31)
