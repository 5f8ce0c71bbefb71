"""A checked config written back as TOML, every key with the value in force: what
``cdn-proxy config check FILE`` prints (issue 34 §4, decision 0043).

Every key of every table is written, defaults included, in the units the code uses: sizes
in bytes, durations in seconds, relative paths made absolute against the config's folder. A
key with no value (TOML has no null) is a comment saying so. Each domain lists its servers
as ``origins`` (``origin`` is their first, derived), and its rules key by key as written
(a rule's unset key is no default: it leaves an earlier rule's value in force).

What is written is itself a config: read again, it gives the same ``Config``
(tests/test_config_check.py holds that to be so).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from proxy.config.model import Config
from proxy.config.values import Listen
from proxy.core.cache.rules import Rule, RuleSet

_TABLES = ("edge", "api", "cache", "state", "dashboard", "fleet")
_DERIVED = {"origin", "rules", "health_check"}  # a domain's keys written otherwise


def resolved_toml(config: Config) -> str:
    """The config as TOML, every key written."""
    lines: list[str] = []
    for name in _TABLES:
        table = getattr(config, name)
        if table is None:
            lines += [f"# [{name}] is not set", ""]
            continue
        lines.append(f"[{name}]")
        lines += _keys(table, ())
        lines.append("")
    for domain in config.domains:
        lines.append("[[domains]]")
        lines += _keys(domain, _DERIVED)
        if domain.health_check is not None:
            lines += ["", "[domains.health_check]", *_keys(domain.health_check, ())]
        for rule in domain.rules.rules if isinstance(domain.rules, RuleSet) else ():
            lines += ["", "[[domains.rules]]", *_rule(rule)]
        lines.append("")
    return "\n".join(lines)


def _keys(table: Any, skip: Iterable[str]) -> list[str]:
    lines = []
    for field in dataclasses.fields(table):
        if field.name in skip:
            continue
        value = getattr(table, field.name)
        if value is None:
            lines.append(f"# {field.name} is not set")
        else:
            lines.append(f"{field.name} = {_value(value)}")
    return lines


def _rule(rule: Rule) -> list[str]:
    lines = []
    for field in dataclasses.fields(rule):
        value = getattr(rule, field.name)
        if field.name == "matcher" or value is None or (field.name == "paths" and not value):
            continue
        if field.name == "edge_ttl_by_status":
            value = {str(status): seconds for status, seconds in value}
        lines.append(f"{field.name} = {_value(value)}")
    return lines


def _value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | Path | Listen):
        return json.dumps(str(value), ensure_ascii=False)
    if isinstance(value, frozenset):
        return _value(sorted(value))
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    if isinstance(value, Mapping):
        pairs = (f"{json.dumps(str(key))} = {_value(item)}" for key, item in value.items())
        return "{ " + ", ".join(pairs) + " }"
    raise TypeError(f"no TOML for {type(value).__name__}")  # a new kind of key: add it here
