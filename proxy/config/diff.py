"""What a config reload changes: the difference between the running config and a new one.

Theory of operation. A reload (SIGHUP, ``cdn-proxy reload``) applies a new config to a
process that keeps its listeners, its store and its connections. Some keys can change under
it, some cannot: a listen address is a bound socket, ``edge.workers`` is the processes that
exist, ``[fleet] url`` is the Valkey every member talks to, ``edge.via`` and ``cache.name``
are baked into every stored entry's precomputed hit lines. ``diff`` sorts the difference:

- domains ``added``, ``removed``, ``repointed`` (a key that changes what is stored for the
  domain changed: its origin, or heuristic_freshness; their entries must never answer
  again), ``retuned`` (only keys that change how the domain is served changed: timeouts,
  origin connections; its entries stay) and ``unchanged``;
- ``restart``: keys outside the domains that changed and that a reload cannot apply. The
  caller refuses the whole reload when there are any, so the running config is always one
  file's config, never a mix.

Both lists are fail-safe for keys added later: a table key is applied on reload only when it
is named in RELOADABLE (else it needs a restart), and a domain key keeps the domain's entries
only when it is named in KEEPS_ENTRIES (else changing it clears the domain). Adding a key
that a reload can apply is one line here, beside the hook that applies it (proxy/process/reload.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from proxy.config.model import Config, DomainConfig

# Keys of the tables a running process applies on reload (``table.key``). Every other key of
# [edge], [api], [cache], [state], [dashboard] and [fleet] needs a restart: cache.disk_path and
# cache.disk_max_bytes among them (the shared tier is opened, and locked, once per start).
RELOADABLE = frozenset(
    {
        "edge.body_timeout",  # Edge.reconfigure: the next body read
        "edge.request_buffer_bytes",  # Edge.reconfigure
        "cache.max_object_bytes",  # Edge.reconfigure: the next origin response
        "api.max_body_bytes",  # read from the control plane's config per request
        "api.max_purge_body_bytes",  # likewise
        "api.body_timeout",  # likewise
        "edge.tls_cert",  # EdgeTls.reconfigure (through Edge.reconfigure): new connections
        "edge.tls_key",
        "edge.access_log",  # EdgeAccess.reconfigure: the new file is opened first
        "edge.access_log_format",
        "edge.trusted_proxies",  # EdgeAccess.reconfigure and Edge.reconfigure
        "edge.forwarded_header",
        "edge.tunnel_idle_timeout",  # Tunnels.reconfigure: tunnels opened from now on
        "edge.tunnel_max_seconds",
    }
)

# Keys of a [[domains]] table that change how the domain is served but not what is stored
# for it: changing them keeps the domain's entries. Any other key (origin,
# heuristic_freshness, and keys added later unless named here) clears the domain.
KEEPS_ENTRIES = frozenset(
    {
        "connect_timeout",
        "read_timeout",
        "stale_if_error",  # decides what may be served when the origin fails, not what is kept
        "origin_connections",
        "origin_queue_timeout",
        "max_tunnels",  # Tunnels.reconfigure: tunnels opened from now on
        "tls_cert",  # EdgeTls.reconfigure: the certificate of new TLS connections
        "tls_key",
        "origin_ca",  # how the origin is verified, not what it sent
        "encodings",  # entries are keyed by the coding asked for: each stays right
        "early_hints",  # what a hit sends first, read from the entry's own fields
        # Servers of one site (decision 0034): adding or removing one, or changing how they
        # are balanced and checked, keeps the entries, as long as one server stays (see
        # _domain_changes: ``origin``, the first server, then changes with them).
        "origins",
        "backup_origins",
        "balance",
        "health_check",
        # Rules whose cache keys are unchanged (paths and query normalisation): their TTLs
        # apply to new fills; a change of keys is "rules" and clears (decision 0033).
        "rules-ttl",
    }
)

# Config fields that are not tables: the domains are compared by name, by_name is derived.
_NOT_TABLES = frozenset({"domains", "by_name"})


@dataclass(frozen=True, slots=True)
class ConfigChange:
    """The difference between two configs, as a reload sees it. Domain names are sorted."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    repointed: tuple[str, ...] = ()  # still configured; their entries are cleared
    # Those of ``repointed`` cleared only because their rules changed cache keys (no origin
    # nor other stored-entry key changed): the summary says so, not "re-pointed".
    rekeyed: tuple[str, ...] = ()
    retuned: tuple[str, ...] = ()  # still configured, entries kept, some setting changed
    unchanged: tuple[str, ...] = ()
    restart: tuple[str, ...] = ()  # keys that changed and need a restart: the reload is refused

    @property
    def refused(self) -> bool:
        return bool(self.restart)

    @property
    def cleared(self) -> tuple[str, ...]:
        """The domains whose entries must be made unservable: removed or re-pointed."""
        return tuple(sorted((*self.removed, *self.repointed)))

    def refusal(self) -> str:
        """The one-line reason a refused reload gives."""
        keys = ", ".join(self.restart)
        return f"reload refused: {keys} changed, which needs a restart (the running config stays)"

    def summary(self) -> str:
        """One line for the log and for ``cdn-proxy reload``: what the reload did. A domain is
        named once, with the reason it was cleared (issue 34 B7)."""
        rekeyed = set(self.rekeyed)
        parts = [
            f"{label} {', '.join(names)}"
            for label, names in (
                ("added", self.added),
                ("removed", self.removed),
                ("re-pointed (cleared)", tuple(n for n in self.repointed if n not in rekeyed)),
                ("cleared (its rules changed the cache keys)", self.rekeyed),
                ("retuned", self.retuned),
            )
            if names
        ]
        count = len(self.unchanged)
        parts.append(f"{count} domain{'' if count == 1 else 's'} unchanged")
        return "; ".join(parts)


def diff(old: Config, new: Config) -> ConfigChange:
    """Sort the difference between the running config ``old`` and the new one."""
    restart = tuple(sorted(_table_changes(old, new)))
    before, after = old.by_name, new.by_name
    repointed, retuned, unchanged, rekeyed = [], [], [], []
    for name in sorted(before.keys() & after.keys()):
        changed = _domain_changes(before[name], after[name])
        if not changed:
            unchanged.append(name)
        elif changed <= KEEPS_ENTRIES:
            retuned.append(name)
        else:
            repointed.append(name)
            if changed - KEEPS_ENTRIES == {"rules"}:
                rekeyed.append(name)
    return ConfigChange(
        added=tuple(sorted(after.keys() - before.keys())),
        removed=tuple(sorted(before.keys() - after.keys())),
        repointed=tuple(repointed),
        rekeyed=tuple(rekeyed),
        retuned=tuple(retuned),
        unchanged=tuple(unchanged),
        restart=restart,
    )


def _table_changes(old: Config, new: Config) -> list[str]:
    """The changed keys of every table but the domains that a reload cannot apply."""
    changed = []
    for field in dataclasses.fields(old):
        if field.name in _NOT_TABLES:
            continue
        before, after = getattr(old, field.name), getattr(new, field.name)
        if before == after:
            continue
        if field.name == "fleet" and _implied_fleet(old, new):
            continue  # edge.workers, which is listed, changed whether there is one
        if before is None or after is None or not dataclasses.is_dataclass(before):
            changed.append(f"[{field.name}]")  # a table added or removed: another role
            continue
        changed += [
            key for key in _changed_keys(field.name, before, after) if key not in RELOADABLE
        ]
    return changed


def _implied_fleet(old: Config, new: Config) -> bool:
    """Whether the fleet came or went only with the workers: with ``workers`` above 1 and no
    [fleet] table a node runs the embedded one (model._fleet), which no file names, so a
    refusal naming "[fleet]" would send the operator looking for a table they never wrote."""
    present = [fleet for fleet in (old.fleet, new.fleet) if fleet is not None]
    workers = [config.edge.workers if config.edge else 0 for config in (old, new)]
    return len(present) == 1 and present[0].url is None and workers[0] != workers[1]


def _changed_keys(table: str, before: Any, after: Any) -> list[str]:
    return [
        f"{table}.{field.name}"
        for field in dataclasses.fields(before)
        if getattr(before, field.name) != getattr(after, field.name)
    ]


def _domain_changes(before: DomainConfig, after: DomainConfig) -> frozenset[str]:
    changed = {
        field.name
        for field in dataclasses.fields(before)
        if getattr(before, field.name) != getattr(after, field.name)
    }
    if set(before.origins) & set(after.origins):
        # A server of the old list is still in the new one: the same site, whose first
        # server changed. Only a list with no server in common re-points the domain.
        changed.discard("origin")
    if "rules" in changed and _rule_keys(before) == _rule_keys(after):
        changed.discard("rules")
        changed.add("rules-ttl")
    return frozenset(changed)


def _rule_keys(domain: DomainConfig) -> tuple[object, ...]:
    """What of a domain's rules decides its cache keys (core/cache/rules.py)."""
    return () if domain.rules is None else domain.rules.key_part()
