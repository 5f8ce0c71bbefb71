"""The [[domains]] tables: one origin (or several, balanced and probed) per domain name.

Built by ``build_domains`` from the TOML list; proxy/config/model.py resolves their TLS paths.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from proxy.config import values as check
from proxy.config.rules import rules as checked_rules
from proxy.config.tables import build
from proxy.core.cache.rules import RuleSet
from proxy.core.http.balance import BALANCES
from proxy.core.http.compression import DEFAULT_COMPRESS_TYPES, DEFAULT_MIN_BYTES
from proxy.core.http.compression import DEFAULT_MAX_BYTES as DEFAULT_COMPRESS_MAX_BYTES
from proxy.core.http.encodings import DEFAULT_ENCODINGS
from proxy.core.purge.purges import DEFAULT_TAG_HEADERS
from proxy.errors import ConfigError


@dataclass(frozen=True, slots=True)
class DomainConfig:
    name: Annotated[str, check.domain_name]
    # scheme://host[:port], no path: the one origin server, or the first of ``origins``
    # (which _domains fills from it); one of the two keys is required (decision 0034).
    origin: Annotated[str, _one_origin] = ""
    heuristic_freshness: Annotated[bool, check.flag] = False
    connect_timeout: Annotated[float, check.seconds] = 5.0
    read_timeout: Annotated[float, check.seconds] = 30.0
    # Seconds past expiry a stored response may still be served while the origin cannot be
    # reached (RFC 9111 §4.2.4) or answers 500, 502, 503 or 504 (RFC 5861 §4), unless the
    # response forbids it. Off (0) unless configured: the response's own stale-if-error wins.
    stale_if_error: Annotated[float, check.seconds_or_zero] = 0.0
    # Connections to each origin server this edge process holds at once for the domain, and
    # how long a request waits for one before it is answered 503 (decisions 0015, 0034).
    origin_connections: Annotated[int, check.count] = 256
    origin_queue_timeout: Annotated[float, check.seconds] = 5.0
    # Upgrade tunnels (WebSocket) this edge process holds at once to the domain's origin, each
    # on a connection of its own, beside origin_connections: past it a new one is answered 503
    # (decision 0032).
    max_tunnels: Annotated[int, check.count] = 256
    # Content codings the origin is asked for, in order of preference; each request's
    # Accept-Encoding is reduced to the first one it accepts, else identity (decision 0023).
    encodings: Annotated[tuple[str, ...], check.encodings] = DEFAULT_ENCODINGS
    # Compression at the edge (decision 0035): an uncompressed, cacheable 200 of one of
    # compress_types, at least compress_min_bytes long, is stored once per coding listed (and
    # as sent), and requests are read against this list instead of encodings. Off ([]).
    compress: Annotated[tuple[str, ...], check.compress] = ()
    compress_types: Annotated[tuple[str, ...], check.compress_types] = DEFAULT_COMPRESS_TYPES
    compress_min_bytes: Annotated[int, check.size] = DEFAULT_MIN_BYTES
    # Bodies over this are stored as sent (decision 0046: the CPU of a miss is bounded).
    compress_max_bytes: Annotated[int, check.size] = DEFAULT_COMPRESS_MAX_BYTES
    # TLS (decision 0018): this domain's certificate (PEM, its chain after it) and key for the
    # edge's tls_listen, chosen by SNI; and the CA bundle its https:// origin is verified
    # against instead of the system store. Paths are relative to the config file.
    tls_cert: Annotated[Path | None, check.path] = None
    tls_key: Annotated[Path | None, check.path] = None
    origin_ca: Annotated[Path | None, check.path] = None
    # Response fields read as the origin's tags for tag purges (decision 0024), and removed
    # before responses reach clients: "Surrogate-Key" (space-separated), "Cache-Tag"
    # (comma-separated), both, or none ([]).
    tag_headers: Annotated[tuple[str, ...], check.tag_headers] = DEFAULT_TAG_HEADERS
    # Several origin servers (decision 0034): balanced by ``balance``; ``backup_origins`` get
    # requests only while every one of ``origins`` is down.
    origins: Annotated[tuple[str, ...], _origin_list] = ()
    backup_origins: Annotated[tuple[str, ...], _backup_list] = ()
    balance: Annotated[str, _balance] = "round_robin"
    health_check: Annotated[HealthCheckConfig | None, _health_check] = None
    # Cache rules ([[domains.rules]], decision 0033): compiled once here; None: no rules, and
    # the edge takes exactly the path it takes without them.
    rules: Annotated[RuleSet | None, checked_rules] = None
    # Early Hints on hits (decision 0049): a stored answer's ``Link: rel=preload`` (and
    # preconnect) fields are sent as a 103 before it, as Cloudflare does. Off: a hit then takes
    # the fast path, and sends no interim answer (the origin's own 103s are relayed either way).
    early_hints: Annotated[bool, check.flag] = False


@dataclass(frozen=True, slots=True)
class HealthCheckConfig:
    """[domains.health_check]: each edge process probes each origin server (decision 0034)."""

    path: Annotated[str, _probe_path] = "/"
    interval: Annotated[float, _duration] = 5.0
    timeout: Annotated[float, _duration] = 2.0
    fails: Annotated[int, check.count] = 2  # consecutive failures that mark a server down
    passes: Annotated[int, check.count] = 2  # consecutive probe successes that bring it back
    # GET (the default: what an origin's health page is written for; its body is not read)
    # or HEAD (the headers only, as /readyz's own checks ask).
    method: Annotated[str, _probe_method] = "GET"


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _duration(key: str, value: object) -> float:
    """Seconds, as a number or a string such as "500ms", "2s", "1m"."""
    if isinstance(value, str):
        match = _DURATION.fullmatch(value.strip())
        if match is None or float(match[1]) <= 0:
            raise ConfigError(key, f'{value!r} is not a duration such as "2s" or "500ms"')
        return float(match[1]) * _UNITS[match[2]]
    return check.seconds(key, value)


def _one_origin(key: str, value: object) -> str:
    return check.origin(key, value)


def _origin_list(key: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise ConfigError(key, 'must be a non-empty list such as ["http://127.0.0.1:9001"]')
    urls = tuple(check.origin(f"{key}[{i}]", v) for i, v in enumerate(value))
    if len(set(urls)) != len(urls):
        raise ConfigError(key, "names an origin server twice")
    return urls


def _backup_list(key: str, value: object) -> tuple[str, ...]:
    return () if value == [] else _origin_list(key, value)


def _balance(key: str, value: object) -> str:
    if value not in BALANCES:
        raise ConfigError(key, f"must be one of: {', '.join(BALANCES)}")
    return str(value)


def _probe_path(key: str, value: object) -> str:
    if (
        not isinstance(value, str)
        or not value.startswith("/")
        or any(c.isspace() or ord(c) < 0x21 or ord(c) == 0x7F for c in value)
    ):
        raise ConfigError(key, "must be a path starting with / with no spaces or controls")
    return value


def _probe_method(key: str, value: object) -> str:
    if not isinstance(value, str) or value.upper() not in ("GET", "HEAD"):
        raise ConfigError(key, f"must be GET or HEAD (default GET), not {value!r}")
    return value.upper()


def _health_check(key: str, value: object) -> HealthCheckConfig:
    """The table, with a ``timeout`` longer than the ``interval`` clamped to it, as HAProxy
    clamps its check timeout to ``inter`` (issue 34; docs/operations.md "Health checks"): a
    probe never waits longer than the period it belongs to."""
    if not isinstance(value, dict):
        raise ConfigError(key, "must be a table")
    health = build(HealthCheckConfig, key, value)
    return dataclasses.replace(health, timeout=min(health.timeout, health.interval))


def build_domains(raw: object) -> tuple[DomainConfig, ...]:
    if not isinstance(raw, list) or not raw:
        raise ConfigError("domains", "needs at least one [[domains]] table")
    domains: dict[str, DomainConfig] = {}
    for index, table in enumerate(raw):
        where = f"domains[{index}]"
        if not isinstance(table, dict):
            raise ConfigError(where, "must be a table")
        domain = _with_origins(build(DomainConfig, where, table), where)
        if domain.name in domains:
            raise ConfigError(f"{where}.name", f"{domain.name!r} is configured twice")
        domains[domain.name] = domain
    return tuple(domains.values())


def _with_origins(domain: DomainConfig, where: str) -> DomainConfig:
    """``origin`` and ``origins`` made one: ``origins`` lists every primary server and
    ``origin`` is its first (what tunnels and the single-origin code read)."""
    if domain.origin and domain.origins:
        raise ConfigError(f"{where}.origins", "give either origin or origins, not both")
    if not domain.origin and not domain.origins:
        raise ConfigError(
            f"{where}.origin",
            "is required and must be a URL such as http://127.0.0.1:9000 (or give origins)",
        )
    origins = domain.origins or (domain.origin,)
    if set(origins) & set(domain.backup_origins):
        raise ConfigError(f"{where}.backup_origins", "names a server also in origins")
    schemes = {url.partition(":")[0] for url in origins + domain.backup_origins}
    if len(schemes) > 1 and domain.origin_ca is not None:
        raise ConfigError(f"{where}.origin_ca", "needs every origin server to be https://")
    return dataclasses.replace(domain, origin=origins[0], origins=origins)
