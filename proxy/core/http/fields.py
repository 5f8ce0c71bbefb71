"""A message's fields, as (name, value) pairs and as the HTTP/1.1 lines that carry them.

Names keep the case they arrived in; values are text (UTF-8, with surrogate escapes for bytes
that are not). ``write_lines`` and ``line_fields`` turn one form into the other and back,
exactly, or refuse: a stored entry keeps its fields once, as lines (proxy/core/cache/entry.py).
"""

from __future__ import annotations

import re

Headers = tuple[tuple[str, str], ...]


Lines = tuple[bytes, ...]


def line_fields(lines: Lines) -> Headers:
    """The fields of lines written by ``write_lines``: every line after the status line."""
    return tuple(
        (name, value)
        for name, _, value in (line[:-2].decode("utf-8").partition(": ") for line in lines[1:])
    )


def write_lines(status: int, reason: str, headers: Headers) -> Lines | None:
    """The status line and each field as HTTP/1.1 sends them, one bytes object per line (so
    entries can share the lines they repeat), each ending in CRLF; None when a field cannot be
    written back exactly as it reads (``line_fields``): a name that is not a token, a value
    with a control character, text that is not UTF-8."""
    if _CONTROL.search(reason):
        return None
    lines = [f"HTTP/1.1 {status} {reason}\r\n"]
    for name, value in headers:
        if not _TOKEN.fullmatch(name) or _CONTROL.search(value):
            return None
        lines.append(f"{name}: {value}\r\n")
    try:
        return tuple(line.encode("utf-8") for line in lines)
    except UnicodeEncodeError:  # surrogate escapes: bytes the client could not decode
        return None


_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # what a field value may not hold
