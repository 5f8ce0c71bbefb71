"""The configuration reference, docs/config.md, generated from the config model.

Theory of operation. The keys are the fields of the tables' frozen dataclasses
(proxy/config/model.py, domains.py) and the keys ``[[domains.rules]]`` accepts (rules.py).
``entries`` walks them, nested tables included, and reads for each key:

- its type and unit, from the check its field names (``values.py``): one line per check in
  ``_CHECKS``;
- its default, from the field's default (``_DEFAULTS`` where a default is derived, not a
  literal);
- whether a reload applies it, from the reload rules themselves (``diff.RELOADABLE`` and
  ``diff.KEEPS_ENTRIES``);
- its meaning, from ``MEANINGS``: the one table of one-line meanings, keyed ``table.key``.

tests/test_config_reference.py fails when a key is in the code but not in ``MEANINGS``, or
the reverse, and when docs/config.md is not what this module prints. The fix is to add the
meaning here and regenerate: ``python -m proxy.config.reference > docs/config.md``.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from proxy.config import domains as domain_checks
from proxy.config import rules as rule_checks
from proxy.config import values as check
from proxy.config.diff import KEEPS_ENTRIES, RELOADABLE
from proxy.config.model import (
    ApiConfig,
    CacheConfig,
    DashboardConfig,
    DomainConfig,
    EdgeConfig,
    FleetConfig,
    StateConfig,
)
from proxy.config.tables import checked_fields

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

COMMAND = "python -m proxy.config.reference > docs/config.md"

# The top-level tables, in the order the page shows them. [[domains]] nests two tables:
# [domains.health_check] (a dataclass, walked as the others) and [[domains.rules]].
TABLES: tuple[tuple[str, type[DataclassInstance]], ...] = (
    ("edge", EdgeConfig),
    ("api", ApiConfig),
    ("cache", CacheConfig),
    ("state", StateConfig),
    ("dashboard", DashboardConfig),
    ("fleet", FleetConfig),
    ("domains", DomainConfig),
)
RULES = "domains.rules"
# The loader's own list of rule keys and their checks (rules.py keeps it private).
_RULE_CHECKS: dict[str, Callable[[str, object], object]] = dict(rule_checks._CHECKS)

_SIZE = 'size: bytes, or a string such as `"64MiB"`'
_LIST = "list of strings"
_SECONDS = ("number", "seconds")
# Each check's type and unit, as an operator writes the value.
_CHECKS: dict[Callable[..., object], tuple[str, str]] = {
    check.listen: ('string `"HOST:PORT"`', ""),
    check.seconds: _SECONDS,
    check.seconds_or_zero: ("number, 0 or more", "seconds"),
    check.delay_cap: ("number, at least 1", "seconds"),
    check.size: (_SIZE, "bytes"),
    check.rate: (_SIZE + ", or 0", "bytes per second"),
    check.http2_size: (_SIZE, "bytes"),
    check.count: ("whole number above 0", ""),
    check.http2_count: ("whole number above 0", "streams"),
    check.count_or_zero: ("whole number (0: no limit)", ""),
    check.replicas: ("whole number from 0 to 16", "replicas"),
    check.workers: ('whole number from 1 to 256, or `"auto"`', "processes"),
    check.max_connections: ('whole number, or `"auto"`', "connections"),
    check.per_client_connections: ('whole number (0: no limit), or `"auto"`', "connections"),
    check.flag: ("boolean", ""),
    check.token_text: ("name: 1-64 letters, digits, `.`, `_`, `-`", ""),
    check.path: ("path, relative to the config file", ""),
    check.networks: ("list of CIDRs or addresses", ""),
    check.forwarded_header: ('`"x-forwarded-for"` or `"forwarded"`', ""),
    check.access_log: ('`"-"`, a file path, or `false`', ""),
    check.access_log_format: ('`"combined"` or `"json"`', ""),
    check.fleet_url: ("URL: `redis://`, `rediss://` or `unix://`", ""),
    check.advertise_url: ("URL `http://host:port`, or empty", ""),
    check.upgrade_protocols: (_LIST, ""),
    check.encodings: (_LIST + ": `br`, `gzip`, `zstd`, `identity`", ""),
    check.compress: (_LIST + ": `br`, `gzip`, `zstd`", ""),
    check.compress_types: (_LIST + " (media types; `*` globs)", ""),
    check.tag_headers: (_LIST + ": `Surrogate-Key`, `Cache-Tag`", ""),
    check.domain_name: ("host name", ""),
    domain_checks._one_origin: ("URL `scheme://host[:port]`", ""),
    domain_checks._origin_list: ("list of URLs", ""),
    domain_checks._backup_list: ("list of URLs", ""),
    domain_checks._probe_method: ('`"GET"` or `"HEAD"`', ""),
    domain_checks._balance: ('`"round_robin"`, `"least_connections"` or `"hash"`', ""),
    domain_checks._probe_path: ("path starting with `/`", ""),
    domain_checks._duration: ('number, or a string such as `"500ms"`, `"2s"`, `"1m"`', "seconds"),
    rule_checks._name: ("name: 1-64 letters, digits, `.`, `_`, `-`", ""),
    rule_checks._path_globs: ("list of path globs (`*`, `?`)", ""),
    rule_checks._name_globs: ("list of name globs (`*`, `?`)", ""),
    rule_checks.duration: (
        'number, or a string such as `"30s"`, `"5m"`, `"1h"`, `"1d"`',
        "seconds",
    ),
    rule_checks._by_status: ('table of status = duration, such as `{ 404 = "1m" }`', "seconds"),
    rule_checks._ignore_origin: ("list of field names", ""),
}

# Defaults that are derived, not a field's literal default.
_DEFAULTS = {
    "edge.workers": "`1`",
    "edge.max_connections": '`"auto"`: what the open-files limit leaves',
    "edge.max_connections_per_client": '`"auto"`: a quarter of max_connections, at most 1024',
    "edge.access_log": "`false` (off)",
    "cache.max_object_bytes": "`8MiB`, or `max_bytes` if smaller",
    "cache.disk_max_bytes": "`1GiB` (with `disk_path`)",
    "fleet.url": "none: an embedded Valkey (workers on one machine)",
    "fleet.node": "the host name",
    "fleet.advertise": '`""`: the edge\'s listen address',
    "domains.origin": "none: give `origin` or `origins`",
    "domains.origins": "`[origin]`",
}

# What a reload does with a key beyond the rules of diff.py.
_RELOAD_NOTES = {
    "domains.name": "reload: a new name is a new domain (the old one is removed)",
    "domains.origin": "reload: clears the domain, unless a server of `origins` stays",
    f"{RULES}.paths": (
        "reload: clears the domain if the rule sets a `query_` key, else keeps entries"
    ),
}
_KEYS_RULES = frozenset({"query_ignore", "query_only", "query_sort"})

# One line per key: what it means. Keep it short; the task pages say more.
MEANINGS = {
    "edge.listen": "Address of the plain-HTTP edge listener.",
    "edge.shutdown_timeout": "Time SIGTERM may take in all; in-flight requests get what is left.",
    "edge.via": "The name the edge adds to `Via`.",
    "edge.workers": "Edge processes sharing the listen port; more than one runs a fleet.",
    "edge.body_timeout": "Longest wait for the next piece of a request body; then 408.",
    "edge.request_buffer_bytes": "Part of a request body read before the origin is asked.",
    "edge.request_buffer_total_bytes": "What all buffered request bodies may hold at once.",
    "edge.answer_buffer_bytes": "What a relayed answer reads ahead of a slow client.",
    "edge.answers_held_per_connection_bytes": (
        "What one connection's answers not yet sent may hold (relayed: read ahead or"
        " streaming); past it an answer is refused 503."
    ),
    "edge.answers_held_per_client_bytes": (
        "What one client address's answers not yet sent may hold, over its connections and"
        " both protocols, per node (each worker its share); past it an answer is refused 503."
    ),
    "edge.origin_requests_per_connection": (
        "Misses and forwards one connection may have the origin asked for at once; past it a"
        " request waits for one of them to be answered."
    ),
    "edge.origin_requests_per_client": (
        "Misses and forwards one client address may have the origin asked for at once, over"
        " its connections, per node (each worker its share); past it a request waits."
    ),
    "edge.fill_buffer_total_bytes": "What all fills' bodies in flight may hold at once.",
    "edge.compress_queue_bytes": "Bodies waiting for the compression thread; past it, sent as is.",
    "edge.body_min_rate": "Slowest a request body may come, over each `body_timeout`.",
    "edge.header_timeout": "Time a connection may take to send a whole request head.",
    "edge.keepalive_timeout": "Time a connection may stay idle between requests.",
    "edge.max_connections": "Open client connections, for the node.",
    "edge.max_connections_per_client": "Open connections of one client address, for the node.",
    "edge.tls_listen": "Address of the HTTPS listener; needs a certificate.",
    "edge.tls_cert": "Default certificate (PEM, chain after it), for clients without SNI.",
    "edge.tls_key": "Key of the default certificate.",
    "edge.tunnel_idle_timeout": "A tunnel (WebSocket) that passes no byte this long is closed.",
    "edge.tunnel_max_seconds": "A tunnel is closed after this long, however busy.",
    "edge.upgrade_protocols": "Upgrade protocols tunnelled to the origin (never HTTP ones).",
    "edge.trusted_proxies": "Peers whose forwarding field is believed.",
    "edge.forwarded_header": "The field trusted proxies write.",
    "edge.access_log": "Where the access log goes.",
    "edge.access_log_format": "Format of access log lines.",
    "edge.http2": "Offer HTTP/2 by ALPN on the TLS listener.",
    "edge.h2c": "Serve HTTP/2 with prior knowledge on the plain listener.",
    "edge.hit_lane": "Answer fresh HTTP/1.1 hits before aiohttp reads them (a strict subset).",
    "edge.http2_max_concurrent_streams": "HTTP/2 streams open at once per connection.",
    "edge.http2_streams_per_client": (
        "HTTP/2 streams one client address may have open at once, over its connections, per"
        " node (each worker its share); past it a new stream is refused (REFUSED_STREAM)."
        " Behind a load balancer every client has its address: raise it there, or 0 (no limit)."
    ),
    "edge.http2_max_header_list_bytes": "Largest decoded HTTP/2 request head.",
    "edge.http2_max_requests": "Requests per HTTP/2 connection; then GOAWAY.",
    "edge.http2_reset_budget": "Streams a client may cancel before their answer (Rapid Reset).",
    "edge.http2_control_frames_per_second": "Average rate of HTTP/2 control frames allowed.",
    "edge.http2_control_frame_burst": "Burst of HTTP/2 control frames allowed.",
    "edge.send_timeout": "Time an answer may wait on a client that takes less than 64 KiB of it.",
    "api.listen": "Address of the control plane: APIs, dashboard, metrics.",
    "api.max_body_bytes": "Largest clear-cache body; past it, 413.",
    "api.auth_failures_allowed": "Wrong tokens per address within the window, before 429.",
    "api.auth_failure_window": "The window wrong tokens are counted in.",
    "api.body_timeout": "Time an API request body may take to arrive; then 408.",
    "api.header_timeout": "As `edge.header_timeout`, on the API listener.",
    "api.keepalive_timeout": "As `edge.keepalive_timeout`, on the API listener.",
    "api.trusted_proxies": "As `edge.trusted_proxies`, for the API (rate limits, audit).",
    "api.forwarded_header": "As `edge.forwarded_header`, for the API.",
    "api.max_purge_body_bytes": "Largest purge body; past it, 413.",
    "cache.max_bytes": "Size of the memory tier, for the node (bodies, headers, keys).",
    "cache.max_object_bytes": "Largest object stored; larger ones stream through.",
    "cache.name": "This cache's name in `Cache-Status` and `Surrogate-Capability`.",
    "cache.purge_state_max_bytes": "Budget of the purge state (purges remembered, bans).",
    "cache.disk_path": "Directory of the shared tier on disk; none: memory only.",
    "cache.disk_max_bytes": "Size of the shared tier.",
    "cache.lock_timeout": "Wait for another worker's stalled fill before fetching alone.",
    "cache.sendfile": "Send large hits by sendfile on plain HTTP/1.1.",
    "cache.sweep_pause": "Pause between two sweeps of the shared tier's orphaned files.",
    "cache.url_purge_keep": (
        "How long a URL purge's record is kept in the shared tier, for fills under way. "
        "A fill lasting longer, with a URL purge of its domain meanwhile, is not stored."
    ),
    "state.path": "The SQLite state database: token hashes, admins, audit log.",
    "state.audit_max_rows": "Audit records kept; the oldest past this are dropped.",
    "state.audit_fsync": "Each audit record is fdatasync'ed before its answer.",
    "dashboard.session_idle_timeout": "Idle time that ends a dashboard session.",
    "dashboard.session_lifetime": "Time after sign-in that ends a session regardless.",
    "dashboard.signin_failures_allowed": "Failed sign-ins per name and address before delays.",
    "dashboard.signin_max_delay": "Cap of the sign-in delay, which doubles per failure.",
    "dashboard.secure_cookie": "Mark the session cookie Secure (HTTPS in front).",
    "fleet.url": "The fleet's Valkey (or Redis).",
    "fleet.node": "This machine's name in the fleet.",
    "fleet.lease": "An edge process serves from cache only while its lease holds.",
    "fleet.renew": "How often an edge process renews its lease.",
    "fleet.clear_timeout": "Longest a clear waits for the fleet before it answers 503.",
    "fleet.poll_interval": "How often a waiting clear asks Valkey again.",
    "fleet.timeout": "Longest any one Valkey call may take.",
    "fleet.replicas": "Replicas that must have each clear and lease renewal (WAIT).",
    "fleet.peer_fill": "A miss asks the key's owner node before the origin (decision 0047).",
    "fleet.advertise": "Where the other nodes reach this node's edge for peer fills.",
    "fleet.peer_timeout": "Longest wait for the owner's answer head; then the origin.",
    "domains.name": "The host name served (exact; no wildcard).",
    "domains.origin": "The origin server.",
    "domains.heuristic_freshness": "Cache responses without explicit freshness (RFC 9111 4.2.2).",
    "domains.early_hints": "Send a stored answer's preload Link fields as a 103 before it.",
    "domains.connect_timeout": "Time to connect to an origin server.",
    "domains.read_timeout": "Longest silence while reading an origin's response.",
    "domains.stale_if_error": "Window to serve stale while the origin fails; 0: off.",
    "domains.origin_connections": "Requests at once to each origin server, per edge process.",
    "domains.origin_queue_timeout": "Wait for an origin connection; then 503.",
    "domains.max_tunnels": "Upgrade tunnels at once, per edge process.",
    "domains.encodings": "Codings asked of the origin, in order of preference.",
    "domains.compress": "Codings the edge compresses into; empty: off.",
    "domains.compress_max_bytes": "Larger bodies are never compressed at the edge.",
    "domains.compress_types": "Media types the edge compresses.",
    "domains.compress_min_bytes": "Smallest body the edge compresses.",
    "domains.tls_cert": "This domain's certificate, chosen by SNI.",
    "domains.tls_key": "Key of the domain's certificate.",
    "domains.origin_ca": "CA bundle the `https://` origin is verified against.",
    "domains.tag_headers": "Response fields read as tags for tag purges.",
    "domains.origins": "Several origin servers, balanced.",
    "domains.backup_origins": "Servers used only while every one of `origins` is down.",
    "domains.balance": "How requests are spread over `origins`.",
    "domains.health_check.path": "Path each probe asks for.",
    "domains.health_check.method": "How each probe asks: GET (the whole page) or HEAD.",
    "domains.health_check.interval": "Time between probes (drawn 10 % either way).",
    "domains.health_check.timeout": "A probe that takes longer has failed (at most interval).",
    "domains.health_check.fails": "Consecutive failures that mark a server down.",
    "domains.health_check.passes": "Consecutive passing probes that bring it back.",
    f"{RULES}.name": "The rule's name in `Cache-Status` details.",
    f"{RULES}.paths": "Path globs the rule applies to; left out: every path.",
    f"{RULES}.bypass_cookies": "Cookie name globs that send a request uncached to the origin.",
    f"{RULES}.ignore_client_no_cache": "A client's `no-cache` or reload is a hit.",
    f"{RULES}.query_ignore": "Query parameters dropped from the key and the origin request.",
    f"{RULES}.query_only": "The only query parameters kept.",
    f"{RULES}.query_sort": "Sort query parameters by name.",
    f"{RULES}.edge_ttl": "Freshness lifetime, whatever the origin says.",
    f"{RULES}.edge_ttl_by_status": "Freshness lifetime per status.",
    f"{RULES}.ignore_origin": "Response fields the cache disregards.",
    f"{RULES}.cache_with_cookies": "A rule lifetime also stores answers to requests with a Cookie.",
    f"{RULES}.browser_ttl": "`max-age` clients get.",
    f"{RULES}.stale_while_revalidate": "Replaces the origin's (RFC 5861).",
    f"{RULES}.stale_if_error": "Replaces the origin's (RFC 5861).",
    f"{RULES}.cache": "`false`: never stored, never served from cache.",
}

# The task pages that say more about each table.
_PAGES = {
    "edge": "[operations](operations.md), [security](security.md)",
    "api": "[api](api.md)",
    "cache": "[caching](caching.md), [operations](operations.md#the-shared-tier)",
    "state": "[api](api.md)",
    "dashboard": "[dashboard](dashboard.md)",
    "fleet": "[operations](operations.md#workers-and-fleets)",
    "domains": "[caching](caching.md), [operations](operations.md)",
    "domains.health_check": "[operations](operations.md#several-origin-servers-and-failover)",
    RULES: "[caching](caching.md#caching-rules)",
}


@dataclass(frozen=True, slots=True)
class Key:
    """One entry of the reference."""

    table: str  # "edge", "domains.health_check", "domains.rules"
    name: str  # the key within its table
    type: str
    unit: str
    default: str
    reload: str
    meaning: str

    @property
    def full(self) -> str:
        return f"{self.table}.{self.name}"


def entries() -> Iterator[Key]:
    """Every key the loader accepts, table by table, in the model's order."""
    for table, cls in TABLES:
        yield from _table_keys(table, cls)
    for name, checked in _RULE_CHECKS.items():
        yield _key(RULES, name, checked, "none", _rule_reload(name))


def code_keys() -> set[str]:
    """The full names of every key the loader accepts (``table.key``)."""
    names = set()
    for table, cls in _tables():
        names |= {f"{table}.{field.name}" for field in _plain_fields(cls)}
    return names | {f"{RULES}.{name}" for name in _RULE_CHECKS}


def unknown_checks() -> list[str]:
    """Keys whose check has no type and unit in ``_CHECKS`` (a check added since)."""
    found = [(f"{t}.{f}", c) for t, cls in _tables() for f, (c, _) in checked_fields(cls).items()]
    found += [(f"{RULES}.{n}", c) for n, c in _RULE_CHECKS.items()]
    nested = {_nested_name(t, f.name) for t, cls in _tables() for f in _nested_fields(cls)}
    return [name for name, c in found if c not in _CHECKS and name not in nested]


def render() -> str:
    """docs/config.md."""
    lines = [
        "# Configuration reference",
        "",
        f"<!-- Generated from the config model: do not edit. Regenerate with `{COMMAND}`. -->",
        "",
        "Every key of the config file, one entry each, generated from the code",
        "(`proxy/config/reference.py`). Do not edit this page; regenerate it:",
        "",
        f"    {COMMAND}",
        "",
        "Each entry gives the key's type, unit, default, and what a reload does with it.",
        '"reload applies it": `cdn-proxy reload` (SIGHUP) takes the new value.',
        '"restart": a reload that changes it is refused whole, naming it.',
        "A `[[domains]]` key always reloads; the entry says whether the domain keeps its entries.",
        "The annotated example is [config/proxy.toml](../config/proxy.toml).",
        "",
    ]
    tables = list(dict.fromkeys(key.table for key in entries()))
    lines += [f"- [`{_heading(t)}`](#{_anchor(_heading(t))})" for t in tables] + [""]
    current = ""
    for key in entries():
        if key.table != current:
            current = key.table
            lines += [f"## {_heading(current)}", "", f"More: {_PAGES[current]}.", ""]
        facts = [f"type: {key.type}"]
        if key.unit:
            facts.append(f"unit: {key.unit}")
        facts += [f"default: {key.default}", key.reload]
        lines += [f"### `{key.full}`", "", key.meaning, "", " · ".join(facts), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def _heading(table: str) -> str:
    """A table as the file writes it: ``[edge]``, ``[[domains]]``."""
    return f"[[{table}]]" if table in ("domains", RULES) else f"[{table}]"


def _anchor(heading: str) -> str:
    """The anchor a Markdown renderer gives a heading (GitHub's: punctuation dropped)."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


# -- walking the tables -------------------------------------------------------------------------


def _tables() -> Iterator[tuple[str, type[DataclassInstance]]]:
    """The dataclass tables, nested ones included (not [[domains.rules]]: not a dataclass)."""
    for table, cls in TABLES:
        yield table, cls
        for field in _nested_fields(cls):
            nested = _nested_type(field)
            if nested is not None:
                yield _nested_name(table, field.name), nested


def _table_keys(table: str, cls: type[DataclassInstance]) -> Iterator[Key]:
    checks = checked_fields(cls)
    for field in _plain_fields(cls):
        checked, required = checks[field.name]
        full = f"{table}.{field.name}"
        sized = checked in (check.size, check.rate, check.http2_size)
        default = _DEFAULTS.get(full) or ("required" if required else _toml(field.default, sized))
        yield _key(table, field.name, checked, default, _reload(table, field.name))
    for field in _nested_fields(cls):
        nested = _nested_type(field)
        if nested is not None:
            yield from _table_keys(_nested_name(table, field.name), nested)


def _key(table: str, name: str, checked: Callable[..., object], default: str, reload: str) -> Key:
    kind, unit = _CHECKS.get(checked, ("see the meaning", ""))
    meaning = MEANINGS.get(f"{table}.{name}", "(no meaning yet: add it to MEANINGS)")
    return Key(table, name, kind, unit, default, reload, meaning)


def _nested_fields(cls: type[DataclassInstance]) -> list[dataclasses.Field[Any]]:
    """Fields that are tables of their own: [domains.health_check] and [[domains.rules]]."""
    return [f for f in dataclasses.fields(cls) if f.name in ("health_check", "rules")]


def _plain_fields(cls: type[DataclassInstance]) -> list[dataclasses.Field[Any]]:
    nested = {f.name for f in _nested_fields(cls)}
    return [f for f in dataclasses.fields(cls) if f.name not in nested]


def _nested_type(field: dataclasses.Field[Any]) -> type[DataclassInstance] | None:
    """The dataclass a nested table is built into; None for [[domains.rules]]."""
    return domain_checks.HealthCheckConfig if field.name == "health_check" else None


def _nested_name(table: str, name: str) -> str:
    return f"{table}.{name}"


def _reload(table: str, name: str) -> str:
    full = f"{table}.{name}"
    if full in _RELOAD_NOTES:
        return _RELOAD_NOTES[full]
    if table == "domains.health_check":
        name = "health_check"
    elif table != "domains":
        return "reload applies it" if full in RELOADABLE else "restart"
    if name in KEEPS_ENTRIES:
        return "reload: keeps the domain's entries"
    return "reload: clears the domain"


def _rule_reload(name: str) -> str:
    full = f"{RULES}.{name}"
    if full in _RELOAD_NOTES:
        return _RELOAD_NOTES[full]
    if name in _KEYS_RULES:
        return "reload: clears the domain (its cache keys change)"
    return "reload: keeps the domain's entries"


def _toml(value: object, sized: bool) -> str:
    """A default as it is written in the file (a size with its unit)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    if isinstance(value, int):
        return f"`{_size(value) if sized else value}`"
    if isinstance(value, tuple):
        return "`[" + ", ".join(json.dumps(str(v)) for v in value) + "]`"
    if isinstance(value, Path):
        return f"`{json.dumps(str(value))}`"
    return f"`{json.dumps(value)}`"


def _size(value: int) -> str:
    """Sizes of 1 KiB and more as the file writes them: 65536 is "64KiB"."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if value >= scale and value % scale == 0:
            return f'"{value // scale}{unit}"'
    return str(value)


if __name__ == "__main__":
    sys.stdout.write(render())
