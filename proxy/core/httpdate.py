"""HTTP-date and Cache-Control parsing (RFC 9110 §5.6.7, RFC 9111 §5.2)."""

from __future__ import annotations

from datetime import UTC
from email.utils import parsedate_to_datetime

Directives = dict[str, str | None]


def parse_http_date(value: str | None) -> float | None:
    """Seconds since the epoch for an HTTP-date, or None if absent or invalid."""
    if not value:
        return None
    try:
        parsed = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if parsed.tzinfo is None:
        # asctime-date has no zone and is GMT by definition; RFC 9110 §5.6.7 requires
        # recipients to accept it.
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def parse_cache_control(value: str | None) -> Directives:
    """Directive names (lowercased) to their argument, unquoted, or None.

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
