"""Configuration: a TOML file turned into frozen dataclasses, once, at start-up.

This is the only module that reads files or the environment. Every problem is reported as one
ConfigError naming the key (``domains[1].origin: ...``); nothing is started before the whole
file is known to be good.

Relative paths (``state.path``) are resolved against the directory of the config file, so the
server and the ``token`` commands agree on the same database whatever the working directory.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from proxy.core.domains import InvalidDomain, normalise_domain
from proxy.errors import ConfigError

_SIZE = re.compile(r"^\s*([0-9]+)\s*(B|KB|KiB|MB|MiB|GB|GiB)?\s*$")
_UNITS = {
    None: 1,
    "B": 1,
    "KB": 1000,
    "KiB": 1024,
    "MB": 1000**2,
    "MiB": 1024**2,
    "GB": 1000**3,
    "GiB": 1024**3,
}


@dataclass(frozen=True, slots=True)
class Listen:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class DomainConfig:
    name: str
    origin: str  # scheme://host[:port], no path
    heuristic_freshness: bool = False
    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    # Seconds past expiry a stored response may still be served while the origin cannot be
    # reached (RFC 9111 §4.2.4), unless the response forbids it. Off (0) unless configured:
    # the origin's own stale-if-error (RFC 5861) applies either way.
    stale_if_error: float = 0.0


@dataclass(frozen=True, slots=True)
class EdgeConfig:
    listen: Listen
    shutdown_timeout: float = 30.0
    via: str = "cdn-proxy"


@dataclass(frozen=True, slots=True)
class ApiConfig:
    listen: Listen
    max_body_bytes: int = 4096
    auth_failures_allowed: int = 10
    auth_failure_window: float = 60.0


@dataclass(frozen=True, slots=True)
class CacheConfig:
    max_bytes: int
    max_object_bytes: int
    name: str = "cdn-proxy"


@dataclass(frozen=True, slots=True)
class StateConfig:
    path: Path
    audit_max_rows: int = 100_000


@dataclass(frozen=True, slots=True)
class DashboardConfig:
    """The dashboard on the API listener: sessions and sign-in throttling."""

    session_idle_timeout: float = 3600.0  # seconds without a request that end a session
    session_lifetime: float = 28_800.0  # seconds after sign-in that end it regardless
    signin_failures_allowed: int = 5  # per user name and per address, before delays start
    signin_max_delay: float = 900.0  # the cap of the doubling delay, in seconds
    # The listener speaks plain HTTP; true marks the session cookie Secure, for when the
    # dashboard is reached over HTTPS through a TLS-terminating proxy.
    secure_cookie: bool = False


@dataclass(frozen=True, slots=True)
class Config:
    edge: EdgeConfig
    api: ApiConfig
    cache: CacheConfig
    state: StateConfig
    domains: tuple[DomainConfig, ...]
    by_name: Mapping[str, DomainConfig] = field(repr=False, compare=False)
    dashboard: DashboardConfig = field(default_factory=DashboardConfig)

    def domain(self, name: str) -> DomainConfig | None:
        return self.by_name.get(name)


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and check a config file; raise ConfigError naming the first bad key."""
    file = Path(path)
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(str(file), "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(file), f"cannot be read ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(file), f"is not valid TOML ({exc})") from None
    return parse_config(data, base_dir=file.resolve().parent)


def parse_config(data: Mapping[str, Any], *, base_dir: Path) -> Config:
    """Build a Config from already-parsed TOML data."""
    _only_keys("", data, {"edge", "api", "cache", "state", "dashboard", "domains"})
    edge = _table(data, "edge")
    api = _table(data, "api")
    cache = _table(data, "cache")
    state = _table(data, "state")

    _only_keys("edge", edge, {"listen", "shutdown_timeout", "via"})
    _only_keys(
        "api", api, {"listen", "max_body_bytes", "auth_failures_allowed", "auth_failure_window"}
    )
    _only_keys("cache", cache, {"max_bytes", "max_object_bytes", "name"})
    _only_keys("state", state, {"path", "audit_max_rows"})

    edge_cfg = EdgeConfig(
        listen=_listen("edge.listen", edge.get("listen")),
        shutdown_timeout=_number("edge.shutdown_timeout", edge.get("shutdown_timeout", 30.0)),
        via=_token_text("edge.via", edge.get("via", "cdn-proxy")),
    )
    api_cfg = ApiConfig(
        listen=_listen("api.listen", api.get("listen")),
        max_body_bytes=_size("api.max_body_bytes", api.get("max_body_bytes", 4096)),
        auth_failures_allowed=_count(
            "api.auth_failures_allowed", api.get("auth_failures_allowed", 10)
        ),
        auth_failure_window=_number("api.auth_failure_window", api.get("auth_failure_window", 60)),
    )
    if api_cfg.listen == edge_cfg.listen and api_cfg.listen.port != 0:
        raise ConfigError("api.listen", "must differ from edge.listen")

    if "max_bytes" not in cache:
        raise ConfigError("cache.max_bytes", "is required")
    max_bytes = _size("cache.max_bytes", cache["max_bytes"])
    max_object = _size(
        "cache.max_object_bytes", cache.get("max_object_bytes", min(max_bytes, 8 * 1024**2))
    )
    if max_object > max_bytes:
        raise ConfigError("cache.max_object_bytes", "must not be larger than cache.max_bytes")
    cache_cfg = CacheConfig(
        max_bytes=max_bytes,
        max_object_bytes=max_object,
        name=_token_text("cache.name", cache.get("name", "cdn-proxy")),
    )

    if "path" not in state:
        raise ConfigError("state.path", "is required")
    raw_path = state["path"]
    if not isinstance(raw_path, str) or not raw_path:
        raise ConfigError("state.path", "must be a non-empty string")
    state_path = Path(raw_path)
    if not state_path.is_absolute():
        state_path = base_dir / state_path
    state_cfg = StateConfig(
        path=state_path,
        audit_max_rows=_count("state.audit_max_rows", state.get("audit_max_rows", 100_000)),
    )

    raw_domains = data.get("domains", [])
    if not isinstance(raw_domains, list) or not raw_domains:
        raise ConfigError("domains", "needs at least one [[domains]] table")
    domains: list[DomainConfig] = []
    by_name: dict[str, DomainConfig] = {}
    for index, raw in enumerate(raw_domains):
        where = f"domains[{index}]"
        if not isinstance(raw, dict):
            raise ConfigError(where, "must be a table")
        domain = _domain(where, raw)
        if domain.name in by_name:
            raise ConfigError(f"{where}.name", f"{domain.name!r} is configured twice")
        domains.append(domain)
        by_name[domain.name] = domain

    return Config(
        edge=edge_cfg,
        api=api_cfg,
        cache=cache_cfg,
        state=state_cfg,
        domains=tuple(domains),
        by_name=by_name,
        dashboard=_dashboard(data),
    )


def _dashboard(data: Mapping[str, Any]) -> DashboardConfig:
    raw = data.get("dashboard", {})  # the whole table is optional
    if not isinstance(raw, dict):
        raise ConfigError("dashboard", "must be a table")
    defaults = DashboardConfig()
    _only_keys(
        "dashboard",
        raw,
        {
            "session_idle_timeout",
            "session_lifetime",
            "signin_failures_allowed",
            "signin_max_delay",
            "secure_cookie",
        },
    )
    secure = raw.get("secure_cookie", defaults.secure_cookie)
    if not isinstance(secure, bool):
        raise ConfigError("dashboard.secure_cookie", "must be true or false")
    config = DashboardConfig(
        session_idle_timeout=_number(
            "dashboard.session_idle_timeout",
            raw.get("session_idle_timeout", defaults.session_idle_timeout),
        ),
        session_lifetime=_number(
            "dashboard.session_lifetime", raw.get("session_lifetime", defaults.session_lifetime)
        ),
        signin_failures_allowed=_count(
            "dashboard.signin_failures_allowed",
            raw.get("signin_failures_allowed", defaults.signin_failures_allowed),
        ),
        signin_max_delay=_number(
            "dashboard.signin_max_delay", raw.get("signin_max_delay", defaults.signin_max_delay)
        ),
        secure_cookie=secure,
    )
    if config.session_idle_timeout > config.session_lifetime:
        raise ConfigError(
            "dashboard.session_idle_timeout", "must not be longer than dashboard.session_lifetime"
        )
    if config.signin_max_delay < 1:
        raise ConfigError("dashboard.signin_max_delay", "must be at least 1 second")
    return config


def _domain(where: str, raw: Mapping[str, Any]) -> DomainConfig:
    _only_keys(
        where,
        raw,
        {
            "name",
            "origin",
            "heuristic_freshness",
            "connect_timeout",
            "read_timeout",
            "stale_if_error",
        },
    )
    name = raw.get("name")
    if not isinstance(name, str):
        raise ConfigError(f"{where}.name", "is required and must be a string")
    try:
        normal = normalise_domain(name)
    except InvalidDomain as exc:
        raise ConfigError(f"{where}.name", f"{name!r} is not a host name: {exc}") from None
    heuristic = raw.get("heuristic_freshness", False)
    if not isinstance(heuristic, bool):
        raise ConfigError(f"{where}.heuristic_freshness", "must be true or false")
    return DomainConfig(
        name=normal,
        origin=_origin(f"{where}.origin", raw.get("origin")),
        heuristic_freshness=heuristic,
        connect_timeout=_number(f"{where}.connect_timeout", raw.get("connect_timeout", 5.0)),
        read_timeout=_number(f"{where}.read_timeout", raw.get("read_timeout", 30.0)),
        stale_if_error=_seconds_or_zero(f"{where}.stale_if_error", raw.get("stale_if_error", 0.0)),
    )


def _origin(key: str, value: object) -> str:
    if not isinstance(value, str):
        raise ConfigError(key, "is required and must be a URL such as http://127.0.0.1:9000")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https"):
        raise ConfigError(key, f"{value!r} must start with http:// or https://")
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(key, f"{value!r} has a bad port") from None
    if not parts.hostname:
        raise ConfigError(key, f"{value!r} has no host")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise ConfigError(key, f"{value!r} must be scheme://host[:port] with no path or user")
    host = parts.hostname
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")


def _table(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = data.get(key)
    if value is None:
        raise ConfigError(key, f"the [{key}] table is required")
    if not isinstance(value, dict):
        raise ConfigError(key, "must be a table")
    return value


def _only_keys(where: str, table: Mapping[str, Any], allowed: set[str]) -> None:
    for key in table:
        if key not in allowed:
            name = f"{where}.{key}" if where else key
            raise ConfigError(name, f"unknown key (expected one of: {', '.join(sorted(allowed))})")


def _listen(key: str, value: object) -> Listen:
    if not isinstance(value, str):
        raise ConfigError(key, "is required and must be a string such as '127.0.0.1:8080'")
    host, sep, port_text = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise ConfigError(key, f"{value!r} must be HOST:PORT with a port from 0 to 65535")
    return Listen(host=host, port=int(port_text))


def _size(key: str, value: object) -> int:
    if isinstance(value, bool):
        raise ConfigError(key, "must be a size such as 256MiB")
    if isinstance(value, int):
        size = value
    elif isinstance(value, str) and (match := _SIZE.match(value)):
        size = int(match.group(1)) * _UNITS[match.group(2)]
    else:
        raise ConfigError(key, f"{value!r} is not a size (use bytes or a unit: KiB, MiB, GiB)")
    if size <= 0:
        raise ConfigError(key, "must be greater than zero")
    return size


def _number(key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(key, "must be a number of seconds greater than zero")
    return float(value)


def _seconds_or_zero(key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(key, "must be a number of seconds, 0 or more")
    return float(value)


def _count(key: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(key, "must be a whole number greater than zero")
    return value


def _token_text(key: str, value: object) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", value):
        raise ConfigError(key, "must be 1-64 letters, digits, '.', '_' or '-'")
    return value


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """Where the ``purge`` client sends its request, from flags or the environment."""

    url: str | None
    token: str | None


def client_settings(url: str | None, token: str | None) -> ClientSettings:
    """Flags win; CDN_PROXY_URL and CDN_PROXY_TOKEN fill what the flags leave out."""
    return ClientSettings(
        url=url or os.environ.get("CDN_PROXY_URL") or None,
        token=token or os.environ.get("CDN_PROXY_TOKEN") or None,
    )
