"""HTTP-date and Cache-Control parsing (RFC 9110 §5.6.7, RFC 9111 §5.2)."""

from __future__ import annotations

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
        return None  # HTTP-dates are always GMT; a zone-less date is not one.
    return parsed.timestamp()


def parse_cache_control(value: str | None) -> Directives:
    """Directive names (lowercased) to their argument, unquoted, or None.

    A directive given twice keeps its first value; ``duplicates`` callers that care can
    detect them with ``has_conflict``.
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
    if arg is None or not arg.isdigit() or not arg.isascii():
        return -1
    return min(int(arg), 2**31)


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
