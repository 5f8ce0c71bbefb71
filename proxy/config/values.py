"""The values a config key may take: each key's check, which converts its TOML value or
raises a ConfigError naming the key. ``proxy/config/model.py`` names a key's check in its field's
``Annotated`` metadata (``Annotated[float, check.seconds]``); a check takes the key's full
name and its value, None when the key was left out (TOML has no null).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

from proxy.core.domains import InvalidDomain, normalise_domain
from proxy.core.http.compression import check_compress, check_compress_types
from proxy.core.http.encodings import check_encodings
from proxy.core.http.forwarded import HEADER_KINDS, Network, parse_networks
from proxy.core.http.upgrade import check_allowlist
from proxy.core.purge.purges import DEFAULT_TAG_HEADERS
from proxy.errors import ConfigError

_V = TypeVar("_V")
_SIZE = re.compile(r"^\s*([0-9]+)\s*(B|KB|KiB|MB|MiB|GB|GiB|TB|TiB)?\s*$")
_UNITS = {
    None: 1,
    "B": 1,
    "KB": 1000,
    "KiB": 1024,
    "MB": 1000**2,
    "MiB": 1024**2,
    "GB": 1000**3,
    "GiB": 1024**3,
    "TB": 1000**4,  # cache.disk_max_bytes is a disk's size
    "TiB": 1024**4,
}
# An HTTP/2 setting's value is 32 bits (RFC 9113 §6.5.1): hyperframe cannot send a larger one.
_HTTP2_SETTING_MAX = 2**32 - 1
# What a host in an origin URL may not hold: white space and controls (checked apart), and
# what no host name or address has, which urlsplit leaves in (percent-escapes included).
_NOT_IN_HOSTS = frozenset('"<>\\^`{|}%')


@dataclass(frozen=True, slots=True)
class Listen:
    host: str
    port: int

    def __str__(self) -> str:
        """As it is written in the config: an IPv6 host in brackets (``[::1]:8080``)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def listen(key: str, value: object) -> Listen:
    if not isinstance(value, str):
        raise ConfigError(key, "is required and must be a string such as '127.0.0.1:8080'")
    host, sep, port_text = value.rpartition(":")
    host = host.strip("[]")
    # isascii: str.isdigit() is true of other scripts' digits, which int() reads too
    digits = port_text.isascii() and port_text.isdigit()
    if not sep or not host or not digits or int(port_text) > 65535:
        raise ConfigError(key, f"{value!r} must be HOST:PORT with a port from 0 to 65535")
    return Listen(host=host, port=int(port_text))


def size(key: str, value: object) -> int:
    if value is None:
        raise ConfigError(key, "is required")
    if isinstance(value, bool):
        raise ConfigError(key, "must be a size such as 256MiB")
    if isinstance(value, int):
        amount = value
    elif isinstance(value, str) and (match := _SIZE.match(value)):
        amount = int(match.group(1)) * _UNITS[match.group(2)]
    else:
        raise ConfigError(key, f"{value!r} is not a size (use bytes or a unit: KiB, MiB, GiB, TiB)")
    if amount <= 0:
        raise ConfigError(key, "must be greater than zero")
    return amount


def seconds(key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(key, "must be a number of seconds greater than zero")
    return _finite(key, value)


def seconds_or_zero(key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(key, "must be a number of seconds, 0 or more")
    return _finite(key, value)


def _finite(key: str, value: int | float) -> float:
    """TOML has nan and inf, and nan passes every comparison above: as a timeout either
    reaches the event loop, which cannot schedule nan (every request would fail)."""
    if not math.isfinite(value):
        raise ConfigError(key, f"must be a finite number of seconds, not {value}")
    return float(value)


def delay_cap(key: str, value: object) -> float:
    given = seconds(key, value)
    if given < 1:
        raise ConfigError(key, "must be at least 1 second")
    return given


def _whole(key: str, value: object, low: int, high: int, problem: str) -> int:
    """``value`` if a whole number from ``low`` to ``high``; else ConfigError(key, problem)."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(key, problem)
    return value


def workers(key: str, value: object) -> int:
    if value == "auto":
        return len(os.sched_getaffinity(0))
    return _whole(key, value, 1, 256, 'must be a whole number from 1 to 256, or "auto"')


def replicas(key: str, value: object) -> int:
    return _whole(key, value, 0, 16, "must be a whole number from 0 to 16")


def max_connections(key: str, value: object) -> int | None:
    if value == "auto":
        return None
    return _whole(key, value, 1, 10_000_000, 'must be a whole number from 1 to 10000000, or "auto"')


def per_client_connections(key: str, value: object) -> int | None:
    """A per-client-address connection limit: "auto" (None), 0 (off), or a count."""
    if value == "auto":
        return None
    return _whole(
        key, value, 0, 10_000_000, 'must be a whole number from 0 (no limit) to 10000000, or "auto"'
    )


def rate(key: str, value: object) -> int:
    """Bytes per second, as a size (500, "1KiB"), or 0 for none."""
    if value == 0 and not isinstance(value, bool):
        return 0
    return size(key, value)


def networks(key: str, value: object) -> tuple[Network, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(key, 'must be a list of CIDRs such as ["10.0.0.0/8", "::1"]')
    try:
        return parse_networks(value)
    except ValueError as exc:
        raise ConfigError(key, str(exc)) from None


def forwarded_header(key: str, value: object) -> str:
    if value not in HEADER_KINDS:
        raise ConfigError(key, f"must be one of: {', '.join(HEADER_KINDS)}")
    return str(value)


def access_log(key: str, value: object) -> str | None:
    if value is False:
        return None
    if not isinstance(value, str) or not value:
        raise ConfigError(key, 'must be "-" (standard output), a file path, or false')
    return value


def access_log_format(key: str, value: object) -> str:
    if value not in ("combined", "json"):
        raise ConfigError(key, 'must be "combined" or "json"')
    return str(value)


def fleet_url(key: str, value: object) -> str:
    if not isinstance(value, str) or urlsplit(value).scheme not in ("redis", "rediss", "unix"):
        raise ConfigError(key, f"{value!r} must be a redis://, rediss:// or unix:// URL")
    parts = urlsplit(value)
    if parts.scheme == "unix" and not parts.path:
        raise ConfigError(key, f"{value!r} names no socket path")
    if parts.scheme == "unix" and parts.netloc:
        # The Valkey client reads only the path: unix://home/v.sock would be /v.sock.
        raise ConfigError(
            key,
            f"{value!r} would be the socket {parts.path!r}: the path starts after three "
            f"slashes (unix:///{parts.netloc}{parts.path})",
        )
    if parts.scheme != "unix" and not parts.hostname:
        raise ConfigError(key, f"{value!r} has no host")
    try:
        parts.port  # noqa: B018 -- urlsplit checks the port only when it is read
    except ValueError:
        raise ConfigError(key, f"{value!r} has a bad port") from None
    if parts.scheme != "unix" and not re.fullmatch(r"/?|/[0-9]+", parts.path):
        # The client drops a path that is not a number (database 0) and joins the digits of
        # several parts: redis://h/1/2 is database 12.
        raise ConfigError(key, f"{value!r}: the path must be a database number, as in /0")
    return value


def _reasoned(check: Callable[[object], _V]) -> Callable[[str, object], _V]:
    """A key's check from a core check that raises ValueError with the reason (core cannot
    know the key's name): the same reason, as a ConfigError naming the key."""

    def checked(key: str, value: object) -> _V:
        try:
            return check(value)
        except ValueError as exc:
            raise ConfigError(key, str(exc)) from None

    return checked


encodings = _reasoned(check_encodings)
compress = _reasoned(check_compress)
compress_types = _reasoned(check_compress_types)
upgrade_protocols = _reasoned(check_allowlist)


def tag_headers(key: str, value: object) -> tuple[str, ...]:
    known = {name.lower(): name for name in DEFAULT_TAG_HEADERS}
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(key, f"must be a list such as {json.dumps(list(DEFAULT_TAG_HEADERS))}")
    names = [known.get(v.lower()) for v in value]
    if None in names or len(set(names)) != len(names):
        listed = " and ".join(f'"{name}"' for name in DEFAULT_TAG_HEADERS)
        raise ConfigError(key, f"may list {listed}, each at most once, and nothing else")
    return tuple(name for name in names if name is not None)


def count(key: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(key, "must be a whole number greater than zero")
    return value


def count_or_zero(key: str, value: object) -> int:
    """A count where 0 means no limit."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(key, "must be a whole number, 0 or more")
    return value


def _http2_setting(key: str, amount: int) -> int:
    if amount > _HTTP2_SETTING_MAX:
        raise ConfigError(
            key, f"must be at most {_HTTP2_SETTING_MAX} (an HTTP/2 setting is 32 bits)"
        )
    return amount


def http2_count(key: str, value: object) -> int:
    """A count the edge sends as an HTTP/2 setting (SETTINGS_MAX_CONCURRENT_STREAMS)."""
    return _http2_setting(key, count(key, value))


def http2_size(key: str, value: object) -> int:
    """A size the edge sends as an HTTP/2 setting (SETTINGS_MAX_HEADER_LIST_SIZE)."""
    return _http2_setting(key, size(key, value))


def flag(key: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(key, "must be true or false")
    return value


def token_text(key: str, value: object) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", value):
        raise ConfigError(key, "must be 1-64 letters, digits, '.', '_' or '-'")
    return value


def path(key: str, value: object) -> Path:
    if value is None:
        raise ConfigError(key, "is required")
    if not isinstance(value, str) or not value:
        raise ConfigError(key, "must be a non-empty string")
    return Path(value)


def domain_name(key: str, value: object) -> str:
    if not isinstance(value, str):
        raise ConfigError(key, "is required and must be a string")
    try:
        return normalise_domain(value)
    except InvalidDomain as exc:
        raise ConfigError(key, f"{value!r} is not a host name: {exc}") from None


def advertise_url(key: str, value: object) -> str:
    """Where the fleet's other nodes reach this node's edge (peer fills, decision 0047):
    ``http://host:port``, or "" for the edge's listen address. Plain HTTP only: peers talk
    on the fleet's own network."""
    if value == "":
        return ""
    url = origin(key, value)
    if not url.startswith("http://"):
        raise ConfigError(key, f"{value!r} must start with http:// (peers talk plain HTTP)")
    return url


def origin(key: str, value: object) -> str:
    if not isinstance(value, str):
        raise ConfigError(key, "is required and must be a URL such as http://127.0.0.1:9000")
    if any(c.isspace() or not c.isprintable() for c in value):
        # urlsplit drops tabs and line feeds (WHATWG): "exa\tmple" would become "example"
        raise ConfigError(key, f"{value!r} has white space or a control character")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https"):
        raise ConfigError(key, f"{value!r} must start with http:// or https://")
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(key, f"{value!r} has a bad port") from None
    if not parts.hostname:
        raise ConfigError(key, f"{value!r} has no host")
    if any(c in _NOT_IN_HOSTS for c in parts.hostname):
        raise ConfigError(key, f"{value!r} has a bad host name")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise ConfigError(key, f"{value!r} must be scheme://host[:port] with no path or user")
    host = parts.hostname
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")
