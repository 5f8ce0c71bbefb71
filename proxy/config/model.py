"""Configuration: a TOML file turned into frozen dataclasses, once, at start-up.

This is the only module that reads files or the environment. Every problem is reported as one
ConfigError naming the key (``domains[1].origin: ...``); nothing is started before the whole
file is known to be good.

Each table is a frozen dataclass whose fields are its keys. A field's ``Annotated`` metadata is
the function that checks and converts its value (``config_values.py``, imported as ``check``),
and the field's default is the key's default, so adding a key is one line and ``_build`` does
the rest: unknown keys, required keys, defaults.
Rules between keys (two listeners, two limits) sit in the function that builds their table.
Decision 0012 says why this is hand-written rather than msgspec or pydantic.

Relative paths (``state.path``) are resolved against the directory of the config file, so the
server and the ``token`` commands agree on the same database whatever the working directory.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import re
import socket
import ssl
import tomllib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, get_type_hints

from proxy.config import values as check
from proxy.config.rules import rules as checked_rules
from proxy.config.tls import load_origin_ca, load_server_pair
from proxy.config.values import Listen
from proxy.core.cache.rules import RuleSet
from proxy.core.http.balance import BALANCES
from proxy.core.http.compression import DEFAULT_COMPRESS_TYPES, DEFAULT_MIN_BYTES
from proxy.core.http.encodings import DEFAULT_ENCODINGS
from proxy.core.http.forwarded import X_FORWARDED_FOR, Network
from proxy.core.http.upgrade import DEFAULT_ALLOWED as DEFAULT_UPGRADES
from proxy.core.purge.purges import DEFAULT_TAG_HEADERS
from proxy.core.purge.retention import DEFAULT_MAX_BYTES as DEFAULT_PURGE_STATE_BYTES
from proxy.errors import ConfigError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_DEFAULT_MAX_OBJECT = 8 * 1024**2  # unless cache.max_bytes is smaller
_DEFAULT_DISK_MAX = 1024**3  # cache.disk_max_bytes when cache.disk_path is set without it
_TABLES = ("edge", "api", "cache", "state", "dashboard", "fleet", "domains")

# A key's check: (its full name, its TOML value or None when absent) -> the converted value.
# TOML has no null, so None can only mean the key was left out.
Check = Callable[[str, object], Any]
_T = TypeVar("_T", bound="DataclassInstance")
_Table = TypeVar("_Table", "EdgeConfig", "DomainConfig")


# -- the tables ---------------------------------------------------------------------------------


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


@dataclass(frozen=True, slots=True)
class HealthCheckConfig:
    """[domains.health_check]: each edge process probes each origin server (decision 0034)."""

    path: Annotated[str, _probe_path] = "/"
    interval: Annotated[float, _duration] = 5.0
    timeout: Annotated[float, _duration] = 2.0
    fails: Annotated[int, check.count] = 2  # consecutive failures that mark a server down
    passes: Annotated[int, check.count] = 2  # consecutive probe successes that bring it back


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


def _health_check(key: str, value: object) -> HealthCheckConfig:
    if not isinstance(value, dict):
        raise ConfigError(key, "must be a table")
    health = _build(HealthCheckConfig, key, value)
    if health.timeout >= health.interval:
        raise ConfigError(f"{key}.timeout", "must be shorter than the interval")
    return health


@dataclass(frozen=True, slots=True)
class EdgeConfig:
    listen: Annotated[Listen, check.listen]
    shutdown_timeout: Annotated[float, check.seconds] = 30.0
    via: Annotated[str, check.token_text] = "cdn-proxy"
    # Edge processes sharing the listen port (SO_REUSEPORT); "auto" is one per usable core.
    # More than one makes them a fleet: see [fleet].
    workers: Annotated[int, check.workers] = 1
    # Request bodies (decision 0015): the longest wait for the next piece of one (nginx's
    # client_body_timeout), and how much of one is read before the origin is asked (nginx's
    # proxy_request_buffering); a longer one is streamed.
    body_timeout: Annotated[float, check.seconds] = 60.0
    request_buffer_bytes: Annotated[int, check.size] = 1024**2
    # Decision 0032: the bytes every body being read may hold at once, for the node (each
    # worker takes its share); past it new bodies are streamed (within the upload shares) or
    # refused 503. And the slowest a body may come: each body_timeout seconds of it must bring
    # body_min_rate x body_timeout bytes (as Apache's mod_reqtimeout MinRate); 0: no minimum.
    request_buffer_total_bytes: Annotated[int, check.size] = 64 * 1024**2
    body_min_rate: Annotated[int, check.rate] = 1024
    # Seconds a connection may take to send a whole request head, from its opening or from
    # the head's first byte (nginx: client_header_timeout); then it is closed (408).
    header_timeout: Annotated[float, check.seconds] = 15.0
    # Seconds a connection may stay idle between requests (nginx: keepalive_timeout).
    keepalive_timeout: Annotated[float, check.seconds] = 30.0
    # Open client connections, for the node (each worker takes its share); "auto" (None)
    # derives it from the open-files limit (proxy/edge/connections.py).
    max_connections: Annotated[int | None, check.max_connections] = None
    # Open connections of one client address (the TCP peer: behind a load balancer, its
    # address), for the node (each worker takes its share); "auto" (None) is a quarter of the
    # process's max_connections, at most 1,024; 0: no limit. Decision 0032.
    max_connections_per_client: Annotated[int | None, check.per_client_connections] = None
    # HTTPS beside listen (decision 0018), serving the same domains; and the certificate for
    # a client whose SNI names no domain with a certificate of its own (or none at all).
    tls_listen: Annotated[Listen | None, check.listen] = None
    tls_cert: Annotated[Path | None, check.path] = None
    tls_key: Annotated[Path | None, check.path] = None
    # Upgraded connections (WebSocket and any other Upgrade, decision 0022): closed after this
    # many seconds without a byte either way (nginx: proxy_read_timeout), and after this many
    # seconds in all, however busy.
    tunnel_idle_timeout: Annotated[float, check.seconds] = 60.0
    tunnel_max_seconds: Annotated[float, check.seconds] = 86_400.0
    # The protocols an Upgrade may be tunnelled to (an allowlist; never one carrying HTTP).
    upgrade_protocols: Annotated[tuple[str, ...], check.upgrade_protocols] = DEFAULT_UPGRADES
    # Peers whose X-Forwarded-For/-Proto (or Forwarded) are believed (proxy/core/http/forwarded.py).
    trusted_proxies: Annotated[tuple[Network, ...], check.networks] = ()
    forwarded_header: Annotated[str, check.forwarded_header] = X_FORWARDED_FOR
    # The access log: "-" (standard output), a file path, or None (false: off). Decision 0019.
    access_log: Annotated[str | None, check.access_log] = None
    access_log_format: Annotated[str, check.access_log_format] = "combined"
    # HTTP/2 (decision 0036): offered by ALPN on the TLS listener, beside http/1.1; and with
    # prior knowledge (h2c) on the plain listener, for a load balancer in front (off: an h2c
    # preface is answered 505). The limits below hold per connection; their defaults are
    # nginx's (http2_max_concurrent_streams, keepalive_requests, send_timeout,
    # large_client_header_buffers) or, where nginx has no key, what it hard-codes.
    http2: Annotated[bool, check.flag] = True
    h2c: Annotated[bool, check.flag] = False
    http2_max_concurrent_streams: Annotated[int, check.count] = 128
    # Decoded request header list (HPACK bomb): RST_STREAM past it, GOAWAY if it keeps on.
    http2_max_header_list_bytes: Annotated[int, check.size] = 64 * 1024
    # Requests per connection (nginx: keepalive_requests): then GOAWAY, in-flight ones finish.
    http2_max_requests: Annotated[int, check.count] = 1000
    # Streams a client may cancel (RST_STREAM) before their answer, less one per stream it
    # lets finish (Rapid Reset, CVE-2023-44487): past it, GOAWAY and close (nginx 1.25.3 closes
    # past twice max_concurrent_streams new streams per read; this counts across reads too).
    http2_reset_budget: Annotated[int, check.count] = 256
    # SETTINGS, PING, PRIORITY, WINDOW_UPDATE, empty DATA and RST_STREAM frames a connection
    # may send per second on average, with this burst (nginx closes floods of each kind).
    http2_control_frames_per_second: Annotated[int, check.count] = 100
    http2_control_frame_burst: Annotated[int, check.count] = 1000
    # Seconds an answer may wait for the client to open its flow-control window or read
    # (nginx: send_timeout); then the stream is reset. Idle connections close after
    # keepalive_timeout; a request body waits body_timeout for its next piece.
    send_timeout: Annotated[float, check.seconds] = 60.0


@dataclass(frozen=True, slots=True)
class ApiConfig:
    listen: Annotated[Listen, check.listen]
    max_body_bytes: Annotated[int, check.size] = 4096
    auth_failures_allowed: Annotated[int, check.count] = 10
    auth_failure_window: Annotated[float, check.seconds] = 60.0
    # seconds a clear-cache request's whole body may take to arrive (it is at most
    # max_body_bytes); a body still incomplete then is answered 408 and its connection closed
    body_timeout: Annotated[float, check.seconds] = 10.0
    header_timeout: Annotated[float, check.seconds] = 15.0  # as edge.header_timeout
    keepalive_timeout: Annotated[float, check.seconds] = 30.0  # as edge.keepalive_timeout
    trusted_proxies: Annotated[tuple[Network, ...], check.networks] = ()  # as edge.trusted_proxies
    forwarded_header: Annotated[str, check.forwarded_header] = X_FORWARDED_FOR
    # A purge body (POST /api/v1/cdn/purge) carries up to 256 URLs, prefixes or tags: 1 MiB
    # holds 256 targets of 4 KiB; raise it for longer ones (a target may have 8,190 bytes).
    max_purge_body_bytes: Annotated[int, check.size] = 1024**2


@dataclass(frozen=True, slots=True)
class CacheConfig:
    max_bytes: Annotated[int, check.size]
    max_object_bytes: Annotated[int, check.size]  # defaults to min(max_bytes, 8 MiB): see _cache
    name: Annotated[str, check.token_text] = "cdn-proxy"
    # The purge state's own bound, beside max_bytes (decision 0037): past it, old purges
    # are folded (forgotten, retired, or a domain cleared), each domain down to a fair share.
    purge_state_max_bytes: Annotated[int, check.size] = DEFAULT_PURGE_STATE_BYTES
    # The shared tier (decision 0030, README "The shared tier"): one directory per node, relative
    # to the config file; None keeps only the memory tier. Both need a restart to change.
    disk_path: Annotated[Path | None, check.path] = None
    disk_max_bytes: Annotated[int, check.size] = _DEFAULT_DISK_MAX


@dataclass(frozen=True, slots=True)
class StateConfig:
    path: Annotated[Path, check.path]
    audit_max_rows: Annotated[int, check.count] = 100_000
    # true: each audit record waits for fdatasync before its clear is answered, so that a
    # power loss cannot lose it either (a process crash cannot without it)
    audit_fsync: Annotated[bool, check.flag] = False


@dataclass(frozen=True, slots=True)
class DashboardConfig:
    """The dashboard on the API listener: sessions and sign-in throttling."""

    # seconds without a request that end a session
    session_idle_timeout: Annotated[float, check.seconds] = 3600.0
    # seconds after sign-in that end it regardless
    session_lifetime: Annotated[float, check.seconds] = 28_800.0
    # per user name and per address, before delays start
    signin_failures_allowed: Annotated[int, check.count] = 5
    # the cap of the doubling delay, in seconds
    signin_max_delay: Annotated[float, check.delay_cap] = 900.0
    # The listener speaks plain HTTP; true marks the session cookie Secure, for when the
    # dashboard is reached over HTTPS through a TLS-terminating proxy.
    secure_cookie: Annotated[bool, check.flag] = False


@dataclass(frozen=True, slots=True)
class FleetConfig:
    """Edge processes and control planes coordinated through Valkey (decision 0014)."""

    # redis://, rediss:// or unix:// (Valkey or Redis). Left out: the control process starts
    # an embedded Valkey on a Unix socket beside the state database (workers on one machine).
    url: Annotated[str | None, check.fleet_url] = None
    node: Annotated[str, check.token_text] = ""  # this machine's name in the fleet; the host name
    lease: Annotated[float, check.seconds] = 2.0  # an edge process serves from cache only within it
    renew: Annotated[float, check.seconds] = 0.5  # how often an edge process renews its lease
    # How long a clear may wait for every live edge process before it answers 503.
    clear_timeout: Annotated[float, check.seconds] = 5.0
    # How often a waiting clear asks Valkey again when no ack hint has come (hints are lost).
    poll_interval: Annotated[float, check.seconds] = 0.05
    timeout: Annotated[float, check.seconds] = 0.5  # the longest any one Valkey call may take
    # How many replicas must have each clear and each sync (WAIT) before it counts, so a
    # failover to a replica loses neither; 0: a single Valkey (0014 "Failover").
    replicas: Annotated[int, check.replicas] = 0


@dataclass(frozen=True, slots=True)
class Config:
    """A node's roles are its tables: [edge] runs edge processes, [api] the control plane
    (clear-cache API, dashboard, metrics, the state database); a node may have both."""

    edge: EdgeConfig | None
    api: ApiConfig | None
    cache: CacheConfig | None  # with [edge]
    state: StateConfig | None  # with [api]
    domains: tuple[DomainConfig, ...]
    by_name: Mapping[str, DomainConfig] = field(repr=False, compare=False)
    dashboard: DashboardConfig = field(default_factory=DashboardConfig)
    # None: one process, no coordination (workers = 1 and no [fleet] table).
    fleet: FleetConfig | None = None

    def edge_role(self) -> tuple[EdgeConfig, CacheConfig]:
        """[edge] and [cache], for the code that runs an edge; ConfigError on a node without."""
        if self.edge is None or self.cache is None:
            raise ConfigError("edge", "this node has no [edge] table: it runs no edge")
        return self.edge, self.cache

    def api_role(self) -> tuple[ApiConfig, StateConfig]:
        """[api] and [state], for the control plane; ConfigError on a node without."""
        if self.api is None or self.state is None:
            raise ConfigError("api", "this node has no [api] table: it runs no control plane")
        return self.api, self.state


# -- reading and building -----------------------------------------------------------------------


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and check a config file; raise ConfigError naming the first bad key."""
    return load_config_file(path)[0]


def load_config_file(path: str | os.PathLike[str]) -> tuple[Config, str]:
    """``load_config``, and the SHA-256 (hex) of the bytes read: a config reload
    (proxy/process/reload.py) tells by it whether two processes read the same file."""
    file = Path(path)
    try:
        raw = file.read_bytes()
        data = tomllib.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        raise ConfigError(str(file), "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(file), f"cannot be read ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(file), f"is not valid TOML ({exc})") from None
    digest = hashlib.sha256(raw).hexdigest()
    return parse_config(data, base_dir=file.resolve().parent), digest


def parse_config(data: Mapping[str, Any], *, base_dir: Path) -> Config:
    """Build a Config from already-parsed TOML data."""
    _only_keys("", data, _TABLES)
    if data.get("edge") is None and data.get("api") is None:
        raise ConfigError("edge", "a node needs an [edge] table, an [api] table, or both")
    edge = _optional(EdgeConfig, data, "edge")
    if edge is not None and edge.access_log not in (None, "-"):
        edge = dataclasses.replace(edge, access_log=str(base_dir / str(edge.access_log)))
    api = _optional(ApiConfig, data, "api")
    if edge is not None and api is not None and api.listen == edge.listen and api.listen.port:
        raise ConfigError("api.listen", "must differ from edge.listen")
    cache = _cache(_table(data, "cache"), base_dir) if edge is not None else None
    state = None
    if api is not None or "state" in data:
        state = _build(StateConfig, "state", _table(data, "state"))
        # An absolute state.path stays as it is: joining an absolute path replaces the base.
        state = dataclasses.replace(state, path=base_dir / state.path)
    domains = _domains(data.get("domains"))
    edge, domains = checked_tls(edge, domains, base_dir)
    return Config(
        edge=edge,
        api=api,
        cache=cache,
        state=state,
        domains=domains,
        by_name={domain.name: domain for domain in domains},
        dashboard=_dashboard(_table(data, "dashboard", required=False)),
        fleet=_fleet(data, edge, api),
    )


def _optional(cls: type[_T], data: Mapping[str, Any], key: str) -> _T | None:
    return None if data.get(key) is None else _build(cls, key, _table(data, key))


def _fleet(
    data: Mapping[str, Any], edge: EdgeConfig | None, api: ApiConfig | None
) -> FleetConfig | None:
    """[fleet] as given, or the embedded default for several workers on one node."""
    raw = _table(data, "fleet", required=False)
    alone = edge is not None and edge.workers == 1 and api is not None
    if alone and "fleet" not in data:
        return None  # one process: edge and API together, nothing to coordinate
    fleet = _build(FleetConfig, "fleet", raw)
    if fleet.url is None and (edge is None or api is None):
        role = "[api]" if edge is None else "[edge]"
        raise ConfigError(
            "fleet.url", f"is required on a node with only {role}: it names the fleet's Valkey"
        )
    if fleet.renew * 2 > fleet.lease:
        raise ConfigError("fleet.renew", "must be at most half of fleet.lease")
    if fleet.clear_timeout <= fleet.lease:
        raise ConfigError("fleet.clear_timeout", "must be longer than fleet.lease")
    if fleet.poll_interval > fleet.clear_timeout:
        raise ConfigError("fleet.poll_interval", "must be at most fleet.clear_timeout")
    if fleet.timeout >= fleet.lease:
        # A renewal allowed to take the whole lease could never keep the lease live.
        raise ConfigError("fleet.timeout", "must be shorter than fleet.lease")
    if fleet.replicas and fleet.url is None:
        raise ConfigError("fleet.replicas", "needs fleet.url: the embedded Valkey has no replicas")
    if not fleet.node:
        fleet = dataclasses.replace(fleet, node=_host_name())
    return fleet


def _host_name() -> str:
    name = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:64]
    return name or "node"


def _cache(raw: Mapping[str, Any], base_dir: Path) -> CacheConfig:
    max_bytes = check.size("cache.max_bytes", raw.get("max_bytes"))
    cache = _build(
        CacheConfig, "cache", {"max_object_bytes": min(max_bytes, _DEFAULT_MAX_OBJECT), **raw}
    )
    if cache.disk_path is None:
        if "disk_max_bytes" in raw:
            raise ConfigError("cache.disk_max_bytes", "needs cache.disk_path (the shared tier)")
        if cache.max_object_bytes > cache.max_bytes:
            raise ConfigError("cache.max_object_bytes", "must not be larger than cache.max_bytes")
        return cache
    # With a shared tier an object may be larger than the memory tier: the memory tier keeps
    # only the objects that fit its own share (proxy/store/tiered.py), the disk holds the rest.
    if cache.max_object_bytes > cache.disk_max_bytes:
        raise ConfigError("cache.max_object_bytes", "must not be larger than cache.disk_max_bytes")
    # An absolute disk_path stays as it is: joining an absolute path replaces the base.
    return dataclasses.replace(cache, disk_path=base_dir / cache.disk_path)


def _dashboard(raw: Mapping[str, Any]) -> DashboardConfig:
    dashboard = _build(DashboardConfig, "dashboard", raw)
    if dashboard.session_idle_timeout > dashboard.session_lifetime:
        raise ConfigError(
            "dashboard.session_idle_timeout", "must not be longer than dashboard.session_lifetime"
        )
    return dashboard


def _domains(raw: object) -> tuple[DomainConfig, ...]:
    if not isinstance(raw, list) or not raw:
        raise ConfigError("domains", "needs at least one [[domains]] table")
    domains: dict[str, DomainConfig] = {}
    for index, table in enumerate(raw):
        where = f"domains[{index}]"
        if not isinstance(table, dict):
            raise ConfigError(where, "must be a table")
        domain = _with_origins(_build(DomainConfig, where, table), where)
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


def checked_tls(
    edge: EdgeConfig | None, domains: Sequence[DomainConfig], base_dir: Path
) -> tuple[EdgeConfig | None, tuple[DomainConfig, ...]]:
    """The [edge] and [[domains]] tables with their TLS paths resolved against ``base_dir``,
    each certificate and key pair loaded once (on an edge node) to prove it good."""
    if edge is not None:
        edge = _with_pair(edge, "edge", base_dir)
    resolved = []
    for index, domain in enumerate(domains):
        domain = _with_pair(domain, f"domains[{index}]", base_dir)
        if domain.origin_ca is not None:
            if not all(o.startswith("https://") for o in domain.origins + domain.backup_origins):
                raise ConfigError(
                    f"domains[{index}].origin_ca", "is only for an origin given as https://"
                )
            domain = dataclasses.replace(domain, origin_ca=base_dir / domain.origin_ca)
        resolved.append(domain)
    if edge is None:
        return edge, tuple(resolved)
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    if edge.tls_cert is not None and edge.tls_key is not None:
        load_server_pair(probe, edge.tls_cert, edge.tls_key, "edge")
    for index, domain in enumerate(resolved):
        if domain.tls_cert is not None and domain.tls_key is not None:
            load_server_pair(probe, domain.tls_cert, domain.tls_key, f"domains[{index}]")
        if domain.origin_ca is not None:
            load_origin_ca(domain.origin_ca, f"domains[{index}]")
    if edge.tls_listen is not None:
        if edge.tls_cert is None and all(domain.tls_cert is None for domain in resolved):
            raise ConfigError(
                "edge.tls_listen", "needs a certificate: edge.tls_cert or a domain's tls_cert"
            )
        if edge.tls_listen == edge.listen and edge.listen.port:
            raise ConfigError("edge.tls_listen", "must differ from edge.listen")
    return edge, tuple(resolved)


def _with_pair(table: _Table, where: str, base_dir: Path) -> _Table:
    """The table with tls_cert and tls_key resolved; both or neither must be given."""
    if (table.tls_cert is None) != (table.tls_key is None):
        given, missing = (
            ("tls_cert", "tls_key") if table.tls_key is None else ("tls_key", "tls_cert")
        )
        raise ConfigError(f"{where}.{missing}", f"is required with {where}.{given}")
    if table.tls_cert is None or table.tls_key is None:
        return table
    return dataclasses.replace(
        table, tls_cert=base_dir / table.tls_cert, tls_key=base_dir / table.tls_key
    )


def _table(data: Mapping[str, Any], key: str, *, required: bool = True) -> Mapping[str, Any]:
    value = data.get(key)
    if value is None and required:
        raise ConfigError(key, f"the [{key}] table is required")
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(key, "must be a table")
    return value


def _build(cls: type[_T], where: str, raw: Mapping[str, Any]) -> _T:
    """One table's dataclass from its TOML table, each key checked by its field's check."""
    fields = _checked_fields(cls)
    _only_keys(where, raw, fields)
    values = {}
    for name, (checked, required) in fields.items():
        if name in raw or required:
            values[name] = checked(f"{where}.{name}", raw.get(name))
    return cls(**values)


@functools.cache  # get_type_hints evaluates every annotation: once per table type
def _checked_fields(cls: type[DataclassInstance]) -> dict[str, tuple[Check, bool]]:
    """Each field of a table's dataclass: its check (the Annotated metadata), and if required."""
    hints = get_type_hints(cls, include_extras=True)
    return {
        f.name: (
            hints[f.name].__metadata__[0],
            f.default is f.default_factory is dataclasses.MISSING,
        )
        for f in dataclasses.fields(cls)
    }


def _only_keys(where: str, table: Mapping[str, Any], allowed: Collection[str]) -> None:
    for key in table:
        if key not in allowed:
            name = f"{where}.{key}" if where else key
            raise ConfigError(name, f"unknown key (expected one of: {', '.join(sorted(allowed))})")


# -- the purge client ---------------------------------------------------------------------------


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
