"""Access log lines (decision 0019): one per response, as "combined" or as JSON.

``combined`` is the NCSA combined format every log tool reads (nginx's and Apache's
``combined``), with four fields after it, as nginx configs for caches usually add them:

    CLIENT - - [TIME] "METHOD TARGET PROTOCOL" STATUS BYTES "REFERER" "USER-AGENT"
        "HOST" CACHE ORIGIN TOTAL                            (one line)

TIME is UTC (``+0000``); BYTES is what was sent, head included (nginx's ``$bytes_sent``);
CACHE is what the cache did (``cache_label``); ORIGIN is the seconds to the origin's response
headers, ``-`` when this request asked no origin; TOTAL the seconds from the request's head
to the last byte of the answer. Text from the request is escaped as nginx escapes it: ``"``,
``\\`` and bytes outside printable ASCII as ``\\xHH``, so a line is always one line.

``json`` writes the same fields as one JSON object per line (keys in ``JSON_KEYS``).

Sans-I/O: the record carries its own time.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime

FORMATS = ("combined", "json")
JSON_KEYS = (
    "time",
    "client",
    "method",
    "host",
    "target",
    "protocol",
    "status",
    "bytes_sent",
    "cache",
    "origin_seconds",
    "total_seconds",
    "referer",
    "user_agent",
    "rules",
)


@dataclass(frozen=True, slots=True)
class Entry:
    """One response, as the log shows it."""

    time: float  # wall-clock seconds when the answer was sent
    client: str
    method: str
    host: str | None
    target: str
    protocol: str  # HTTP/1.1
    status: int
    bytes_sent: int
    cache: str  # cache_label
    origin_seconds: float | None
    total_seconds: float
    referer: str | None
    user_agent: str | None
    rules: str | None = None  # the cache rules that applied (rules_of), JSON only


_RULES = re.compile(r'rules=([^";]+)')


def rules_of(cache_status: str | None) -> str | None:
    """The cache rules a response's Cache-Status ``detail`` names (decision 0033), as
    ``a,b``; None when none applied."""
    if not cache_status or "rules=" not in cache_status:
        return None
    found = _RULES.findall(cache_status)  # this cache's member is the last
    return found[-1] if found else None


def cache_label(cache_status: str | None) -> str:
    """What the cache did, read off this proxy's Cache-Status member (RFC 9211), in the
    outcomes of ``cdn_proxy_requests_total``: HIT; STALE (a stored response was revalidated,
    or served stale); MISS; BYPASS (not a cache lookup: fwd=method or bypass); ``-`` when
    the response has none (the proxy's own 421 and 400: no cache was asked)."""
    if not cache_status:
        return "-"
    member = cache_status.rpartition(",")[2]
    params = {p.strip().partition("=")[0]: p.strip().partition("=")[2] for p in member.split(";")}
    if "hit" in params:
        return "STALE" if "stale" in params.get("detail", "") else "HIT"
    fwd = params.get("fwd", "")
    if fwd == "stale":
        return "STALE"
    if fwd in ("bypass", "method"):
        return "BYPASS"
    return "MISS"


_UNSAFE = re.compile(r'["\\\x00-\x1f\x7f-\U0010ffff]')


def _escaped(text: str | None) -> str:
    if not text:
        return "-"
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return text  # the usual case, decided by C string methods alone
    return _UNSAFE.sub(_escape_match, text)


def _escape_match(match: re.Match[str]) -> str:
    return "".join(f"\\x{byte:02X}" for byte in match.group().encode("utf-8", "surrogateescape"))


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.6f}"


def combined(entry: Entry, clock: str) -> str:
    """The combined line of ``entry``; ``clock`` is its time as ``time_local`` shows it."""
    request = f"{entry.method} {entry.target} {entry.protocol}"
    return (
        f"{_escaped(entry.client)} - - [{clock}] "
        f'"{_escaped(request)}" {entry.status} {entry.bytes_sent} '
        f'"{_escaped(entry.referer)}" "{_escaped(entry.user_agent)}" "{_escaped(entry.host)}" '
        f"{entry.cache} {_seconds(entry.origin_seconds)} {_seconds(entry.total_seconds)}\n"
    )


def time_local(when: float) -> str:
    """``10/Oct/2000:13:55:36 +0000``: the combined format's time, in UTC."""
    return datetime.fromtimestamp(int(when), UTC).strftime("%d/%b/%Y:%H:%M:%S +0000")


def json_line(entry: Entry) -> str:
    stamp = datetime.fromtimestamp(entry.time, UTC).isoformat(timespec="milliseconds")
    fields = {
        "time": stamp.replace("+00:00", "Z"),
        "client": entry.client,
        "method": entry.method,
        "host": entry.host,
        "target": entry.target,
        "protocol": entry.protocol,
        "status": entry.status,
        "bytes_sent": entry.bytes_sent,
        "cache": entry.cache,
        "origin_seconds": None if entry.origin_seconds is None else round(entry.origin_seconds, 6),
        "total_seconds": round(entry.total_seconds, 6),
        "referer": entry.referer,
        "user_agent": entry.user_agent,
        "rules": entry.rules,
    }
    # ensure_ascii: any byte a client sent stays one line of ASCII
    return json.dumps(fields, ensure_ascii=True, separators=(",", ":")) + "\n"


class Formatter:
    """Lines in one format, remembering the last second's ``time_local``."""

    __slots__ = ("_clock", "_json", "_second")

    def __init__(self, format: str) -> None:
        if format not in FORMATS:
            raise ValueError(f"unknown access log format {format!r}")
        self._json = format == "json"
        self._second = -1
        self._clock = ""

    def line(self, entry: Entry) -> str:
        if self._json:
            return json_line(entry)
        second = int(entry.time)
        if second != self._second:
            self._second, self._clock = second, time_local(second)
        return combined(entry, self._clock)
