"""``cdn-proxy config check FILE``: every error of a config file at once, or, when there is
none, the config the node would run with, every key written (proxy/config/resolved.py).

nginx -t stops at the first error, and so does the loader (``parse_config`` raises
ConfigError naming one key). To find the others without a second loader to keep in step,
the check sets the bad key aside and loads again, until the file loads or nothing more can be
set aside (decision 0043):

- a bad key is removed, so its default applies; a bad item of a list of values
  (``origins[1]``, ``paths[0]``) removes the whole list;
- a required key (removed, or never given) gets a stand-in that passes its check
  (``name``, ``origin``, ``listen``...), so that the rest of its table is checked;
- an error no removal can answer (the file is not TOML, a table of a list is wrong as a
  whole, a key with no stand-in) ends the check there, and says so.

Each set-aside costs one load of the file's data (a millisecond or so); at most
``MAX_ERRORS`` are reported.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from proxy.cli.api_client import Failed
from proxy.config.model import Config, parse_config
from proxy.config.resolved import resolved_toml
from proxy.errors import ConfigError

MAX_ERRORS = 100
_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")
# Stand-ins for required keys, by the key's last name: each passes its key's check.
_STAND_INS: dict[str, Any] = {
    "origin": "http://127.0.0.1:9",
    "listen": "127.0.0.1:0",
    "max_bytes": "64MiB",
    "max_object_bytes": "1MiB",
    "path": "state.db",
}


class Checked:
    """What a check found: the errors in the file's order of discovery, whether it could go
    on to the end, and the config when there was no error."""

    def __init__(self) -> None:
        self.errors: list[ConfigError] = []
        # The error no set-aside could answer: the errors after it are not known.
        self.stopped: ConfigError | None = None
        self.config: Config | None = None


def check_file(path: Path) -> Checked:
    """Every error of the config file at ``path``, or its config."""
    checked = Checked()
    try:
        data = tomllib.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        checked.errors.append(ConfigError(str(path), "no such file"))
    except (OSError, UnicodeDecodeError) as exc:
        checked.errors.append(ConfigError(str(path), f"cannot be read ({exc})"))
    except tomllib.TOMLDecodeError as exc:
        checked.errors.append(ConfigError(str(path), f"is not valid TOML ({exc})"))
    else:
        _check_data(checked, data, path.resolve().parent)
    return checked


def _check_data(checked: Checked, data: dict[str, Any], base_dir: Path) -> None:
    data = copy.deepcopy(data)
    aside = _SetAside(data)
    while len(checked.errors) < MAX_ERRORS:
        try:
            config = parse_config(data, base_dir=base_dir)
        except ConfigError as exc:
            if not aside.echo(exc.key):
                checked.errors.append(exc)
            if not aside.set_aside(exc.key):
                checked.stopped = exc
                return
            continue
        if not checked.errors:
            checked.config = config
        return


class _SetAside:
    """The file's data, with each bad key removed or given a stand-in."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.removed: set[str] = set()
        self.stood_in: set[str] = set()

    def echo(self, key: str) -> bool:
        """Whether an error on ``key`` may be what a set-aside caused: "is required" after
        the key was removed, or "sets nothing" of a table whose keys were removed."""
        return key in self.removed or any(
            removed.startswith((key + ".", key + "[")) for removed in self.removed
        )

    def set_aside(self, key: str) -> bool:
        """Remove ``key`` or give it a stand-in; False when neither can be done."""
        steps: list[str | int] = [name or int(index) for name, index in _STEP.findall(key)]
        spelled = "".join(f".{s}" if isinstance(s, str) else f"[{s}]" for s in steps)
        if key in self.stood_in or not steps or spelled.lstrip(".") != key:
            return False  # a stand-in refused, or a name with dots or brackets in it
        parent = _walk(self.data, steps[:-1])
        last = steps[-1]
        if isinstance(last, int):
            # An item of a list: of values, the whole list goes; a table of a list of tables
            # is replaced by a neutral one (removing it would renumber the tables after it).
            owner = _walk(self.data, steps[:-2])
            named = steps[-2] if len(steps) > 1 else None
            if not isinstance(parent, list) or not 0 <= last < len(parent):
                return False
            if not isinstance(named, str) or not isinstance(owner, dict):
                return False
            if named in _NEUTRAL_TABLES:
                parent[last] = _NEUTRAL_TABLES[named](self.data)
                self.stood_in.add(key)
                return True
            del owner[named]
            list_key = key.rpartition("[")[0]
            self.removed |= {key, list_key}
            if named == "origins":  # without them, "origin is required" would follow
                self.removed.add(list_key.removesuffix("s"))
            return True
        if not isinstance(parent, dict):
            return False
        if last in parent and key not in self.removed:
            del parent[last]
            self.removed.add(key)
            for companion in _COMPANIONS.get(last, ()):  # keys that need this one
                if parent.pop(companion, None) is not None:
                    self.removed.add(key.removesuffix(last) + companion)
            return True
        stand_in = _stand_in(last, self.data)
        if stand_in is None:
            return False
        parent[last] = stand_in
        self.stood_in.add(key)
        return True


def _walk(data: Any, steps: list[str | int]) -> Any:
    here = data
    for step in steps:
        if isinstance(step, int):
            if not isinstance(here, list) or not 0 <= step < len(here):
                return None
        elif not isinstance(here, dict) or step not in here:
            return None
        here = here[step]
    return here


def _stand_in(key: str, data: dict[str, Any]) -> Any:
    if key == "name":  # a domain's: one no other domain has
        return _free_name(data)
    return _STAND_INS.get(key)


def _free_name(data: dict[str, Any]) -> str:
    domains = data.get("domains")
    tables = domains if isinstance(domains, list) else []
    taken = {str(table.get("name")) for table in tables if isinstance(table, dict)}
    names = (f"check-{n}.invalid" for n in range(len(taken) + 1))
    return next(name for name in names if name not in taken)


# Keys that mean nothing without another, removed with it: a certificate without its key
# (or the reverse), a TLS listener without a certificate.
_COMPANIONS = {"tls_cert": ("tls_key", "tls_listen"), "tls_key": ("tls_cert", "tls_listen")}

# Tables that stand in for a bad table of a list: a domain, a rule.
_NEUTRAL_TABLES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "domains": lambda data: {"name": _free_name(data), "origin": _STAND_INS["origin"]},
    "rules": lambda data: {"cache": True},
}


def run(args: argparse.Namespace) -> int:
    """The command: errors on stderr and exit 2, or the resolved config on stdout and 0."""
    if (args.file is None) == (args.config_file is None):
        raise Failed("config check: name one config file: FILE, or --config FILE", code=2)
    path: Path = args.file if args.file is not None else args.config_file
    checked = check_file(path)
    if checked.config is not None:
        sys.stdout.write(resolved_toml(checked.config))
        print(
            f"cdn-proxy: {path}: the config is valid (what it runs with is above)", file=sys.stderr
        )
        return 0
    for error in checked.errors:
        print(f"cdn-proxy: config error: {error}", file=sys.stderr)
    count = len(checked.errors)
    tail = ""
    if checked.stopped is not None:
        tail = " (the check stopped at the last one: fix it and check again for more)"
    elif len(checked.errors) >= MAX_ERRORS:
        tail = f" (the first {MAX_ERRORS})"
    print(
        f"cdn-proxy: {path}: {count} {'error' if count == 1 else 'errors'}{tail}", file=sys.stderr
    )
    return 2


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    config = commands.add_parser("config", help="check a config file")
    actions = config.add_subparsers(dest="action", required=True, metavar="ACTION")
    check = actions.add_parser(
        "check",
        help="report every error of a config file, or print what it runs with",
        description=(
            "Report every error of FILE at once (exit 2), or print the config the node would "
            "run with, every key and default written, as TOML (exit 0)."
        ),
    )
    check.add_argument("file", type=Path, metavar="FILE", nargs="?", help="the TOML config file")
    # As every other command takes it; either way, exactly one file.
    check.add_argument("--config", type=Path, dest="config_file", help="the same, as a flag")
    check.set_defaults(run=run)
